"""The state transitions as pure functions: properties in, properties out.

The last tests hold the PostgreSQL lease and renewal statements (and SQLite's
renewal) to the same changes, on real databases.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore, transitions
from polaris_pipeline.metastore.transitions import (
    CompleteOutcome,
    DiscardOutcome,
    DiscardResult,
    FailOutcome,
    FailureRecord,
    HolderCas,
)
from polaris_pipeline.tasks.model import (
    CREATOR,
    MAX_ERROR_LENGTH,
    Prop,
    TaskPolicy,
    TaskRow,
    TaskState,
)
from polaris_pipeline.tasks.ref import Lease
from tests.support.unhandled import polaris_cleanup_task

NOW = 1_700_000_000_000
POLICY = TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, max_attempts=3)
BASE = {Prop.TASK_TYPE: "3", Prop.DATA: "{}"}

# attemptCount values a hostile or broken writer may leave: each reads as 0.
HOSTILE_COUNTS = ["", "many", "-4", "1.5", "1e3", " 2", "9" * 19]


def _without_attempts(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if k != Prop.ATTEMPT_COUNT}


# ------------------------------------------------------------------ lease


def test_a_first_lease_is_attempt_one() -> None:
    assert transitions.lease(BASE, executor_id="ex", now_ms=NOW) == {
        **BASE,
        Prop.EXECUTOR: "ex",
        Prop.START_TIME: str(NOW),
        Prop.ATTEMPT_COUNT: "1",
    }


def test_a_lease_counts_on_and_clears_the_last_end() -> None:
    before = {
        **BASE,
        Prop.EXECUTOR: "old",
        Prop.START_TIME: "5",
        Prop.END_TIME: "9",
        Prop.ATTEMPT_COUNT: "2",
        Prop.ERROR: "boom",
        Prop.STATUS: "failed",
    }
    after = transitions.lease(before, executor_id="ex", now_ms=NOW)
    assert after == {
        **BASE,
        Prop.EXECUTOR: "ex",
        Prop.START_TIME: str(NOW),
        Prop.ATTEMPT_COUNT: "3",
        Prop.ERROR: "boom",
        Prop.STATUS: "failed",
    }
    assert before[Prop.END_TIME] == "9"  # the input is not changed


@pytest.mark.parametrize("count", HOSTILE_COUNTS)
def test_a_malformed_attempt_count_leases_as_attempt_one(count: str) -> None:
    after = transitions.lease({**BASE, Prop.ATTEMPT_COUNT: count}, executor_id="ex", now_ms=NOW)
    assert after[Prop.ATTEMPT_COUNT] == "1"
    assert _without_attempts(after) == _without_attempts(
        transitions.lease(BASE, executor_id="ex", now_ms=NOW)
    )


def test_undecodable_properties_lease_from_their_original() -> None:
    start = transitions.original_properties("[1, 2")
    assert transitions.lease(start, executor_id="ex", now_ms=NOW) == {
        Prop.ORIGINAL: "[1, 2",
        Prop.EXECUTOR: "ex",
        Prop.START_TIME: str(NOW),
        Prop.ATTEMPT_COUNT: "1",
    }


@pytest.mark.parametrize(
    "move",
    [transitions.lease, transitions.renew, transitions.lease_for_operator, transitions.lease_child],
)
def test_no_lease_for_an_empty_executor_id(move: Callable[..., dict[str, str]]) -> None:
    # A row holding "" reads as held by nobody: the lease would be lost at once.
    with pytest.raises(ValueError, match="non-empty executor id"):
        move(BASE, executor_id="", now_ms=NOW)
    with pytest.raises(ValueError, match="non-empty executor id"):
        transitions.require_executor("")
    assert transitions.require_executor("ex") == "ex"


# ------------------------------------------------------------------ renew


def test_a_renewal_restarts_the_same_attempt() -> None:
    held = {**BASE, Prop.EXECUTOR: "ex", Prop.START_TIME: "5", Prop.ATTEMPT_COUNT: "2"}
    assert transitions.renew(held, executor_id="ex", now_ms=NOW) == {
        **held,
        Prop.START_TIME: str(NOW),
    }
    # A hand-over: another executor, still attempt 2.
    assert transitions.renew(held, executor_id="run-2", now_ms=NOW) == {
        **held,
        Prop.EXECUTOR: "run-2",
        Prop.START_TIME: str(NOW),
    }


@pytest.mark.parametrize("count", [*HOSTILE_COUNTS, None])
def test_a_renewal_leaves_the_attempt_count_as_it_is(count: str | None) -> None:
    held = {**BASE, Prop.EXECUTOR: "ex", Prop.START_TIME: "5"}
    if count is not None:
        held[Prop.ATTEMPT_COUNT] = count
    after = transitions.renew(held, executor_id="ex", now_ms=NOW)
    assert after.get(Prop.ATTEMPT_COUNT) == count


# ------------------------------------------------------------------- fail


def _held(attempt: str | None, **extra: str) -> dict[str, str]:
    props = {**BASE, Prop.EXECUTOR: "ex", Prop.START_TIME: "5", **extra}
    if attempt is not None:
        props[Prop.ATTEMPT_COUNT] = attempt
    return props


def test_a_failure_backs_off() -> None:
    props, record = transitions.fail(
        _held("2", **{Prop.PERMANENT: "true"}),
        error="boom",
        now_ms=NOW,
        policy=POLICY,
        unit_random=0.5,
        run_id="run-1",
    )
    next_ms = NOW + POLICY.backoff_ms(2, 0.5)
    assert record == FailureRecord(FailOutcome.BACKING_OFF, next_ms)
    assert props == {
        **_held("2"),
        Prop.END_TIME: str(NOW),
        Prop.ERROR: "boom",
        Prop.RUN_ID: "run-1",
        Prop.STATUS: "failed",
        Prop.NEXT_ATTEMPT: str(next_ms),
    }


@pytest.mark.parametrize("start", [str(NOW + 40), str(NOW), "soon", None])
def test_a_failure_ends_its_attempt_never_before_it_started(start: str | None) -> None:
    held = _held("2", **({} if start is None else {Prop.START_TIME: start}))
    if start is None:
        del held[Prop.START_TIME]
    props, record = transitions.fail(held, error="e", now_ms=NOW, policy=POLICY, unit_random=0.0)
    ended = NOW + 40 if start == str(NOW + 40) else NOW  # a malformed or absent start: now
    assert props[Prop.END_TIME] == str(ended)
    assert record.next_attempt_ms == ended + POLICY.backoff_ms(2, 0.0)
    # Whatever the start, the failed attempt no longer holds its task.
    lease = Lease("r", 1, "ex", 2, 4, NOW)
    assert not transitions.holds(_row(props), lease, ended, POLICY)


def test_the_backoff_is_jittered_within_its_bounds() -> None:
    waits = [
        int(
            transitions.fail(_held("1"), error="e", now_ms=NOW, policy=POLICY, unit_random=r)[0][
                Prop.NEXT_ATTEMPT
            ]
        )
        - NOW
        for r in (0.0, 0.999999)
    ]
    assert waits[0] == POLICY.backoff_base_ms // 2
    assert POLICY.backoff_base_ms // 2 < waits[1] <= POLICY.backoff_base_ms


def test_the_last_attempt_is_dead_lettered() -> None:
    props, record = transitions.fail(
        _held("3", **{Prop.NEXT_ATTEMPT: "7", Prop.RUN_ID: "old"}),
        error="boom",
        now_ms=NOW,
        policy=POLICY,
        unit_random=0.5,
    )
    assert record == FailureRecord(FailOutcome.DEAD)
    assert props == {**_held("3"), Prop.END_TIME: str(NOW), Prop.ERROR: "boom", Prop.STATUS: "dead"}


def test_a_permanent_failure_is_dead_lettered_at_once() -> None:
    props, record = transitions.fail(
        _held("1", **{Prop.NEXT_ATTEMPT: "7"}),
        error="no such bucket",
        now_ms=NOW,
        policy=POLICY,
        unit_random=0.5,
        permanent=True,
    )
    assert record == FailureRecord(FailOutcome.DEAD, permanent=True)
    assert props[Prop.STATUS] == "dead" and props[Prop.PERMANENT] == "true"
    assert Prop.NEXT_ATTEMPT not in props


@pytest.mark.parametrize("count", [*HOSTILE_COUNTS, None])
def test_a_failure_with_a_malformed_attempt_count_backs_off_as_attempt_zero(
    count: str | None,
) -> None:
    props, record = transitions.fail(
        _held(count), error="e", now_ms=NOW, policy=POLICY, unit_random=0.25
    )
    assert record == FailureRecord(FailOutcome.BACKING_OFF, NOW + POLICY.backoff_ms(0, 0.25))
    assert props.get(Prop.ATTEMPT_COUNT) == count  # recorded as it was, not repaired


def test_a_failures_error_is_bounded() -> None:
    props, _ = transitions.fail(
        _held("1"), error="x " * 5000, now_ms=NOW, policy=POLICY, unit_random=0.0
    )
    assert len(props[Prop.ERROR]) <= MAX_ERROR_LENGTH
    assert props[Prop.ERROR].endswith("[truncated]")


# ----------------------------------------------------- requeue and children


@pytest.mark.parametrize("count", ["8", *HOSTILE_COUNTS])
def test_a_requeue_restarts_the_attempts(count: str) -> None:
    dead = {
        **BASE,
        Prop.ATTEMPT_COUNT: count,
        Prop.STATUS: "dead",
        Prop.PERMANENT: "true",
        Prop.NEXT_ATTEMPT: "7",
        Prop.ERROR: "boom",
        Prop.END_TIME: "9",
    }
    assert transitions.requeue(dead) == {
        **BASE,
        Prop.ATTEMPT_COUNT: "0",
        Prop.STATUS: "requeued",
        Prop.ERROR: "boom",
        Prop.END_TIME: "9",
    }
    assert transitions.lease_for_operator(dead, executor_id="op", now_ms=NOW) == {
        **BASE,
        Prop.ATTEMPT_COUNT: "1",
        Prop.STATUS: "requeued",
        Prop.ERROR: "boom",
        Prop.EXECUTOR: "op",
        Prop.START_TIME: str(NOW),
    }


@pytest.mark.parametrize("count", [None, "5", *HOSTILE_COUNTS])
def test_a_child_is_created_leased_as_attempt_one(count: str | None) -> None:
    given = dict(BASE) if count is None else {**BASE, Prop.ATTEMPT_COUNT: count}
    assert transitions.lease_child(given, executor_id="ex", now_ms=NOW) == {
        **BASE,
        Prop.EXECUTOR: "ex",
        Prop.START_TIME: str(NOW),
        Prop.ATTEMPT_COUNT: "1",
        Prop.CREATED_BY: CREATOR,
    }


# ------------------------------------------------------------- judgements


def _row(props: dict[str, str], error: str | None = None) -> TaskRow:
    return TaskRow("r", 1, "t", 4, 1, 0, 0, props, {}, error)


LEASE = Lease("r", 1, "ex", 2, 4, NOW - 1000)


@pytest.mark.parametrize(
    ("props", "held"),
    [
        (_held("2", **{Prop.START_TIME: str(NOW - 1000)}), True),
        (_held("1", **{Prop.START_TIME: str(NOW - 1000)}), False),  # an earlier attempt
        (_held("2", **{Prop.START_TIME: str(NOW - 1000), Prop.EXECUTOR: "other"}), False),
        (_held("2", **{Prop.START_TIME: str(NOW - 61_000)}), False),  # expired
        (_held("2", **{Prop.START_TIME: str(NOW - 1000), Prop.END_TIME: str(NOW)}), False),
        (_held("x", **{Prop.START_TIME: str(NOW - 1000)}), False),
    ],
)
def test_holds_is_the_fencing_token(props: dict[str, str], held: bool) -> None:
    assert transitions.holds(_row(props), LEASE, NOW, POLICY) is held
    assert transitions.holds(None, LEASE, NOW, POLICY) is False


def test_requeue_refusals() -> None:
    assert transitions.requeue_refusal(_row({**BASE, Prop.STATUS: "dead"}), NOW, POLICY) is None
    refusal = transitions.requeue_refusal(_row({}, "properties is not JSON"), NOW, POLICY)
    assert refusal is not None and "fix the row by hand" in refusal
    unhandled = polaris_cleanup_task("r", 6, entity_id=5).properties
    refusal = transitions.requeue_refusal(_row(unhandled), NOW, POLICY)
    assert refusal is not None and "discard it with `tasks discard`" in refusal
    held = _held("2", **{Prop.START_TIME: str(NOW - 1000)})
    assert transitions.requeue_refusal(_row(held), NOW, POLICY) == (
        "task r/1 't' is leased by ex; not requeued"
    )


def test_only_unhandled_tasks_are_discarded() -> None:
    assert transitions.discard_refusal(TaskState.UNHANDLED) is None
    for state in set(TaskState) - {TaskState.UNHANDLED}:
        refusal = transitions.discard_refusal(state)
        assert refusal is not None and state.value in refusal


NAME_ONE = "name one with --realm"


def test_discard_candidates_refuse_missing_and_ambiguous_ids() -> None:
    unhandled = polaris_cleanup_task("r1", 6, entity_id=5).properties
    a = TaskRow("r1", 1, "a", 1, 1, 0, 0, unhandled)
    b = TaskRow("r1", 2, "b", 1, 1, 0, 0, dict(BASE))
    twin_1, twin_2 = TaskRow("r1", 3, "c", 1, 1, 0, 0), TaskRow("r2", 3, "c", 1, 1, 0, 0)
    found = [a, b, twin_1, twin_2]
    assert transitions.discard_candidates(found, None, None) == ([a], [])
    assert transitions.discard_candidates(found, [2, 9, 3, 2], ["r1", "r2"]) == (
        [b],
        [
            DiscardResult("", 9, DiscardOutcome.REFUSED, detail="no task in realm(s) r1, r2"),
            DiscardResult(
                "",
                3,
                DiscardOutcome.REFUSED,
                detail="found in realms r1, r2; name one with --realm",
            ),
        ],
    )
    assert transitions.discard_candidates([], [9], None)[1][0].detail == "no task"


def test_the_outcome_of_a_holders_move() -> None:
    assert transitions.complete_outcome(HolderCas.APPLIED) is CompleteOutcome.DONE
    assert transitions.complete_outcome(HolderCas.GONE) is CompleteOutcome.ALREADY_GONE
    assert transitions.complete_outcome(HolderCas.LOST) is CompleteOutcome.LEASE_LOST
    assert transitions.unrecorded_failure(HolderCas.GONE).outcome is FailOutcome.ALREADY_GONE
    assert transitions.unrecorded_failure(HolderCas.LOST).outcome is FailOutcome.LEASE_LOST
    with pytest.raises(ValueError):
        transitions.unrecorded_failure(HolderCas.APPLIED)


# ------------------------------------- the SQL statements make the same changes


@pytest.mark.parametrize("count", [None, "2", "many"])
def test_the_lease_statement_writes_what_lease_writes(
    metastore: Metastore, count: str | None
) -> None:
    extra = {Prop.END_TIME: "9", Prop.ERROR: "earlier"}
    if count is not None:
        extra[Prop.ATTEMPT_COUNT] = count
    task = batch_task("r", extra=extra)
    metastore.insert_tasks([task])
    before = metastore.get_task("r", task.id)
    assert before is not None
    (lease,) = metastore.lease_available("ex", 1)  # PostgreSQL: LEASE_BATCH
    after = metastore.get_task("r", task.id)
    assert after is not None
    assert after.properties == transitions.lease(
        before.properties, executor_id="ex", now_ms=lease.start_time_ms
    )
    assert lease == Lease.from_row(after)


def test_the_renewal_statement_writes_what_renew_writes(metastore: Metastore) -> None:
    task = batch_task("r")
    metastore.insert_tasks([task])
    metastore.lease_available("ex", 1)
    before = metastore.get_task("r", task.id)
    assert before is not None
    assert metastore.renew_held_by("r", "ex") == 1  # RENEW_HELD_BY
    after = metastore.get_task("r", task.id)
    assert after is not None and after.start_time_ms is not None
    assert after.properties == transitions.renew(
        before.properties, executor_id="ex", now_ms=after.start_time_ms
    )
