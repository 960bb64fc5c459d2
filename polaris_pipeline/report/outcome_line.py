"""One outcome as a line of text: the CLI's (fits a terminal) and a log's (in full)."""

from __future__ import annotations

from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import SHARED_LOCATION_OVERRIDDEN, restored_text
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.tasks.formatting import (
    format_bytes,
    quoted_task_label,
    short_task_name,
    truncate,
)


def cli_line(outcome: TaskOutcome, width: int | None = None) -> str:
    """The CLI's line: status, task, table, what was deleted, the error's cause.

    On a terminal too narrow for it (``width``), the task's name gives way first
    (the id stays whole), then the end of the error.
    """
    facts, lease = OutcomeFacts(outcome), outcome.lease
    head = f"{outcome.status.value:<10} {lease.realm_id}/{lease.task_id} "
    rest = ["permanent failure, not retried"] if outcome.permanent else []
    if facts.table:
        rest.append(facts.table)
    if outcome.result is not None:
        done = f"deleted {facts.files_deleted}"
        if facts.files_deleted and facts.retention in ("kept", "unknown"):
            done += f" ({facts.retention_text()})"
        elif facts.files_deleted:
            done += f" ({format_bytes(facts.bytes_freed)})"
            if facts.retention == "mixed":
                done += f"; {facts.retention_text()}"
        if facts.files_missing:
            done += f", {facts.files_missing} were gone"
        if outcome.children:
            done += f", {facts.child_tasks} child task(s)"
        rest.append(done)
    if facts.shared_location_override:
        rest.append(f"{SHARED_LOCATION_OVERRIDDEN}: {facts.shared_location_override}")
    if outcome.restored_as:
        rest.append(restored_text(outcome.restored_as))
    if facts.unreferenced is not None:
        rest.append(facts.unreferenced.summary())
    if outcome.error:
        rest.append(facts.cause)
    name = short_task_name(lease.name)
    tail = "".join(f"  {part}" for part in rest)
    if width is not None and len(head) + len(name) + len(tail) > width:
        room = width - len(head) - len(tail)
        name = truncate(name, max(room, 10))
    line = head + name + tail
    return truncate(line, width) if width is not None else line


def log_line(outcome: TaskOutcome, table: str | None = None) -> str:
    """A log's line (a Dagster step, a realm backfill): the task and what it did, in full.

    ``table``: the table's label, when the caller knows it better than the payload.
    """
    facts, lease = OutcomeFacts(outcome), outcome.lease
    # The name cut: a batch child's name holds its file list.
    label = quoted_task_label(lease.realm_id, lease.task_id, lease.name)
    task = f"task {label} ({facts.type_name})"
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
    where = table or facts.table
    # Bytes a store keeps are never called freed.
    freed = (
        f"{facts.retention_text()}, "
        if facts.retention in ("kept", "unknown")
        else f"{format_bytes(facts.bytes_freed, exact=True)} freed, "
        + (f"{facts.retention_text()}, " if facts.retention == "mixed" else "")
    )
    override = facts.shared_location_override
    return (
        f"{task} done: {facts.files_deleted} file(s) deleted, "
        f"{freed}"
        f"{facts.files_missing} already gone, {facts.refused} refused by the guard, "
        f"{facts.child_tasks} child task(s); lease {lease.executor_id} "
        f"attempt {lease.attempt}"
        + (f"; table {where}" if where else "")
        + (f"; {SHARED_LOCATION_OVERRIDDEN}: {override}" if override else "")
        + (f"; {facts.unreferenced.summary()}" if facts.unreferenced else "")
    )
