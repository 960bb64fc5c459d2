"""What each state transition of a task writes, as pure functions: properties in, properties out.

``store.Metastore`` reads a row, asks one of these, and writes the result with a
compare-and-set; the clock (``now_ms``) and randomness are arguments. The PostgreSQL
statements ``queries.LEASE_BATCH`` and ``RENEW_HELD_BY`` make the changes of ``lease``
and ``renew`` in SQL; tests/test_transitions.py holds the two in agreement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from polaris_pipeline.errors import SHARED_LOCATION_REFUSED
from polaris_pipeline.tasks.model import (
    CREATOR,
    PERMANENT_TRUE,
    STATUS_DEAD,
    STATUS_FAILED,
    STATUS_REQUEUED,
    Prop,
    TaskPolicy,
    TaskRow,
    TaskState,
    attempt_count_of,
    bounded_error,
    start_time_of,
)
from polaris_pipeline.tasks.ref import Lease

Properties = dict[str, str]


class HolderCas(StrEnum):
    """What a compare-and-set by a lease holder found: applied, row gone, lease lost."""

    APPLIED = "applied"
    GONE = "gone"
    LOST = "lost"


class CompleteOutcome(StrEnum):
    DONE = "done"  # we deleted the row
    ALREADY_GONE = "already-gone"  # someone else finished it: also success
    LEASE_LOST = "lease-lost"


class FailOutcome(StrEnum):
    BACKING_OFF = "backing-off"
    DEAD = "dead"
    ALREADY_GONE = "already-gone"
    LEASE_LOST = "lease-lost"


@dataclass(frozen=True)
class FailureRecord:
    outcome: FailOutcome
    next_attempt_ms: int | None = None
    # Dead-lettered at once: the failure is one retrying cannot heal.
    permanent: bool = False


class DiscardOutcome(StrEnum):
    DISCARDED = "discarded"
    WOULD_DISCARD = "would-discard"  # dry run
    REFUSED = "refused"  # not unhandled, gone, or changed meanwhile


@dataclass(frozen=True)
class DiscardResult:
    realm_id: str
    task_id: int
    outcome: DiscardOutcome
    name: str = ""
    detail: str = ""  # why a refusal was refused


def complete_outcome(status: HolderCas) -> CompleteOutcome:
    return {
        HolderCas.APPLIED: CompleteOutcome.DONE,
        HolderCas.GONE: CompleteOutcome.ALREADY_GONE,
        HolderCas.LOST: CompleteOutcome.LEASE_LOST,
    }[status]


def unrecorded_failure(status: HolderCas) -> FailureRecord:
    """The record of a failure that could not be written: the row was gone or the lease lost."""
    if status is HolderCas.APPLIED:
        raise ValueError("an applied failure has its own record")
    return FailureRecord(
        FailOutcome.ALREADY_GONE if status is HolderCas.GONE else FailOutcome.LEASE_LOST
    )


def require_executor(executor_id: str) -> str:
    """``executor_id``, or ValueError when empty: a row holding "" reads as held by nobody."""
    if not executor_id:
        raise ValueError("a lease needs a non-empty executor id")
    return executor_id


def _holder(props: Mapping[str, str], executor_id: str, now_ms: int) -> Properties:
    return {**props, Prop.EXECUTOR: require_executor(executor_id), Prop.START_TIME: str(now_ms)}


def original_properties(raw_text: str) -> Properties:
    """Where a lease of undecodable properties starts: the original kept, so nothing is lost.

    The attempt then fails on it (``TaskRow.task_type``), and the failure is recorded.
    """
    return {Prop.ORIGINAL: raw_text}


def lease(props: Mapping[str, str], *, executor_id: str, now_ms: int) -> Properties:
    """A new attempt for ``executor_id`` from ``now_ms``: attemptCount + 1, the last end cleared.

    An absent or malformed attemptCount counts as 0, as ``TaskRow.attempt_count`` reads it.
    """
    out = _holder(props, executor_id, now_ms)
    out.pop(Prop.END_TIME, None)
    out[Prop.ATTEMPT_COUNT] = str(attempt_count_of(props) + 1)
    return out


def renew(props: Mapping[str, str], *, executor_id: str, now_ms: int) -> Properties:
    """A held lease restarted at ``now_ms`` for ``executor_id``: the same attempt.

    A heartbeat passes the holder's own id; a hand-over another's.
    """
    return _holder(props, executor_id, now_ms)


def fail(
    props: Mapping[str, str],
    *,
    error: str,
    now_ms: int,
    policy: TaskPolicy,
    unit_random: float,
    run_id: str | None = None,
    permanent: bool = False,
) -> tuple[Properties, FailureRecord]:
    """The held attempt failed at ``now_ms`` (or at its start, if later): back off, or dead-letter.

    Dead-lettered when ``permanent`` (retrying cannot heal it; marked
    ``lastAttemptPermanent``) or after ``policy.max_attempts``; otherwise the
    next attempt waits ``policy.backoff_ms`` (``unit_random`` in [0, 1) is its jitter).
    """
    out = dict(props)
    attempt = attempt_count_of(props)
    # Never before the start: a heartbeat may commit between the caller's clock read
    # and its row read, and an end before the start reads as a lease still held, one
    # the holder's own heartbeat would then renew for as long as it runs.
    ended_ms = max(now_ms, start_time_of(props) or 0)
    out[Prop.END_TIME] = str(ended_ms)
    out[Prop.ERROR] = bounded_error(error)
    if run_id:
        out[Prop.RUN_ID] = run_id
    else:
        out.pop(Prop.RUN_ID, None)
    if permanent:
        out[Prop.PERMANENT] = PERMANENT_TRUE
    else:
        out.pop(Prop.PERMANENT, None)
    if permanent or attempt >= policy.max_attempts:
        out[Prop.STATUS] = STATUS_DEAD
        out.pop(Prop.NEXT_ATTEMPT, None)
        return out, FailureRecord(FailOutcome.DEAD, permanent=permanent)
    next_ms = ended_ms + policy.backoff_ms(attempt, unit_random)
    out[Prop.STATUS] = STATUS_FAILED
    out[Prop.NEXT_ATTEMPT] = str(next_ms)
    return out, FailureRecord(FailOutcome.BACKING_OFF, next_ms)


def requeue(props: Mapping[str, str], *, allow_shared_location: bool = False) -> Properties:
    """An operator's revival: attempts start again, backoff and the permanent mark cleared.

    ``allow_shared_location``: the operator checked the live entity sharing the
    table's location, and lets the purge go on (an override once given is kept).
    """
    out = dict(props)
    if allow_shared_location:
        out[Prop.ALLOW_SHARED_LOCATION] = PERMANENT_TRUE
    out[Prop.ATTEMPT_COUNT] = "0"
    out[Prop.STATUS] = STATUS_REQUEUED
    out.pop(Prop.NEXT_ATTEMPT, None)
    out.pop(Prop.PERMANENT, None)
    return out


def lease_for_operator(props: Mapping[str, str], *, executor_id: str, now_ms: int) -> Properties:
    """An operator's "run it now": requeued and leased in one write (this lease is attempt 1)."""
    return lease(requeue(props), executor_id=executor_id, now_ms=now_ms)


