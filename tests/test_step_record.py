"""A step's one structured record: what a run's total is added up from.

Each step of the task job writes its numbers under machine names
(``report/step_record.py``); the display labels beside them are never read back,
so renaming one changes no total. Steps written by release 0.1.0 (labels only)
still total right through the legacy reader, given their metadata exactly as that
release wrote it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    Failure,
    MetadataValue,
    Output,
    job,
    op,
)

from builders.tasks import batch_task, task_row
from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.dagster.reporting import report_run
from polaris_pipeline.dagster.step_result import TaskResult
from polaris_pipeline.dagster.tables import TABLE_REF_KEY, TableRef, table_of
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report import outcome_metadata, totals
from polaris_pipeline.report.step_record import STEP_RECORD_KEY, StepRecord, read_step
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.ref import Lease, TaskRef
from polaris_pipeline.unreferenced.report import UnreferencedReport


def lease(task_id: int) -> Lease:
    return Lease("R", task_id, "exec", 1, 1, 0, name=f"t{task_id}")


ROOT = TaskOutcome(
    lease(1),
    Status.DONE,
    result=CleanupResult(deleted=2, missing=1, bytes_freed=20),
    children=[lease(11), lease(12)],
)
KEPT = TaskOutcome(
    lease(11),
    Status.DONE,
    result=CleanupResult(
        deleted=3, bytes_freed=None, retained=2, bytes_retained=None, retention_unknown=1
    ),
)
FREED = TaskOutcome(
    lease(12),
    Status.DONE,
    result=CleanupResult(
        deleted=4, missing=2, bytes_freed=400, refused=[GuardRefusal("/x", "outside")]
    ),
)
DEAD = TaskOutcome(
    lease(13),
    Status.DEAD,
    result=CleanupResult(deleted=1, bytes_freed=10, refused=[GuardRefusal("/y", "outside")]),
    error="boom",
    permanent=True,
    recorded=True,
)
GROUP = [
    TaskResult({"status": "done"}, {}, KEPT),
    TaskResult({"status": "done"}, {}, FREED),
    TaskResult({"status": "already-done"}, {}, found="already-done"),
]
REFS = [TaskRef("R", 11, 1, name="t11")]
TABLE = TableRef("R", ("ns",), "t", catalog_id=5)


def plain(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata values as a run's event log gives them back (JSON in, JSON out)."""
    return json.loads(json.dumps({k: getattr(v, "value", v) for k, v in meta.items()}))


def step_total(meta: dict[str, Any], *, failed: bool = False) -> OutcomeTotals:
    return read_step(plain(meta), failed=failed).totals


def _expected_run() -> OutcomeTotals:
    return (
        OutcomeTotals.of([ROOT])
        + OutcomeTotals.of([KEPT, FREED], child=True)
        + OutcomeTotals.counted("already-done", child=True)
    )


# -- the record ----------------------------------------------------------------------


def test_each_step_writes_one_record_that_totals_it() -> None:
    done = DEFAULT_TRANSLATOR.done_metadata(ROOT, None)
    group = DEFAULT_TRANSLATOR.group_metadata(REFS, "exec", GROUP)
    assert type(done[STEP_RECORD_KEY]).__name__ == "JsonMetadataValue"
    run = step_total(done) + step_total(group)
    assert run == _expected_run()
    failed = step_total(DEFAULT_TRANSLATOR.failure_metadata(DEAD, "run", "boom"), failed=True)
    assert failed == OutcomeTotals.of([DEAD]) and dict(failed.tasks) == {"dead": 1}


@pytest.fixture
def renamed_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every number's display label reworded, as a later release may."""
    for module in (totals, outcome_metadata):
        for name in ("OUTCOME_FIELDS", "RETENTION_FIELDS"):
            fields = getattr(module, name)
            renamed = tuple(dataclasses.replace(f, label=f"{f.label} (renamed)") for f in fields)
            monkeypatch.setattr(module, name, renamed)


@pytest.mark.usefixtures("renamed_labels")
def test_renaming_a_display_label_changes_no_total() -> None:
    done = DEFAULT_TRANSLATOR.done_metadata(ROOT, None)
    group = DEFAULT_TRANSLATOR.group_metadata(REFS, "exec", GROUP)
    assert "files deleted (renamed)" in done and "files deleted" not in done
    assert "files kept by versioning (renamed)" in group
    run = step_total(done) + step_total(group)
    assert run == _expected_run()
    assert run.files_deleted == 9 and run.files_retained == 2 and run.refused == 1


def test_a_record_as_this_release_writes_it_reads_back() -> None:
    """The stored form, spelled out: a renamed field name here is a data migration."""
    record = {
        "version": 2,
        "totals": {
            "files_deleted": 7,
            "files_missing": 2,
            "refused": 1,
            "bytes_freed": 400,
            "sizes_unreported": 1,
            "files_retained": 2,
            "bytes_retained": 0,
            "retained_sizes_unreported": 1,
            "retention_unknown": 1,
            "children_created": 0,
            "permanent": 0,
            "tasks": {},
            "children": {"done": 2, "already-done": 1},
        },
        "unreferenced": None,
    }
    group = DEFAULT_TRANSLATOR.group_metadata(REFS, "exec", GROUP)
    assert plain(group)[STEP_RECORD_KEY] == record
    step = read_step({STEP_RECORD_KEY: record})
    expected = OutcomeTotals.of([KEPT, FREED], child=True)
    assert step.totals == expected + OutcomeTotals.counted("already-done", child=True)


