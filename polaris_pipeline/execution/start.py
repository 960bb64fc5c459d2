"""What a holder does with one named task when its work starts: lease, adopt, or refuse.

Behind ``Runner.start`` for every Dagster run and single-task CLI command. The sweeper only
selects (``select_available``); the lease is taken here, so an attempt counts only work
that started and no lease lapses in a queue. In order:

- the row is gone: nothing to do;
- held by this holder's executor id (an op or run retry) and ``may_adopt``: adopt it;
- held by anyone else: refused, naming holder and expiry;
- available: lease it (attempt + 1) by compare-and-set;
- backing off or dead: leased only on an operator's intent (requeue and lease in one CAS);
- pending (a Polaris server may be running it) or unhandled: refused, operators too.

A lost CAS is re-read and judged again. The lease is written on the row as read and the
started decision carries it decoded, so a run reads its row here and once more for the
fence (``Runner.execute``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.formatting import iso_utc_seconds, purges_after
from polaris_pipeline.tasks.model import TaskRow, TaskState
from polaris_pipeline.tasks.ref import Lease

_CAS_ROUNDS = 5


class StartAction(StrEnum):
    LEASED = "leased"  # was available; leased now (a new attempt)
    ADOPTED = "adopted"  # already held by this holder; the same attempt continues
    OPERATOR_RETRY = "operator-retry"  # backing off or dead; requeued and leased now
    GONE = "gone"  # no such task (any more)
    HELD = "held"  # another holder's live lease
    NOT_AVAILABLE = "not-available"  # pending, backing off, dead or unhandled, and not taken


@dataclass(frozen=True)
class StartDecision:
    action: StartAction
    message: str
    lease: Lease | None = None
    # The row as read when the decision was taken (before any lease was written).
    task: TaskRow | None = None
    # A started task: its row as the lease left it, decoded once for the attempt.
    decoded: DecodedTask | None = None

    @property
    def started(self) -> bool:
        """True when ``lease`` is held by the caller and the work may go ahead."""
        return self.lease is not None


def _iso(ms: int | None) -> str:
    return iso_utc_seconds(ms) or "unknown"


def _started(action: StartAction, message: str, task: TaskRow, leased: TaskRow) -> StartDecision:
    """The work goes ahead: ``leased``, the row as its lease left it, decoded once."""
    return StartDecision(
        action, message, Lease.from_row(leased), task, DecodedTask.from_row(leased)
    )


def _not_run(message: str, task: TaskRow) -> StartDecision:
    return StartDecision(StartAction.NOT_AVAILABLE, message, None, task)


def gone_message(realm_id: str, task_id: int) -> str:
    return f"task {realm_id}/{task_id} is gone: it was completed (or discarded); nothing to do"


def _held_message(task: TaskRow, store: Metastore, now: int, own: bool) -> str:
    policy = store.policy.for_realm(task.realm_id)
    until = (task.start_time_ms or now) + policy.lease_timeout_ms
    who = "an earlier run of this run's lineage that is still running" if own else "another holder"
    return (
        f"task {task.label} is held by {who}: {task.executor_id}, attempt "
        f"{task.attempt_count}, lease until {_iso(until)} unless renewed; wait for that run to "
        "finish or its lease to lapse (then the sweeper runs it), or stop that holder first"
    )


def decide_start(
    store: Metastore,
    executor_id: str,
    realm_id: str,
    task_id: int,
    *,
    operator: bool = False,
    may_adopt: bool = True,
) -> StartDecision:
    """Lease, adopt or refuse task ``realm_id/task_id`` for ``executor_id``; see the module."""
    task: TaskRow | None = None
    for _ in range(_CAS_ROUNDS):
        task = store.get_task(realm_id, task_id)
        if task is None:
            return StartDecision(StartAction.GONE, gone_message(realm_id, task_id))
        now, task, state = store.task_state(task)
        if state is TaskState.LEASED:
            if task.executor_id == executor_id and may_adopt:
                return _started(
                    StartAction.ADOPTED,
                    f"task {task.label}: adopted this lineage's lease (attempt "
                    f"{task.attempt_count}); the same attempt continues",
                    task,
                    task,
                )
            own = task.executor_id == executor_id
            return StartDecision(StartAction.HELD, _held_message(task, store, now, own), None, task)
        if state is TaskState.ORPHANED:
            leased = store.lease_row(task, executor_id)
            if leased is not None:
                return _started(
                    StartAction.LEASED,
                    f"task {task.label}: leased as attempt {leased.attempt_count}",
                    task,
                    leased,
                )
            continue  # changed meanwhile: judge it again
        if state in (TaskState.BACKING_OFF, TaskState.DEAD):
            what = "backing off" if state is TaskState.BACKING_OFF else "dead"
            if not operator:
                when = (
                    f" until {_iso(task.next_attempt_ms)}"
                    if state is TaskState.BACKING_OFF
                    else " (only an operator's retry or requeue revives it)"
                )
                return _not_run(f"task {task.label} is {what}{when}; not run", task)
            leased = store.lease_row_for_operator(task, executor_id)
            if leased is not None:
                return _started(
                    StartAction.OPERATOR_RETRY,
                    f"operator retry: {what} task retried now ({task.label}, was attempt "
                    f"{task.attempt_count}, last error: {task.last_error or 'none'}); attempts "
                    "restart at 1",
                    task,
                    leased,
                )
            continue
        if state is TaskState.HELD:
            return _not_run(
                f"task {task.label} is held: {purges_after(task.held_until_ms)}; not run", task
            )
        if state is TaskState.PENDING:
            grace = store.policy.for_realm(task.realm_id).effective_grace_ms
            return _not_run(
                f"task {task.label} is pending: created at {_iso(task.create_timestamp)}, within "
                "the grace period a Polaris server may be running it in-process; it becomes "
                f"available at {_iso(task.create_timestamp + grace)}",
                task,
            )
        return _not_run(f"task {task.label} is {state.value}; it is never leased", task)
    label = task.label if task is not None else f"{realm_id}/{task_id}"
    return StartDecision(
        StartAction.HELD,
        f"task {label} kept changing under concurrent writers; launch it again",
        None,
        task,
    )
