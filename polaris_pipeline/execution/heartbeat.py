"""Renewing, in the background, every lease one executor holds (the ``Runner``'s heartbeat)."""

from __future__ import annotations

import logging
import threading

from polaris_pipeline.errors import one_line
from polaris_pipeline.metastore import Metastore

log = logging.getLogger("polaris_pipeline.runner")


class Heartbeat:
    """Renews, in the background, every lease its executor holds in the given realms."""

    def __init__(self, metastore: Metastore, executor_id: str, interval_s: float) -> None:
        self._metastore = metastore
        self._executor_id = executor_id
        self._interval_s = interval_s
        self._realms: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def watch(self, realm_id: str) -> None:
        with self._lock:
            self._realms.add(realm_id)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)
            self._thread.start()

    def beat(self) -> None:
        with self._lock:
            realms = sorted(self._realms)
        for realm in realms:
            try:
                self._metastore.renew_held_by(realm, self._executor_id)
            except Exception as exc:
                # A missed beat is survivable: the lease lasts several intervals,
                # and the fencing check catches a lease that really lapsed. Any error,
                # not only the metastore's (a pool timeout is SQLAlchemy's own): one
                # that ended this thread would stop every later beat, unseen.
                self.failures += 1
                log.warning("lease heartbeat failed: %s", one_line(exc))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
