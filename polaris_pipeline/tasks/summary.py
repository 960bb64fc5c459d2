"""What a task is about, decoded from its payload: its type, table and files.

Read-only views (``tasks list``, ``tasks show``) show this beside a task's
state. A payload that does not decode is not an error here: the summary says
why, and the task still lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import STATUS_REQUEUED, TaskPolicy, TaskRow, TaskState
from polaris_pipeline.tasks.payloads import BatchCleanupPayload, ManifestCleanupPayload


@dataclass(frozen=True)
class PayloadSummary:
    type: str
    table: str | None = None  # namespace.table
    metadata_location: str | None = None  # table cleanup: the dropped table's metadata file
    manifest_path: str | None = None  # manifest cleanup
    batch_files: int | None = None  # batch cleanup: how many files it names
    entity_id: int | None = None  # table cleanup: the dropped entity's id
    is_view: bool = False
    problem: str | None = None  # why the payload could not be decoded


def summarize(task: TaskRow | DecodedTask) -> PayloadSummary:
    """What ``task`` cleans up, from its decoded payload (decoded here when given a row)."""
    decoded = DecodedTask.of(task)
    kind, payload, entity = decoded.type_name, decoded.payload, decoded.entity
    if decoded.problem is not None or payload is None or decoded.identifier is None:
        return PayloadSummary(kind, problem=decoded.problem)
    table = str(decoded.identifier)
    if entity is not None:
        return PayloadSummary(
            kind,
            table=table,
            metadata_location=entity.metadata_location,
            entity_id=entity.id,
            is_view=entity.is_view,
        )
    if isinstance(payload, ManifestCleanupPayload):
        return PayloadSummary(kind, table=table, manifest_path=payload.manifest.manifest_path)
    assert isinstance(payload, BatchCleanupPayload)
    return PayloadSummary(kind, table=table, batch_files=len(payload.batch_files))


def available_at_ms(task: TaskRow, state: TaskState, now_ms: int, policy: TaskPolicy) -> int | None:
    """When ``task`` is next available to a sweep (database clock); None: not by itself.

    Orphaned: now. Backing off: its next attempt time. Pending: when the grace period
    ends. Held: when its hold ends. Leased: when the lease expires. Dead: only an
    operator's requeue revives it.
    """
    policy = policy.for_realm(task.realm_id)  # a realm may have its own timeout and grace
    if state is TaskState.ORPHANED:
        return now_ms
    if state is TaskState.BACKING_OFF:
        return task.next_attempt_ms
    if state is TaskState.PENDING:
        return task.create_timestamp + policy.effective_grace_ms
    if state is TaskState.LEASED:
        return (task.start_time_ms or now_ms) + policy.lease_timeout_ms
    if state is TaskState.HELD:
        return task.held_until_ms
    return None


def why_available(task: TaskRow) -> str:
    """Why an available (orphaned) task is available, for the sweeper's tick log."""
    if task.status == STATUS_REQUEUED:
        return "requeued by an operator"
    if task.executor_id is None:
        return "never leased, past the grace period"
    if task.next_attempt_ms is not None:
        return "backoff over"
    if task.lease_released:
        return "last attempt ended, lease released"
    return "lease expired"


def orphaned_since_ms(task: TaskRow, policy: TaskPolicy) -> int:
    """When an orphaned task became available to the sweepers (epoch ms, database clock).

    The latest of: creation (plus the realm's grace for Polaris's never-leased tasks), the end
    of its last lease, the end of its backoff, its last update (a requeue's moment), and the
    end of its hold (a purge held a week is not a week-old orphan the moment it is free).
    """
    policy = policy.for_realm(task.realm_id)
    since = task.last_update_timestamp
    if task.executor_id is None:
        grace = 0 if task.created_by_us else policy.effective_grace_ms
        since = max(since, task.create_timestamp + grace)
    start = task.start_time_ms
    if task.executor_id is not None and start is not None:
        lease_end = task.end_time_ms if task.lease_released else start + policy.lease_timeout_ms
        since = max(since, lease_end or 0)
    if task.next_attempt_ms is not None:
        since = max(since, task.next_attempt_ms)
    if task.held_until_ms is not None:
        since = max(since, task.held_until_ms)
    return max(since, task.create_timestamp)
