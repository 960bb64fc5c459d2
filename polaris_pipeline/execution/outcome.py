"""What one attempt of a task came to: its ``Status`` and its ``TaskOutcome``.

A leaf of value types, so readers (``report/``, the run-report sensor) load no engine. A
``TaskOutcome`` is frozen (``evolve`` makes a changed one). A table whose unreferenced
phase runs after its children carries a ``TableFinish`` for its last stage, in a form one
Dagster step can hand another. Both carry the attempt's ``DecodedTask``: never decoded again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced.mode import UnreferencedMode

if TYPE_CHECKING:
    from polaris_pipeline.cleanup.context import CleanupResult


class Status(StrEnum):
    DONE = "done"
    FAILED = "failed"  # recorded, will be retried after a backoff
    DEAD = "dead"  # recorded, dead-lettered
    LEASE_LOST = "lease-lost"  # someone else holds the task now; we stopped
    # The dropped table is live again (re-registered from its last metadata file): the
    # purge ended, nothing deleted; ``TaskOutcome.restored_as`` names the live entity.
    RESTORED = "restored"


# The keys of ``TableFinish.to_dict``: the ones the task job's runs have always carried.
_LEASE, _MODE, _ROW = "lease", "mode", "row"


@dataclass(frozen=True)
class TableFinish:
    """A table waiting for its children: what its last stage needs once they ran.

    ``mode``: ``DELETE``, its row still held by ``lease`` until then; ``REPORT``, its attempt
    completed the row and the report is made from ``task`` as the attempt decoded it.
    """

    lease: Lease
    mode: UnreferencedMode
    task: DecodedTask | None = None

    @property
    def row(self) -> TaskRow | None:
        """The row the attempt read (``task.row``)."""
        return self.task.row if self.task is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-safe form a Dagster step hands the table's last step: the row,
        not its decoding, which the last step makes once from it (``from_dict``)."""
        row = dataclasses.asdict(self.row) if self.row is not None else None
        return {_LEASE: self.lease.to_dict(), _MODE: self.mode.value, _ROW: row}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableFinish:
        """``to_dict``'s form back, its row decoded; ValueError when the lease or the
        mode is malformed."""
        row = data.get(_ROW)
        return cls(
            Lease.from_dict(data[_LEASE]),
            UnreferencedMode.parse(data[_MODE]),
            DecodedTask.from_row(TaskRow(**row)) if row else None,
        )


@dataclass(frozen=True)
class TaskOutcome:
    lease: Lease
    status: Status
    task_type: str | None = None
    error: str | None = None
    result: CleanupResult | None = None
    children: Sequence[Lease] = ()
    next_attempt_ms: int | None = None
    # The error will not go away by retrying at once (bad payload, guard refusal).
    permanent: bool = False
    # False when the failure was left unrecorded for the caller to retry (see execute).
    recorded: bool = True
    # False when the lease was found lost before anything was done.
    started: bool = True
    # The task as the attempt read and decoded it (None: gone before it started). A
    # finished task's row is deleted, so what it was about (its table) is read from here.
    task: DecodedTask | None = None
    # A table whose unreferenced phase runs once its children are done
    # (``Runner.finish_table``); None: nothing runs after.
    finish: TableFinish | None = None
    # ``RESTORED``: the live entity the table came back as (``Overlap.entity()``).
    restored_as: str | None = None

    def evolve(self, **changes: Any) -> TaskOutcome:
        """A new outcome: this one with ``changes`` (field names, as ``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    @property
    def row(self) -> TaskRow | None:
        """The task's row as the attempt read it (``task.row``)."""
        return self.task.row if self.task is not None else None

    @property
    def deferred(self) -> bool:
        """The table waits for its children before its last stage (``finish``)."""
        return self.finish is not None

    @property
    def ok(self) -> bool:
        return self.status is Status.DONE


# The Runner's progress: (the lease, how many done, of how many (0: unknown), of what).
ProgressFn = Callable[[Lease, int, int, str], None]