def lease_child(props: Mapping[str, str], *, executor_id: str, now_ms: int) -> Properties:
    """A child created already leased by its parent's holder (attempt 1, no grace period)."""
    out = _holder(props, executor_id, now_ms)
    out[Prop.ATTEMPT_COUNT] = "1"
    out[Prop.CREATED_BY] = CREATOR
    return out


def holds(task: TaskRow | None, lease: Lease, now_ms: int, policy: TaskPolicy) -> bool:
    """Fencing: ``lease``'s holder and attempt still hold ``task`` at ``now_ms``."""
    return (
        task is not None
        and task.executor_id == lease.executor_id
        and task.attempt_count == lease.attempt
        and task.lease_held(now_ms, policy)
    )


def requeue_refusal(
    task: TaskRow,
    now_ms: int,
    policy: TaskPolicy,
    *,
    allow_shared_location: bool = False,
    force: bool = False,
) -> str | None:
    """Why ``task`` may not be requeued now, or None when it may.

    ``allow_shared_location``: only for a task the shared-location guard refused (an
    override on any other row would silently lift the guard for a later drop's purge).
    ``force``: requeue a pending task, one Polaris may still be running in-process.
    """
    if task.properties_error:
        return f"task {task.label}: {task.properties_error}; fix the row by hand"
    if task.unhandled:
        return (
            f"task {task.label} is unhandled (Polaris never runs it, it has no "
            "files); not requeued: discard it with `tasks discard`"
        )
    if task.lease_held(now_ms, policy):
        return f"task {task.label} is leased by {task.executor_id}; not requeued"
    if allow_shared_location and not refused_for_sharing(task):
        return (
            f"task {task.label} was not refused for sharing its location; not requeued: "
            "--allow-shared-location is only for a task the shared-location guard refused"
        )
    if not force and task.state(now_ms, policy) is TaskState.PENDING:
        grace_ends = task.create_timestamp + policy.for_realm(task.realm_id).effective_grace_ms
        wait_s = max(0, grace_ends - now_ms) // 1000
        return (
            f"task {task.label} is pending: never attempted, and Polaris may still be running "
            f"it in-process until its grace period ends in {wait_s}s (the sweeper takes it "
            "then); not requeued: pass --force to requeue it now anyway"
        )
    return None


def refused_for_sharing(task: TaskRow) -> bool:
    """Whether ``task``'s last attempt was the shared-location guard's permanent refusal."""
    return task.failure_permanent and SHARED_LOCATION_REFUSED in (task.last_error or "")


def discard_refusal(state: TaskState) -> str | None:
    """Why a task in ``state`` is not discarded, or None: only unhandled tasks are."""
    if state is TaskState.UNHANDLED:
        return None
    return f"it is {state.value}, not unhandled; only unhandled tasks are discarded"


def discard_candidates(
    found: Sequence[TaskRow], task_ids: Sequence[int] | None, realms: Sequence[str] | None
) -> tuple[list[TaskRow], list[DiscardResult]]:
    """The rows ``tasks discard`` judges, and the named ids refused before any is judged.

    ``task_ids`` None: the unhandled rows of ``found``. Otherwise each named id,
    once: refused when no row of ``realms`` has it, or when several realms do.
    """
    if task_ids is None:
        return [t for t in found if t.unhandled], []
    by_id: dict[int, list[TaskRow]] = {}
    for task in found:
        by_id.setdefault(task.id, []).append(task)
    candidates: list[TaskRow] = []
    refused: list[DiscardResult] = []
    where = f" in realm(s) {', '.join(realms)}" if realms else ""
    for task_id in dict.fromkeys(task_ids):
        rows = by_id.get(task_id, [])
        if len(rows) == 1:
            candidates.append(rows[0])
            continue
        detail = (
            f"found in realms {', '.join(t.realm_id for t in rows)}; name one with --realm"
            if rows
            else f"no task{where}"
        )
        refused.append(DiscardResult("", task_id, DiscardOutcome.REFUSED, detail=detail))
    return candidates, refused
