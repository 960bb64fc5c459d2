"""A task whose row vanished while we held it: what is left under its location is listed
and said, never deleted (``unreferenced/leftover_check.py``).

A real pyiceberg table is dropped and its task leased by a ``Runner`` against a real
metastore (PostgreSQL and SQLite). Its row is then deleted, as Polaris deletes a task
it ran to its end or an operator's discard does: right before the attempt's fence (the
lease's check finds no row), or while the table's children run (its row is gone when
it is to be finished).
"""

from __future__ import annotations

from collections.abc import Callable

from pyiceberg.table import Table
from sqlalchemy import ColumnElement, delete, update

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from polaris_pipeline.execution.runner import Runner, Status, TaskOutcome
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.report.fields import UNREFERENCED
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.report.outcome_json import outcome_json
from polaris_pipeline.report.step_record import STEP_RECORD_KEY, StepRecord
from polaris_pipeline.tasks.model import NewTask, Prop
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced.leftover_check import ROW_GONE
from tests.support.iceberg import Warehouse
from tests.support.metastore import with_policy
from tests.support.unreferenced import add_unreferenced, live_entity, settle


def _where(task: NewTask) -> ColumnElement[bool]:
    return (entities.c.realm_id == task.realm_id) & (entities.c.id == task.id)


def _remove_row(store: Metastore, task: NewTask) -> None:
    with store.engine.begin() as conn:
        conn.execute(delete(entities).where(_where(task)))


def _hand_to_another_holder(store: Metastore, task: NewTask) -> None:
    row = store.get_task(task.realm_id, task.id)
    assert row is not None
    now = str(store.now_ms())
    props = {**row.properties, Prop.EXECUTOR: "another-holder", Prop.START_TIME: now}
    with store.engine.begin() as conn:
        conn.execute(update(entities).where(_where(task)).values(properties=props))


def _dropped(store: Metastore, wh: Warehouse) -> tuple[Table, NewTask]:
    table = wh.build("t", appends=3)
    add_unreferenced(table, wh.resolver)
    settle(wh.resolver, table.location())  # every file is older than the drop
    task = built_tasks.drop_table_task(table)
    store.insert_tasks([task])
    return table, task


def _run_changing_the_row_at_first_fence(
    store: Metastore, wh: Warehouse, change: Callable[[], None]
) -> TaskOutcome:
    """Lease the task and run it; ``change`` the row right before the attempt's first fence."""
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        [lease] = runner.lease(1, ["POLARIS"])
        fence = runner.holder.deadlines.fence
        changed: list[bool] = []

        def changing_fence(held: Lease) -> None:
            if not changed:
                changed.append(True)
                change()
            fence(held)  # the real check, on the real metastore

        runner.holder.deadlines.fence = changing_fence  # type: ignore[method-assign,assignment]
        outcome = runner.execute(lease)
    assert changed, "the attempt never fenced"
    return outcome


def test_a_row_gone_at_the_fence_reports_what_is_left_and_deletes_nothing(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    table, task = _dropped(metastore, local_warehouse)
    before = built_tables.list_files(table.location())

    outcome = _run_changing_the_row_at_first_fence(
        metastore, local_warehouse, lambda: _remove_row(metastore, task)
    )

    left = built_tables.list_files(table.location())
    assert outcome.status is Status.LEASE_LOST  # not done by us: the row went elsewhere
    assert outcome.error is not None and ROW_GONE in outcome.error
    assert outcome.result is not None and outcome.result.unreferenced is not None
    report = outcome.result.unreferenced
    assert report.refusal is None and report.error is None, report.summary()
    # Read only: nothing went, and what it counted is exactly what a listing finds.
    assert left == before and report.deleted == 0
    assert report.left == len(left) > 0
    assert report.summary().endswith(f"; {len(left)} object(s) left under it")
    assert OutcomeFacts(outcome).unreferenced_left == len(left)
    assert outcome_json(outcome)["unreferenced_left"] == len(left)
    assert metastore.list_tasks() == []  # no child was created for a row that is gone
    # The Dagster step says it too, in its structured record and beside the lease lost.
    meta = DEFAULT_TRANSLATOR.lease_lost_metadata(outcome.lease, "lost", outcome)
    record = StepRecord.from_json(meta[STEP_RECORD_KEY].value)
    assert record is not None and record.unreferenced == report
    assert meta[UNREFERENCED] == report.summary()


def test_a_live_table_at_the_location_refuses_the_listing(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    table, task = _dropped(metastore, local_warehouse)

    def recreate_and_remove() -> None:
        live_entity(metastore, table.location(), name="t")  # re-created at the same location
        _remove_row(metastore, task)

    outcome = _run_changing_the_row_at_first_fence(metastore, local_warehouse, recreate_and_remove)

    report = outcome.result.unreferenced if outcome.result else None
    assert report is not None and report.refusal is not None and report.listed == 0
    assert "refused" in report.summary()


def test_a_lease_lost_to_a_holder_who_still_holds_the_row_lists_nothing(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    _, task = _dropped(metastore, local_warehouse)

    outcome = _run_changing_the_row_at_first_fence(
        metastore, local_warehouse, lambda: _hand_to_another_holder(metastore, task)
    )

    assert outcome.status is Status.LEASE_LOST and outcome.result is None
    assert outcome.error is not None and ROW_GONE not in outcome.error


def test_a_table_whose_row_vanished_while_its_children_ran_says_what_is_left(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    table, task = _dropped(metastore, local_warehouse)
    removed: list[bool] = []

    def progress(lease: Lease, done: int, total: int, what: str) -> None:
        if not removed and lease.task_id != task.id:  # a child deleted its first files
            removed.append(True)
            _remove_row(metastore, task)

    # ``delete``: the table's row stays held until its children are done, then its
    # unreferenced phase runs; the row gone, the phase never runs, the check does.
    with Runner(
        with_policy(metastore, unreferenced="delete"),
        local_warehouse.config,
        resolver=local_warehouse.resolver,
        progress=progress,
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert removed, "no child deleted anything"
    [root] = [o for o in outcomes if o.lease.task_id == task.id]
    left = built_tables.list_files(table.location())
    assert root.result is not None and root.result.unreferenced is not None
    report = root.result.unreferenced
    assert report.deleted == 0 and report.mode == "report"
    # The children's referenced files went; the unreferenced ones, never deleted, are left.
    assert report.left == len(left) > 0
    assert OutcomeFacts(root).unreferenced_left == len(left)
