"""One task's outcome as every renderer reads it: its numbers, table, type and cause.

Derived from the frozen ``TaskOutcome`` alone, once per renderer call; the renderers
(``outcome_line``, ``outcome_json``, ``outcome_metadata``) word it, each for one
surface. Its numbers are named per surface once, in ``report/fields.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from polaris_pipeline.execution.outcome import TaskOutcome
from polaris_pipeline.report.fields import OutcomeField
from polaris_pipeline.report.totals import retention_state
from polaris_pipeline.tasks.decoded import task_type_name
from polaris_pipeline.tasks.formatting import error_cause, retention_text
from polaris_pipeline.tasks.summary import PayloadSummary, summarize

if TYPE_CHECKING:
    from polaris_pipeline.unreferenced.report import UnreferencedReport


@dataclass(frozen=True)
class OutcomeFacts:
    """What ``outcome`` did, in the names ``report/fields.py`` gives each number."""

    outcome: TaskOutcome

    @cached_property
    def summary(self) -> PayloadSummary | None:
        """What the task was about (type, table), as its attempt decoded it."""
        task = self.outcome.task
        return summarize(task) if task is not None else None

    @property
    def table(self) -> str | None:
        return self.summary.table if self.summary else None

    @property
    def type_name(self) -> str:
        return task_type_name(self.outcome.task_type)

    @property
    def cause(self) -> str:
        """The error without the task's label it starts with; empty without an error."""
        lease = self.outcome.lease
        return error_cause(self.outcome.error, lease.realm_id, lease.task_id, lease.name)

    @property
    def files_deleted(self) -> int:
        result = self.outcome.result
        return result.deleted if result else 0

    @property
    def files_missing(self) -> int:
        result = self.outcome.result
        return result.missing if result else 0

    @property
    def bytes_freed(self) -> int | None:
        """Bytes freed; None when storage reported no sizes."""
        result = self.outcome.result
        return result.bytes_freed if result else 0

    @property
    def files_retained(self) -> int:
        """Files deleted on a store that keeps deleted objects (versioning, soft delete)."""
        result = self.outcome.result
        return result.retained if result else 0

    @property
    def bytes_retained(self) -> int | None:
        """Their bytes, kept by the store; None when storage reported no sizes."""
        result = self.outcome.result
        return result.bytes_retained if result else 0

    @property
    def retention_unknown(self) -> int:
        """Files deleted where the store would not say whether it keeps them."""
        result = self.outcome.result
        return result.retention_unknown if result else 0

    @property
    def retention(self) -> str | None:
        """``freed``, ``kept``, ``unknown`` or ``mixed``; None when nothing was deleted."""
        return retention_state(self.files_deleted, self.files_retained, self.retention_unknown)

    def retention_text(self) -> str:
        """Deleted files whose bytes were not freed, in words; empty when none."""
        return retention_text(self.files_retained, self.bytes_retained, self.retention_unknown)

    @property
    def refused(self) -> int:
        result = self.outcome.result
        return len(result.refused) if result else 0

    @property
    def child_tasks(self) -> int:
        return len(self.outcome.children)

    @property
    def unreferenced(self) -> UnreferencedReport | None:
        result = self.outcome.result
        return result.unreferenced if result else None

    @property
    def shared_location_override(self) -> str | None:
        """The live entity an operator's override let the purge go past; None: none."""
        result = self.outcome.result
        return result.shared_location_override if result else None

    @property
    def unreferenced_files(self) -> int:
        return self.unreferenced.files if self.unreferenced else 0

    @property
    def unreferenced_bytes(self) -> int | None:
        return self.unreferenced.bytes if self.unreferenced else 0

    @property
    def unreferenced_kept_newer(self) -> int:
        return self.unreferenced.kept_newer if self.unreferenced else 0

    @property
    def unreferenced_left(self) -> int:
        return self.unreferenced.left if self.unreferenced else 0

    def number(self, field: OutcomeField) -> int:
        """``field``'s number, 0 where storage reported none (a total adds it up)."""
        value = getattr(self, field.attr)
        return value if isinstance(value, int) else 0
