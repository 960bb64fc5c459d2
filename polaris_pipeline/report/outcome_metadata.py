"""One outcome as Dagster keeps it: a step's metadata, its output value, a group's entry.

Each reads the structured outcome; nothing is read back from an output or a tag.
"""

from __future__ import annotations

from typing import Any

from polaris_pipeline.execution.outcome import TaskOutcome
from polaris_pipeline.report.fields import (
    OUTCOME_FIELDS,
    RESTORED_AS_KEY,
    RETENTION_FIELDS,
    SHARED_LOCATION_KEY,
    UNREFERENCED,
    UNREFERENCED_FIELDS,
)
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.tasks.decoded import task_type_name
from polaris_pipeline.tasks.ref import Lease, TaskRef


def outcome_metadata(outcome: TaskOutcome) -> dict[str, Any]:
    """The numbers under their Dagster metadata labels: the total of this one outcome."""
    return {**OutcomeTotals.of([outcome]).metadata(), **unreferenced_metadata(outcome)}


def unreferenced_metadata(outcome: TaskOutcome) -> dict[str, Any]:
    """The unreferenced phase's numbers and line under their labels; empty without one."""
    facts = OutcomeFacts(outcome)
    if facts.unreferenced is None:
        return {}
    meta: dict[str, Any] = {f.label: facts.number(f) for f in UNREFERENCED_FIELDS}
    meta[UNREFERENCED] = facts.unreferenced.summary()
    return meta


def step_output(outcome: TaskOutcome) -> dict[str, Any]:
    """A task step's output value: which task, and its numbers."""
    facts, lease = OutcomeFacts(outcome), outcome.lease
    doc: dict[str, Any] = {
        "task": lease.label,
        "realm_id": lease.realm_id,
        "task_id": str(lease.task_id),
        "task_type": facts.type_name,
        "status": outcome.status.value,
        "attempt": lease.attempt,
    }
    doc.update({f.output_key: facts.number(f) for f in OUTCOME_FIELDS if f.output_key})
    if facts.files_retained or facts.retention_unknown:  # absent on unversioned storage
        doc.update({f.output_key: facts.number(f) for f in RETENTION_FIELDS if f.output_key})
    if facts.unreferenced is not None:
        doc.update({f.output_key: facts.number(f) for f in UNREFERENCED_FIELDS if f.output_key})
        doc[UNREFERENCED] = facts.unreferenced.summary()
    doc[SHARED_LOCATION_KEY] = facts.shared_location_override
    doc[RESTORED_AS_KEY] = outcome.restored_as
    doc["error"] = outcome.error
    return doc


# The numbers each task of a group step's list shows (the step's totals show all).
_PER_TASK = ("files_deleted", "bytes_freed")


def per_task_metadata(outcome: TaskOutcome) -> dict[str, Any]:
    """One task of a group step's ``tasks`` metadata: the task, its status, its numbers."""
    facts, lease = OutcomeFacts(outcome), outcome.lease
    entry: dict[str, Any] = {
        "task id": str(lease.task_id),
        "type": facts.type_name,
        "status": outcome.status.value,
        "lease attempt": lease.attempt,
    }
    entry.update({f.label: facts.number(f) for f in OUTCOME_FIELDS if f.attr in _PER_TASK})
    return entry


def not_run_metadata(status: str, task: TaskRef | Lease | None) -> dict[str, Any]:
    """A group step's entry for a task it ran no work of (skipped, already done, lease
    lost): the task and what the step found, no numbers of its own."""
    code = task.task_type_code if task is not None else None
    entry: dict[str, Any] = {
        "task id": str(task.task_id) if task is not None else None,
        "type": task_type_name(code) if code else None,
        "status": status,
        "lease attempt": task.attempt if isinstance(task, Lease) else None,
    }
    entry.update({f.label: 0 for f in OUTCOME_FIELDS if f.attr in _PER_TASK})
    return entry
