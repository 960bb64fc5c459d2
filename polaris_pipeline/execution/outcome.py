"""What one attempt of a task came to: its ``Status`` and its ``TaskOutcome``.

A leaf: the value types only, so that what reads outcomes (``report/``, the
run-report sensor) loads no cleanup engine. The ``Runner`` (``runner.py``)
makes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease

if TYPE_CHECKING:
    from polaris_pipeline.cleanup.context import CleanupResult


class Status(StrEnum):
    DONE = "done"
    FAILED = "failed"  # recorded, will be retried after a backoff
    DEAD = "dead"  # recorded, dead-lettered
    LEASE_LOST = "lease-lost"  # someone else holds the task now; we stopped


@dataclass
class TaskOutcome:
    lease: Lease
    status: Status
    task_type: str | None = None
    error: str | None = None
    result: CleanupResult | None = None
    children: list[Lease] = field(default_factory=list)
    next_attempt_ms: int | None = None
    # The error will not go away by retrying at once (bad payload, guard refusal).
    permanent: bool = False
    # False when the failure was left unrecorded for the caller to retry (see execute).
    recorded: bool = True
    # False when the lease was found lost before anything was done.
    started: bool = True
    # The task's row as the attempt read it (None: gone before it started). A finished
    # task's row is deleted, so what it was about (its table) is read from here.
    row: TaskRow | None = None
    # A table whose unreferenced phase runs once its children are done
    # (``Runner.finish_table``): "delete", its row still held until then; "report", its
    # row completed as ever (a report changes nothing). None: nothing runs after.
    unreferenced_after: str | None = None

    @property
    def deferred(self) -> bool:
        return self.unreferenced_after is not None

    @property
    def ok(self) -> bool:
        return self.status is Status.DONE


# The Runner's progress: (the lease, how many done, of how many (0: unknown), of what).
ProgressFn = Callable[[Lease, int, int, str], None]
