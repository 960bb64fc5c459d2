"""Fencing: whether a lease still holds its task, asked of the database, then of a clock.

``fence`` asks the database and notes until when it guarantees the lease, so
that ``still_held`` can be asked before every single delete for free.
"""

from __future__ import annotations

import time

from polaris_pipeline.errors import LeaseLost
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.ref import Lease


class LeaseDeadlines:
    """Until when the database guarantees each lease a holder fenced."""

    def __init__(self, metastore: Metastore) -> None:
        self._metastore = metastore
        # (realm, task id) -> the elapsed-clock time until which the lease is guaranteed.
        self._deadlines: dict[tuple[str, int], float] = {}

    def fence(self, lease: Lease) -> None:
        """Raise LeaseLost unless ``lease`` still holds its task (database clock)."""
        # The database reads its clock after this: the period counts from here, however
        # late the answer comes (a slow answer must not stretch the lease).
        asked = elapsed_clock()
        remaining = self._metastore.held_for_ms(lease)
        if remaining is None:
            self._deadlines.pop((lease.realm_id, lease.task_id), None)
            raise LeaseLost(f"lease on {lease.label} (attempt {lease.attempt}) was lost")
        # Keep a margin: a delete started just before the deadline must end before it.
        usable_s = remaining / 1000 * 0.8
        self._deadlines[(lease.realm_id, lease.task_id)] = asked + usable_s

    def still_held(self, lease: Lease) -> None:
        """Raise LeaseLost if the lease may have lapsed: fence again once the noted period ended."""
        deadline = self._deadlines.get((lease.realm_id, lease.task_id))
        if deadline is None or elapsed_clock() >= deadline:
            self.fence(lease)

    def clear(self) -> None:
        self._deadlines.clear()


def elapsed_clock() -> float:
    """Seconds on a clock that keeps running while the process or machine is suspended.

    CLOCK_BOOTTIME counts a VM pause or a SIGSTOP; the lease period on the
    database does too, so a resumed holder sees its deadline passed.
    """
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        return time.clock_gettime(boottime)
    return time.monotonic()
