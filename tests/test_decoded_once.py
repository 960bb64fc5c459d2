"""A task is decoded once (``DecodedTask.from_row``), and that decoding travels: in its
outcome (``TaskOutcome.task``), a table's finish (``TableFinish.task``), to the renderers.

A real pyiceberg table is dropped and purged by a ``Runner`` (its children, then its
last stage) while every ``from_row`` is counted; the CLI's report, the outcome renderers
and the Dagster step's metadata read every outcome. A consumer that decodes a row
again makes a count go above one.
"""

from __future__ import annotations

import dataclasses
import io
from collections import Counter
from collections.abc import Iterator

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.cli.output import OutcomeReport, plan_json
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from polaris_pipeline.execution.dry_run import dry_run
from polaris_pipeline.execution.outcome import Status, TableFinish, TaskOutcome
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.outcome_json import outcome_json
from polaris_pipeline.report.outcome_line import cli_line, log_line
from polaris_pipeline.report.outcome_metadata import step_output
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import Prop, TaskRow
from tests.support.iceberg import Warehouse
from tests.support.metastore import with_policy
from tests.support.unreferenced import add_unreferenced, settle


@pytest.fixture
def decodings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[tuple[str, int]]]:
    """How many times each task (realm, id) is decoded from its row."""
    counts: Counter[tuple[str, int]] = Counter()
    original = DecodedTask.from_row.__func__  # type: ignore[attr-defined]

    def counting(cls: type[DecodedTask], row: TaskRow) -> DecodedTask:
        counts[(row.realm_id, row.id)] += 1
        decoded: DecodedTask = original(cls, row)
        return decoded

    monkeypatch.setattr(DecodedTask, "from_row", classmethod(counting))
    yield counts


def _dropped_table(store: Metastore, wh: Warehouse) -> int:
    """A dropped table with unreferenced files; its task's id."""
    table = wh.build("t", appends=3)
    add_unreferenced(table, wh.resolver)
    settle(wh.resolver, table.location())  # every file is older than the drop
    task = built_tasks.drop_table_task(table)
    store.insert_tasks([task])
    return task.id


def _shown(outcome: TaskOutcome) -> None:
    """Every view of an outcome a surface makes: its line, JSON, output, step metadata."""
    cli_line(outcome, 120)
    outcome_json(outcome)
    step_output(outcome)
    log_line(outcome)
    DEFAULT_TRANSLATOR.done_metadata(outcome, outcome.task)


@pytest.mark.parametrize("mode", ["delete", "report"])
def test_a_table_purge_decodes_each_task_once_however_its_outcome_is_shown(
    store: Metastore,
    local_warehouse: Warehouse,
    decodings: Counter[tuple[str, int]],
    mode: str,
) -> None:
    table_id = _dropped_table(store, local_warehouse)
    report = OutcomeReport(io.StringIO(), as_json=True)  # the CLI's per-task records

    with Runner(
        with_policy(store, unreferenced=mode),
        local_warehouse.config,
        resolver=local_warehouse.resolver,
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"], on_outcome=report)
    for outcome in outcomes:
        _shown(outcome)

    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    [root] = [o for o in outcomes if o.lease.task_id == table_id]
    assert len(outcomes) > 1, "the table created no children: its last stage never ran apart"
    assert root.result is not None and root.result.unreferenced is not None  # the phase ran
    # One decoding per task run, the table's included, and that is what its outcome carries.
    assert decodings == Counter({("POLARIS", o.lease.task_id): 1 for o in outcomes})
    assert root.task is not None and root.task.table is not None
    assert root.row is root.task.row and root.row.id == table_id
    assert [r["table"] for r in report.records] == [str(root.task.identifier)] * len(outcomes)


def test_a_table_s_last_step_decodes_the_row_it_is_handed_once(
    store: Metastore, local_warehouse: Warehouse, decodings: Counter[tuple[str, int]]
) -> None:
    """The Dagster way: started (decoded there), the decoding handed to ``execute``, the
    table's finish carried to its last step as JSON and decoded once there."""
    table_id = _dropped_table(store, local_warehouse)
    with Runner(
        with_policy(store, unreferenced="delete"),
        local_warehouse.config,
        resolver=local_warehouse.resolver,
    ) as runner:
        decision = runner.start("POLARIS", table_id)
        assert decision.lease is not None and decision.decoded is not None
        root = runner.execute(decision.lease, decoded=decision.decoded)
        assert root.finish is not None and root.task is decision.decoded
        children = [runner.execute(child) for child in root.children]
        handed = TableFinish.from_dict(root.finish.to_dict())  # the next step's input
        final = runner.finish_table(handed, children_done=True)
    _shown(final)

    assert all(o.ok for o in [root, *children, final]), [o.error for o in children]
    # The table: once at its start, once in its last step; each child once.
    expected = {("POLARIS", table_id): 2, **{("POLARIS", c.lease.task_id): 1 for c in children}}
    assert decodings == Counter(expected)
    assert final.task is handed.task
    assert final.result is not None and final.result.unreferenced is not None
    assert final.result.unreferenced.deleted > 0
    assert store.get_task("POLARIS", table_id) is None


def test_a_dry_run_decodes_each_task_once_for_its_plan_and_its_record(
    store: Metastore, local_warehouse: Warehouse, decodings: Counter[tuple[str, int]]
) -> None:
    table_id = _dropped_table(store, local_warehouse)
    with Runner(
        with_policy(store, unreferenced="report"),
        local_warehouse.config,
        resolver=local_warehouse.resolver,
    ) as runner:
        docs = [plan_json(task, plan) for task, plan in dry_run(runner, ["POLARIS"])]

    [doc] = docs
    assert doc["would_delete"] and doc["unreferenced"] is not None  # both plans made
    assert decodings == Counter({("POLARIS", table_id): 1})


def test_a_reread_row_keeps_its_decoding_unless_what_was_decoded_changed(
    store: Metastore, local_warehouse: Warehouse, decodings: Counter[tuple[str, int]]
) -> None:
    table_id = _dropped_table(store, local_warehouse)
    row = store.get_task("POLARIS", table_id)
    assert row is not None
    decoded = DecodedTask.from_row(row)
    held = dataclasses.replace(
        row, properties={**row.properties, Prop.EXECUTOR: "me", Prop.START_TIME: "1"}
    )

    kept = decoded.reread(held)
    assert kept.row is held and kept.payload is decoded.payload and kept.table == decoded.table
    assert decodings[("POLARIS", table_id)] == 1
    # Another payload (or kind) under the same id is decoded anew, never taken as the old.
    other = dataclasses.replace(row, properties={**row.properties, Prop.DATA: "{}"})
    fresh = decoded.reread(other)
    assert fresh.row is other and fresh.payload is None and fresh.error is not None
    assert decodings[("POLARIS", table_id)] == 2
