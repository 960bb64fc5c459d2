"""One task's outcome as people and programs see it: its numbers, its one line, its JSON.

Every surface that shows an outcome takes it from here: the CLI's per-task line
and ``--json`` record, a Dagster step's output, log line and metadata (read back
into a run's total by the run report and the demo), the realm backfill's log.
Its numbers are named per surface once, in ``report/fields.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import (
    OUTCOME_FIELDS,
    RESTORED_AS_KEY,
    RETENTION,
    RETENTION_FIELDS,
    SHARED_LOCATION_KEY,
    SHARED_LOCATION_OVERRIDDEN,
    UNREFERENCED,
    UNREFERENCED_FIELDS,
    OutcomeField,
    restored_text,
)
from polaris_pipeline.report.totals import OutcomeTotals, retention_state
from polaris_pipeline.tasks.decoded import task_type_name
from polaris_pipeline.tasks.formatting import (
    add_json_times,
    error_cause,
    format_bytes,
    json_id,
    quoted_task_label,
    retention_text,
    short_task_name,
    truncate,
)
from polaris_pipeline.tasks.summary import PayloadSummary, summarize

if TYPE_CHECKING:
    from polaris_pipeline.unreferenced.report import UnreferencedReport


@dataclass(frozen=True)
class OutcomeView:
    """A ``TaskOutcome`` as shown. ``parent_id``: the task that created it (None: a root)."""

    outcome: TaskOutcome
    parent_id: int | None = None

    # -------------------------------------------------------------- fields

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

    def _number(self, field: OutcomeField) -> int:
        value = getattr(self, field.attr)
        return value if isinstance(value, int) else 0

    # -------------------------------------------------------------- lines

    def line(self, width: int | None = None) -> str:
        """The CLI's line: status, task, table, what was deleted, the error's cause.

        On a terminal too narrow for it (``width``), the task's name gives way first
        (the id stays whole), then the end of the error.
        """
        outcome, lease = self.outcome, self.outcome.lease
        head = f"{outcome.status.value:<10} {lease.realm_id}/{lease.task_id} "
        rest = ["permanent failure, not retried"] if outcome.permanent else []
        if self.table:
            rest.append(self.table)
        if outcome.result is not None:
            done = f"deleted {self.files_deleted}"
            if self.files_deleted and self.retention in ("kept", "unknown"):
                done += f" ({self.retention_text()})"
            elif self.files_deleted:
                done += f" ({format_bytes(self.bytes_freed)})"
                if self.retention == "mixed":
                    done += f"; {self.retention_text()}"
            if self.files_missing:
                done += f", {self.files_missing} were gone"
            if outcome.children:
                done += f", {self.child_tasks} child task(s)"
            rest.append(done)
        if self.shared_location_override:
            rest.append(f"{SHARED_LOCATION_OVERRIDDEN}: {self.shared_location_override}")
        if outcome.restored_as:
            rest.append(restored_text(outcome.restored_as))
        if self.unreferenced is not None:
            rest.append(self.unreferenced.summary())
        if outcome.error:
            rest.append(self.cause)
        name = short_task_name(lease.name)
        tail = "".join(f"  {part}" for part in rest)
        if width is not None and len(head) + len(name) + len(tail) > width:
            room = width - len(head) - len(tail)
            name = truncate(name, max(room, 10))
        line = head + name + tail
        return truncate(line, width) if width is not None else line

    def log_line(self, table: str | None = None) -> str:
        """A log's line (a Dagster step, a realm backfill): the task and what it did, in full.

        ``table``: the table's label, when the caller knows it better than the payload.
        """
        outcome, lease = self.outcome, self.outcome.lease
        # The name cut: a batch child's name holds its file list.
        label = quoted_task_label(lease.realm_id, lease.task_id, lease.name)
        task = f"task {label} ({self.type_name})"
        if outcome.status is Status.LEASE_LOST:
            return f"{task}: {outcome.error}"
        if outcome.restored_as:
            return (
                f"{task} {outcome.status.value}: {restored_text(outcome.restored_as)}; "
                f"lease {lease.executor_id} attempt {lease.attempt}"
            )
        if outcome.status is not Status.DONE:
            return f"{task} {outcome.status.value}: {outcome.error}"
        if outcome.result is None:
            return f"task {label} was already finished by another executor"
        where = table or self.table
        # Bytes a store keeps are never called freed.
        freed = (
            f"{self.retention_text()}, "
            if self.retention in ("kept", "unknown")
            else f"{format_bytes(self.bytes_freed, exact=True)} freed, "
            + (f"{self.retention_text()}, " if self.retention == "mixed" else "")
        )
        return (
            f"{task} done: {self.files_deleted} file(s) deleted, "
            f"{freed}"
            f"{self.files_missing} already gone, {self.refused} refused by the guard, "
            f"{self.child_tasks} child task(s); lease {lease.executor_id} "
            f"attempt {lease.attempt}"
            + (f"; table {where}" if where else "")
            + (
                f"; {SHARED_LOCATION_OVERRIDDEN}: {self.shared_location_override}"
                if self.shared_location_override
                else ""
            )
            + (f"; {self.unreferenced.summary()}" if self.unreferenced else "")
        )

    # -------------------------------------------------------------- documents

    def json(self) -> dict[str, Any]:
        """The CLI's ``--json`` record of the outcome (ids as strings, times twice)."""
        outcome, lease = self.outcome, self.outcome.lease
        doc: dict[str, Any] = {
            "id": json_id(lease.task_id),
            "realm": lease.realm_id,
            "label": short_task_name(lease.name),
            "name": lease.name,
            "type": self.summary.type if self.summary else None,
            "table": self.table,
            "role": "child" if self.parent_id is not None else "root",
            "parent_id": json_id(self.parent_id),
            "status": outcome.status.value,
            # A permanent failure cannot heal by retrying: dead-lettered at once.
            "permanent": outcome.permanent,
            "attempt": lease.attempt,
            "error": outcome.error,
            "cause": self.cause or None,
        }
        # As storage reported them: bytes_freed is null when it reported no sizes.
        doc.update({f.json_key: getattr(self, f.attr) for f in OUTCOME_FIELDS if f.json_key})
        # What became of the deleted files' bytes: freed, or kept by the store's versioning.
        doc[RETENTION] = self.retention
        doc.update({f.json_key: getattr(self, f.attr) for f in RETENTION_FIELDS if f.json_key})
        doc["children"] = [json_id(c.task_id) for c in outcome.children]
        doc[SHARED_LOCATION_KEY] = self.shared_location_override
        doc[RESTORED_AS_KEY] = outcome.restored_as
        doc[UNREFERENCED] = unreferenced_json(self.unreferenced)
        if self.unreferenced is not None:
            doc.update(
                {f.json_key: getattr(self, f.attr) for f in UNREFERENCED_FIELDS if f.json_key}
            )
        add_json_times(doc, next_attempt=outcome.next_attempt_ms)
        return doc

    def metadata(self) -> dict[str, Any]:
        """The numbers under their Dagster metadata labels: the total of this one outcome."""
        return {**OutcomeTotals.of([self.outcome]).metadata(), **self.unreferenced_metadata()}

    def unreferenced_metadata(self) -> dict[str, Any]:
        """The unreferenced phase's numbers and line under their labels; empty without one."""
        if self.unreferenced is None:
            return {}
        meta: dict[str, Any] = {f.label: self._number(f) for f in UNREFERENCED_FIELDS}
        meta[UNREFERENCED] = self.unreferenced.summary()
        return meta

    def output(self) -> dict[str, Any]:
        """A task step's output value: which task, and its numbers."""
        lease = self.outcome.lease
        doc: dict[str, Any] = {
            "task": lease.label,
            "realm_id": lease.realm_id,
            "task_id": str(lease.task_id),
            "task_type": self.type_name,
            "status": self.outcome.status.value,
            "attempt": lease.attempt,
        }
        doc.update({f.output_key: self._number(f) for f in OUTCOME_FIELDS if f.output_key})
        if self.files_retained or self.retention_unknown:  # absent on unversioned storage
            doc.update({f.output_key: self._number(f) for f in RETENTION_FIELDS if f.output_key})
        if self.unreferenced is not None:
            doc.update({f.output_key: self._number(f) for f in UNREFERENCED_FIELDS if f.output_key})
            doc[UNREFERENCED] = self.unreferenced.summary()
        doc[SHARED_LOCATION_KEY] = self.shared_location_override
        doc[RESTORED_AS_KEY] = self.outcome.restored_as
        doc["error"] = self.outcome.error
        return doc


