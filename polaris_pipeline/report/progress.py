"""Progress of long work (a table's deletes, a realm's sweep), shown at most so often.

One sink (``ProgressSink``) for every surface: the CLI's terminal line, a Dagster
step's log, a realm backfill's log, in one wording (``progress_text``). A log
takes a line every ``PROGRESS_INTERVAL_S`` (every line is an event a run stores)
and none in the first interval (a short task's own outcome line says it all); a
terminal line rewritten in place takes every update (``interval_s=0``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from polaris_pipeline.tasks.ref import Lease

PROGRESS_INTERVAL_S = 10.0


def progress_text(lease: Lease, done: int, total: int, what: str) -> str:
    """``POLARIS/4711: batch files 3/10 (30%)``; without the total when it is 0 (unknown)."""
    of = f"/{total} ({100 * done // total}%)" if total else ""
    return f"{lease.realm_id}/{lease.task_id}: {what} {done}{of}"


class ProgressSink:
    """Progress lines to ``write``, at most one per ``interval_s`` (0: every one)."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._interval_s = interval_s
        self._clock = clock
        self._last = clock()

    def _due(self) -> bool:
        if self._interval_s <= 0:
            return True
        now = self._clock()
        if now - self._last < self._interval_s:
            return False
        self._last = now
        return True

    def __call__(self, lease: Lease, done: int, total: int, what: str) -> None:
        """The Runner's progress of ``lease``: ``done`` of ``total`` ``what``."""
        if self._due():
            self._write(progress_text(lease, done, total, what))

    def note(self, text: str) -> bool:
        """Any other progress text, under the same throttle; True when it was written."""
        if not self._due():
            return False
        self._write(text)
        return True
