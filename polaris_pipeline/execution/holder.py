"""Who holds a Runner's leases: one executor id, the heartbeat renewing them, the fences.

The id is unique to this holder (host, process, a random part): lease renewals and
fencing depend on it. A holder that abandons a batch takes a new id (``renew``), so
that the old leases lapse and any sweeper, this one included, can take them.
"""

from __future__ import annotations

import os
import socket
import uuid

from polaris_pipeline.execution.fencing import LeaseDeadlines
from polaris_pipeline.execution.heartbeat import Heartbeat
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings.metastore import DEFAULT_EXECUTOR_PREFIX


def make_executor_id(kind: str = "sweep", prefix: str = DEFAULT_EXECUTOR_PREFIX) -> str:
    """An executor id unique to this holder: the lease renewals and fencing depend on it."""
    return f"{prefix}:{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class Holder:
    """One executor id, its heartbeat (every ``interval_s``) and its fences' deadlines."""

    def __init__(self, metastore: Metastore, executor_id: str, interval_s: float) -> None:
        self._metastore = metastore
        self._interval_s = interval_s
        self._first_id = executor_id
        self.executor_id = executor_id
        self.heartbeat = Heartbeat(metastore, executor_id, interval_s)
        self.deadlines = LeaseDeadlines(metastore)

    def watch(self, realm_id: str) -> None:
        """Renew this holder's leases in ``realm_id`` from now on."""
        self.heartbeat.watch(realm_id)

    def renew(self) -> None:
        """Abandon every lease held: stop renewing them, and hold under a new id.

        The new id is the first one with a random part added, so the operator's prefix
        and the command's kind it starts with stay (lastAttemptExecutorId shows them).
        """
        self.heartbeat.stop()
        self.deadlines.clear()
        self.executor_id = f"{self._first_id}:{uuid.uuid4().hex[:12]}"
        self.heartbeat = Heartbeat(self._metastore, self.executor_id, self._interval_s)

    def stop(self) -> None:
        self.heartbeat.stop()