# The numbers each task of a group step's list shows (the step's totals show all).
_PER_TASK = ("files_deleted", "bytes_freed")


def per_task_metadata(output: Mapping[str, Any]) -> dict[str, Any]:
    """One task of a group step's ``tasks`` metadata, from its step output (``output()``)."""
    entry: dict[str, Any] = {
        "task id": output.get("task_id"),
        "type": output.get("task_type"),
        "status": output.get("status"),
        "lease attempt": output.get("attempt"),
    }
    for f in OUTCOME_FIELDS:
        if f.attr in _PER_TASK and f.output_key:
            entry[f.label] = output.get(f.output_key, 0)
    return entry


def unreferenced_json(report: UnreferencedReport | None) -> dict[str, Any] | None:
    """The CLI's ``--json`` record of a table's unreferenced phase (None: it did not run)."""
    if report is None:
        return None
    return {
        "mode": report.mode,
        "prefix": report.prefix,
        "refusal": report.refusal,
        "error": report.error,
        "listed": report.listed,
        "deleted": report.deleted,
        "would_delete": report.would_delete,
        # As storage reported them: null when a deleted file's size was not known.
        "bytes": report.bytes,
        "kept_newer": report.kept_newer,
        "refused_paths": report.refused_paths,
        "failed": report.failures,
        "directories_removed": report.directories_removed,
        "paths": report.paths,
        "more_paths": report.more_paths,
        "kept": report.kept_sample,
        "summary": report.summary(),
    }


def _counts_json(counts: Mapping[str, int]) -> dict[str, int]:
    """``{"tasks": 4, "done": 3, "failed": 1, "dead": 0, "lease_lost": 0}``."""
    return {
        "tasks": sum(counts.values()),
        **{s.value.replace("-", "_"): counts.get(s.value, 0) for s in Status},
    }


def totals_json(totals: OutcomeTotals) -> dict[str, Any]:
    """A total for the CLI's ``--json``: counts by status (all, roots, children), numbers."""
    doc: dict[str, Any] = {
        **_counts_json(totals.by_status),
        "roots": _counts_json(totals.tasks),
        "children": _counts_json(totals.children),
    }
    for f in OUTCOME_FIELDS:
        if f.json_key:
            doc[f.json_key] = getattr(totals, f.attr)
    doc[RETENTION] = retention_state(
        totals.files_deleted, totals.files_retained, totals.retention_unknown
    )
    for f in RETENTION_FIELDS:
        if f.json_key:  # bytes kept: null when storage did not report their sizes
            attr = "bytes_retained_known" if f.attr == "bytes_retained" else f.attr
            doc[f.json_key] = getattr(totals, attr)
    if totals.bytes_unknown:  # a lower bound is not a count a script may add up
        doc["bytes_freed"] = None
    return doc