def test_a_record_wins_over_labels_beside_it() -> None:
    """Labels beside a record are display: a step showing other numbers totals by its record."""
    meta = {**plain(DEFAULT_TRANSLATOR.done_metadata(ROOT, None)), "files deleted": 999}
    assert read_step(meta).totals.files_deleted == 2


def test_a_failed_group_counts_every_childs_numbers() -> None:
    """The children done before the failure and the failed one: all in the step's total."""
    failure = Failure("boom", metadata=DEFAULT_TRANSLATOR.failure_metadata(DEAD, "run", "boom"))
    meta = DEFAULT_TRANSLATOR.group_failure_metadata(GROUP, [failure, Failure("refused")])
    step = step_total(meta, failed=True)
    assert dict(step.children) == {"done": 2, "already-done": 1, "dead": 1, "failed": 1}
    assert not step.tasks and step.permanent == 1
    assert (step.files_deleted, step.refused) == (8, 2)
    # Shown: the first failure and the counts, the group's numbers.
    shown = plain(meta)
    assert shown["error"] == "boom" and shown["failed child tasks"] == 2
    assert shown["child tasks done"] == 3 and shown["files deleted"] == 8


def test_lease_lost_and_skipped_steps_count_their_status_only() -> None:
    lost = step_total(DEFAULT_TRANSLATOR.lease_lost_metadata(lease(1), "taken"))
    skipped = step_total(DEFAULT_TRANSLATOR.skipped_metadata("not due"))
    assert dict(lost.tasks) == {"lease-lost": 1} and lost.files_deleted == 0
    assert dict(skipped.tasks) == {"skipped": 1}


def test_a_failed_step_without_a_record_is_one_failed_task() -> None:
    """An operator's run that could not start its task, or an unexpected error."""
    assert dict(read_step({"start": "refused"}, failed=True).totals.tasks) == {"failed": 1}
    assert not read_step({"note": "no child task"}).totals.tasks


def test_the_unreferenced_report_travels_whole_in_the_record() -> None:
    report = UnreferencedReport("delete", deleted=2, bytes_deleted=20, listed=2)
    table = TaskOutcome(lease(1), Status.DONE, result=CleanupResult(unreferenced=report))
    step = read_step(plain(DEFAULT_TRANSLATOR.done_metadata(table, None)))
    assert step.unreferenced == report
    assert StepRecord.from_json(StepRecord(unreferenced=report).to_json()) == StepRecord(
        unreferenced=report
    )


@pytest.mark.parametrize("value", ["unreferenced: 2 files", {"deleted": 2}, 3])
def test_an_unreferenced_entry_that_is_not_a_report_reads_as_none(value: object) -> None:
    record = {**StepRecord().to_json(), "unreferenced": value}
    assert StepRecord.from_json(record) == StepRecord()


# -- a run report -------------------------------------------------------------------


@op
def root_step() -> Output[int]:
    meta = {
        **DEFAULT_TRANSLATOR.table_metadata(TABLE),
        **DEFAULT_TRANSLATOR.done_metadata(ROOT, None),
    }
    return Output(0, metadata=meta)


@op
def group_step(previous: int) -> Output[int]:
    return Output(0, metadata=DEFAULT_TRANSLATOR.group_metadata(REFS, "exec", GROUP))


@op
def failed_group_step(previous: int) -> None:
    failure = Failure("boom", metadata=DEFAULT_TRANSLATOR.failure_metadata(DEAD, "run", "boom"))
    raise Failure(
        "1 of 3 failed", metadata=DEFAULT_TRANSLATOR.group_failure_metadata(GROUP, [failure])
    )


@job
def recorded_run() -> None:
    failed_group_step(group_step(root_step()))


def _report(instance: DagsterInstance, job_def: Any) -> OutcomeTotals:
    result = job_def.execute_in_process(instance=instance, raise_on_error=False)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    return report_run(instance, run)


def _expected_recorded_run() -> OutcomeTotals:
    return (
        _expected_run()
        + OutcomeTotals.of([KEPT, FREED, DEAD], child=True)
        + OutcomeTotals.counted("already-done", child=True)
    )


def test_a_run_report_from_structured_entries(instance: DagsterInstance) -> None:
    total = _report(instance, recorded_run)
    assert total == _expected_recorded_run()
    assert dict(total.children) == {"done": 4, "already-done": 2, "dead": 1}
    [record] = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(["polaris", "R", "catalog_5", "ns", "t"])), limit=5
    ).records
    event = record.asset_materialization
    assert event is not None and event.metadata["files deleted"] == MetadataValue.int(17)


@pytest.mark.usefixtures("renamed_labels")
def test_a_run_report_is_the_same_with_every_label_renamed(instance: DagsterInstance) -> None:
    assert _report(instance, recorded_run) == _expected_recorded_run()


def test_a_group_step_records_the_table_its_children_clean_up() -> None:
    """A run of orphaned children has no root step: its group steps name the table, which
    the run report reads back (never from the run's tags)."""
    child = batch_task("R", ["s3://bucket/wh/sales/payments/data/a.parquet"])
    decoded = DecodedTask.from_row(task_row(child))
    done = TaskOutcome(lease(11), Status.DONE, result=CleanupResult(deleted=1), task=decoded)
    group = [TaskResult({"status": "already-done"}, {}), TaskResult({"status": "done"}, {}, done)]
    meta = plain(DEFAULT_TRANSLATOR.group_metadata(REFS, "exec", group))
    recorded = TableRef.from_json(meta[TABLE_REF_KEY])
    assert recorded is not None and recorded == table_of(decoded)
