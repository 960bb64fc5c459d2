"""``Runner.start``: what a holder does with one named task when its work starts, on a real
metastore (PostgreSQL and SQLite); and ``select_available`` picks what the lease takes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from builders.tasks import batch_task
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.execution import runner as runner_module
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.start import StartAction
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, Prop

OLD_MS = 10 * 60_000


# A real grace period, so pending tasks exist.
pytestmark = pytest.mark.lease_policy(grace_ms=30_000, max_attempts=3)


def insert(store: Metastore, *, old: bool = True, extra: dict[str, str] | None = None) -> NewTask:
    created = store.now_ms() - OLD_MS if old else None
    task = batch_task("R", create_timestamp=created, extra=extra)
    store.insert_tasks([task])
    return task


def mixed_rows(store: Metastore) -> dict[str, NewTask]:
    """One task in every state, and the edge cases of the lease rule."""
    now = store.now_ms()
    return {
        "orphaned": insert(store),
        "expired": insert(
            store,
            extra={
                Prop.EXECUTOR: "gone-holder",
                Prop.START_TIME: str(now - 120_000),
                Prop.ATTEMPT_COUNT: "1",
            },
        ),
        "released": insert(
            store,
            extra={
                Prop.EXECUTOR: "finished-holder",
                Prop.START_TIME: str(now - 1_000),
                Prop.END_TIME: str(now - 500),
                Prop.ATTEMPT_COUNT: "1",
            },
        ),
        "held": insert(
            store,
            extra={Prop.EXECUTOR: "live", Prop.START_TIME: str(now), Prop.ATTEMPT_COUNT: "1"},
        ),
        "pending": insert(store, old=False),
        "backing_off": insert(
            store, extra={Prop.NEXT_ATTEMPT: str(now + 600_000), Prop.ATTEMPT_COUNT: "1"}
        ),
        "dead": insert(store, extra={Prop.STATUS: "dead", Prop.ATTEMPT_COUNT: "2"}),
        "out_of_attempts": insert(store, extra={Prop.ATTEMPT_COUNT: "3"}),
        "bad_number": insert(store, extra={Prop.ATTEMPT_COUNT: "two", Prop.START_TIME: "soon"}),
    }


def test_select_available_is_what_the_lease_takes_and_writes_nothing(metastore: Metastore) -> None:
    rows = mixed_rows(metastore)
    before = {t.id: t.entity_version for t in metastore.list_tasks()}

    selected = {t.id for t in metastore.select_available(100, ["R"])}

    assert selected == {rows[k].id for k in ("orphaned", "expired", "released", "bad_number")}
    assert {t.id: t.entity_version for t in metastore.list_tasks()} == before
    assert metastore.select_available(0, ["R"]) == []
    assert metastore.select_available(100, ["other"]) == []
    assert len(metastore.select_available(2, None)) == 2
    leased = {lease.task_id for lease in metastore.lease_available("x", 100, ["R"])}
    assert leased == selected


@pytest.mark.parametrize("operator", [False, True])
def test_start_decides_by_state_and_intent(metastore: Metastore, operator: bool) -> None:
    rows = mixed_rows(metastore)
    runner = Runner(metastore, executor_id="me")
    try:
        expect = {
            "orphaned": StartAction.LEASED,
            "expired": StartAction.LEASED,
            "held": StartAction.HELD,
            "pending": StartAction.NOT_AVAILABLE,
            "backing_off": StartAction.OPERATOR_RETRY if operator else StartAction.NOT_AVAILABLE,
            "dead": StartAction.OPERATOR_RETRY if operator else StartAction.NOT_AVAILABLE,
            "out_of_attempts": (
                StartAction.OPERATOR_RETRY if operator else StartAction.NOT_AVAILABLE
            ),
        }
        for key, action in expect.items():
            decision = runner.start("R", rows[key].id, operator=operator)
            assert decision.action is action, (key, decision.message)
            assert decision.started == (decision.lease is not None)
            row = metastore.get_task("R", rows[key].id)
            assert row is not None
            if decision.lease is not None:
                assert row.executor_id == "me" and decision.lease.executor_id == "me"
                assert metastore.holds(decision.lease)
            else:
                assert row.executor_id != "me"
        # Attempts: a plain lease counts one more; an operator's retry starts again at 1.
        expired = metastore.get_task("R", rows["expired"].id)
        assert expired is not None and expired.attempt_count == 2
        if operator:
            dead = metastore.get_task("R", rows["dead"].id)
            assert dead is not None and dead.attempt_count == 1 and dead.status == "requeued"
            assert Prop.NEXT_ATTEMPT not in dead.properties
    finally:
        runner.close()


def test_start_adopts_its_own_lease_and_refuses_a_busy_lineage(metastore: Metastore) -> None:
    task = insert(metastore)
    runner = Runner(metastore, executor_id="lineage")
    try:
        first = runner.start("R", task.id)
        assert first.action is StartAction.LEASED and first.lease is not None
        again = runner.start("R", task.id)
        assert again.action is StartAction.ADOPTED and again.lease is not None
        assert again.lease.attempt == first.lease.attempt  # the same attempt continues
        assert again.lease.entity_version == first.lease.entity_version
        busy = runner.start("R", task.id, may_adopt=False)
        assert busy.action is StartAction.HELD and busy.lease is None
        assert "an earlier run of this run's lineage that is still running" in busy.message
    finally:
        runner.close()


def test_resume_keeps_a_handed_lease_while_it_holds_and_starts_the_task_otherwise(
    metastore: Metastore,
) -> None:
    parent = insert(metastore)
    runner = Runner(metastore, executor_id="lineage")
    try:
        held = runner.start("R", parent.id).lease
        assert held is not None
        [created] = metastore.insert_tasks([batch_task("R")], holder=held)
        kept = runner.resume(created)
        # The very lease the parent's attempt created: nothing derived again.
        assert kept.action is StartAction.ADOPTED and kept.lease is created
        busy = runner.resume(created, may_adopt=False)
        assert busy.action is StartAction.HELD and busy.lease is None
        # A lease that no longer holds the task (another attempt's): started as any task.
        stale = dataclasses.replace(created, attempt=created.attempt + 5)
        again = runner.resume(stale)
        assert again.action is StartAction.ADOPTED and again.lease is not None
        assert again.lease.attempt == created.attempt != stale.attempt
        metastore.complete(created)
        assert runner.resume(created).action is StartAction.GONE
    finally:
        runner.close()


def test_start_messages_say_who_until_when_and_what_to_do(metastore: Metastore) -> None:
    rows = mixed_rows(metastore)
    runner = Runner(metastore, executor_id="me")
    try:
        held = runner.start("R", rows["held"].id, operator=True)
        assert f"task R/{rows['held'].id} " in held.message
        assert "held by another holder: live, attempt 1, lease until " in held.message
        assert "wait for that run to finish or its lease to lapse" in held.message
        gone = runner.start("R", 12345, operator=True)
        assert gone.action is StartAction.GONE and gone.task is None
        assert (
            gone.message == "task R/12345 is gone: it was completed (or discarded); nothing to do"
        )
        # The same id in another realm is another task.
        assert runner.start("S", rows["orphaned"].id).action is StartAction.GONE
        waiting = runner.start("R", rows["backing_off"].id)
        assert "is backing off until " in waiting.message and waiting.message.endswith("not run")
        retry = runner.start("R", rows["backing_off"].id, operator=True)
        assert retry.message.startswith("operator retry: backing off task retried now")
    finally:
        runner.close()


@contextmanager
def task_row_reads(store: Metastore, task_id: int) -> Iterator[list[str]]:
    """The SELECTs of ``entities`` naming ``task_id`` run while the block runs."""
    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        values = params.values() if isinstance(params, Mapping) else (params or ())
        select = statement.lstrip().upper().startswith("SELECT")
        if select and "entities" in statement and task_id in values:
            reads.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        yield reads
    finally:
        event.remove(store.engine, "before_cursor_execute", count)


@pytest.mark.parametrize("case", ["leased", "adopted", "operator-retry"])
def test_a_run_start_reads_its_task_row_at_most_twice(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """From ``Runner.start`` to the handler: the start's read and the fence's, no more;
    the handler is handed the task the start decoded."""
    extra = {Prop.STATUS: "dead", Prop.ATTEMPT_COUNT: "2"} if case == "operator-retry" else None
    task = insert(metastore, extra=extra)
    runner = Runner(metastore, executor_id="me")
    if case == "adopted":
        assert runner.start("R", task.id).action is StartAction.LEASED
    handed: list[CleanupContext] = []
    reads_at_handler: list[int] = []

    def handler(ctx: CleanupContext) -> CleanupTally:
        handed.append(ctx)
        reads_at_handler.append(len(reads))
        return CleanupTally.start()

    monkeypatch.setattr(runner_module, "run_cleanup", handler)
    try:
        with task_row_reads(metastore, task.id) as reads:
            decision = runner.start("R", task.id, operator=case == "operator-retry")
            assert decision.lease is not None, decision.message
            assert decision.action.value == case
            outcome = runner.execute(decision.lease, decoded=decision.decoded)
    finally:
        runner.close()
    assert outcome.ok, outcome.error
    assert reads_at_handler == [2], reads
    assert handed[0].decoded is decision.decoded
    assert decision.decoded is not None and decision.decoded.row.executor_id == "me"


def test_without_its_decoded_task_execute_reads_the_row(metastore: Metastore) -> None:
    """The sweep's leases carry no decoded task: execute reads and decodes the row itself."""
    task = insert(metastore)
    runner = Runner(metastore, executor_id="me")
    try:
        [lease] = runner.lease(1, ["R"])
        with task_row_reads(metastore, task.id) as reads:
            outcome = runner.execute(lease)
    finally:
        runner.close()
    assert outcome.ok, outcome.error
    assert len(reads) >= 2  # the row, the fence (and the completion's compare-and-set)
