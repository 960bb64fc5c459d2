"""One outcome, its unreferenced phase and a total as the CLI's ``--json`` records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import (
    OUTCOME_FIELDS,
    RESTORED_AS_KEY,
    RETENTION,
    RETENTION_FIELDS,
    SHARED_LOCATION_KEY,
    UNREFERENCED,
    UNREFERENCED_FIELDS,
)
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.report.totals import OutcomeTotals, retention_state
from polaris_pipeline.tasks.formatting import add_json_times, json_id, short_task_name

if TYPE_CHECKING:
    from polaris_pipeline.unreferenced.report import UnreferencedReport


def outcome_json(outcome: TaskOutcome, parent_id: int | None = None) -> dict[str, Any]:
    """The CLI's ``--json`` record of ``outcome`` (ids as strings, times twice);
    ``parent_id``: the task that created it (None: a root)."""
    facts, lease = OutcomeFacts(outcome), outcome.lease
    doc: dict[str, Any] = {
        "id": json_id(lease.task_id),
        "realm": lease.realm_id,
        "label": short_task_name(lease.name),
        "name": lease.name,
        "type": facts.summary.type if facts.summary else None,
        "table": facts.table,
        "role": "child" if parent_id is not None else "root",
        "parent_id": json_id(parent_id),
        "status": outcome.status.value,
        # A permanent failure cannot heal by retrying: dead-lettered at once.
        "permanent": outcome.permanent,
        "attempt": lease.attempt,
        "error": outcome.error,
        "cause": facts.cause or None,
    }
    # As storage reported them: bytes_freed is null when it reported no sizes.
    doc.update({f.json_key: getattr(facts, f.attr) for f in OUTCOME_FIELDS if f.json_key})
    # What became of the deleted files' bytes: freed, or kept by the store's versioning.
    doc[RETENTION] = facts.retention
    doc.update({f.json_key: getattr(facts, f.attr) for f in RETENTION_FIELDS if f.json_key})
    doc["children"] = [json_id(c.task_id) for c in outcome.children]
    doc[SHARED_LOCATION_KEY] = facts.shared_location_override
    doc[RESTORED_AS_KEY] = outcome.restored_as
    doc[UNREFERENCED] = unreferenced_json(facts.unreferenced)
    if facts.unreferenced is not None:
        doc.update({f.json_key: getattr(facts, f.attr) for f in UNREFERENCED_FIELDS if f.json_key})
    add_json_times(doc, next_attempt=outcome.next_attempt_ms)
    return doc


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
    doc.update({f.json_key: getattr(totals, f.attr) for f in OUTCOME_FIELDS if f.json_key})
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
