"""A purge on a bucket that keeps deleted objects says so, on every surface.

A table purged on a versioned moto bucket: its files are gone from listings, every
version of them is still there, and nothing is reported as freed. Then the same
numbers through each surface (CLI line and ``--json``, a step's and a run's
metadata read back, the table's materialization), for kept and for unknown; and
an unversioned bucket still says "freed" as before.
"""

from __future__ import annotations

from typing import Any

from builders import tasks as built_tasks
from polaris_pipeline.cleanup.context import CleanupResult, CleanupTally
from polaris_pipeline.cleanup.tally import tally
from polaris_pipeline.dagster.tables import TableRef
from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.leaks.reclaim import ReclaimReport
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.leaks_view import reclaim_json, reclaim_line
from polaris_pipeline.report.outcome_json import outcome_json, totals_json
from polaris_pipeline.report.outcome_line import cli_line, log_line
from polaris_pipeline.report.outcome_metadata import outcome_metadata, step_output
from polaris_pipeline.report.step_record import read_step
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.storage.delete import DeleteReport
from polaris_pipeline.tasks.formatting import PATH_SAMPLE
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced.report import UnreferencedReport
from tests.support.cleanup_sweep import assert_all_ok, sweep
from tests.support.iceberg import Warehouse, drop_task_row, table_files
from tests.support.metastore import with_policy
from tests.support.unreferenced import add_unreferenced, settle

KEPT = "kept by the bucket's versioning until its lifecycle expires them"


def _totals(runs: Any) -> OutcomeTotals:
    return OutcomeTotals.of_results(run.result for run in runs)


def _versions(moto_server: Any, bucket: str) -> set[tuple[str, str]]:
    listing = moto_server.client().list_object_versions(Bucket=bucket)
    return {(v["Key"], v["VersionId"]) for v in listing.get("Versions", [])}


def test_purge_on_a_versioned_bucket_keeps_every_version_and_frees_nothing(
    s3_warehouse: Warehouse, moto_server: Any, s3_bucket: str
) -> None:
    moto_server.client().put_bucket_versioning(
        Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    table = s3_warehouse.build("t", partitioned=True)
    oracle = table_files(table)
    versions = _versions(moto_server, s3_bucket)

    runs = sweep(s3_warehouse, drop_task_row(table))

    assert_all_ok(runs)
    assert not any(s3_warehouse.exists(p) for p in oracle)  # gone from listings
    assert _versions(moto_server, s3_bucket) == versions  # no version deleted by us
    totals = _totals(runs)
    assert totals.files_deleted >= len(oracle)
    assert totals.files_retained == totals.files_deleted and totals.bytes_freed == 0
    assert totals.retention_unknown == 0
    assert KEPT in totals.line() and " freed" not in totals.line()
    doc = totals_json(totals)
    assert doc["retention"] == "kept" and doc["files_retained"] == totals.files_deleted
    assert doc["bytes_freed"] == 0


def test_purge_on_an_unversioned_bucket_still_says_freed(s3_warehouse: Warehouse) -> None:
    table = s3_warehouse.build("t")
    runs = sweep(s3_warehouse, drop_task_row(table))
    assert_all_ok(runs)
    totals = _totals(runs)
    assert totals.files_deleted and totals.files_retained == 0 and totals.retention_unknown == 0
    assert " freed" in totals.line() and "versioning" not in totals.line()
    assert totals_json(totals)["retention"] == "freed"
    assert "files kept by versioning" not in totals.metadata()


def _outcome(**result: Any) -> TaskOutcome:
    lease = Lease("POLARIS", 7, "exec-1", 2, 1, 0, task_type_code="3", name="entityCleanup_1")
    return TaskOutcome(lease, Status.DONE, "3", result=CleanupResult(**result), error=None)


def test_only_what_the_store_neither_keeps_nor_leaves_unsaid_is_freed() -> None:
    a, b, c, d = (f"s3://wh/t/data/{n}.parquet" for n in "abcd")
    report = DeleteReport(deleted=[a, b, c, d], retained=[b], retention_unknown=[c])
    assert report.freed == [a, d]
    result = CleanupTally.start()
    tally(result, report, {a: 10, b: 20, c: 30, d: 40})
    assert (result.deleted, result.retained, result.retention_unknown) == (4, 1, 1)
    assert (result.bytes_freed, result.bytes_retained) == (50, 20)
    # One size not known: the freed bytes are not known either, never a partial sum.
    result = CleanupTally.start()
    tally(result, DeleteReport(deleted=[a, d], bytes_freed=None), {a: 10, d: None})
    assert result.bytes_freed is None
    assert DeleteReport(deleted=[a], retained=[a]).freed == []


def test_a_failure_sample_stops_at_the_sample_size() -> None:
    failed = {f"s3://wh/t/data/{n}.parquet": "AccessDenied" for n in range(PATH_SAMPLE + 5)}
    sample = {"s3://wh/t/data/first.parquet": "SlowDown"}
    DeleteReport(failed=failed).sample_failed_into(sample)
    assert len(sample) == PATH_SAMPLE and sample["s3://wh/t/data/first.parquet"] == "SlowDown"
    DeleteReport(failed={"s3://wh/t/data/late.parquet": "AccessDenied"}).sample_failed_into(sample)
    assert len(sample) == PATH_SAMPLE  # full: nothing more is kept


def test_kept_bytes_on_every_surface() -> None:
    done = _outcome(deleted=3, bytes_freed=0, retained=3, bytes_retained=None)
    line, log = cli_line(done), log_line(done)
    assert f"3 object(s) deleted; their bytes {KEPT}" in line and "freed" not in line
    assert KEPT in log and "freed" not in log
    doc = outcome_json(done)
    assert (doc["retention"], doc["files_retained"], doc["bytes_retained"]) == ("kept", 3, None)
    meta = outcome_metadata(done)
    assert meta["files kept by versioning"] == 3
    assert meta["tasks without sizes of kept files"] == 1
    # A run's total reads a step's record back.
    step = PolarisTranslator().done_metadata(done, None)
    run = read_step({k: getattr(v, "value", v) for k, v in step.items()}).totals
    assert run.files_retained == 3 and run.bytes_retained_known is None
    assert KEPT in run.line() and "freed" not in run.line()
    assert step_output(done)["files_retained"] == 3
    ref = TableRef("POLARIS", ("ns",), "t")
    event = PolarisTranslator().table_materialization(ref, OutcomeTotals.of([done]), "r")
    assert KEPT in (event.description or "") and "freed" not in (event.description or "")
    assert event.metadata["files kept by versioning"].value == 3


def test_kept_bytes_with_sizes_are_counted() -> None:
    done = _outcome(deleted=2, bytes_freed=0, retained=2, bytes_retained=2048)
    assert f"2 object(s) deleted; 2.0 KiB {KEPT}" in cli_line(done)
    assert outcome_json(done)["bytes_retained"] == 2048


def test_an_unanswered_question_is_unknown_not_freed() -> None:
    done = _outcome(deleted=2, bytes_freed=0, retention_unknown=2)
    assert "bytes kept or freed: unknown" in cli_line(done) and "freed (" not in cli_line(done)
    doc = outcome_json(done)
    assert doc["retention"] == "unknown" and doc["retention_unknown"] == 2
    totals = OutcomeTotals.of([done])
    assert "bytes kept or freed: unknown" in totals.line() and " B freed" not in totals.line()
    assert totals.metadata()["files kept or freed: unknown"] == 2


def test_a_runner_sweep_with_unreferenced_files_on_a_versioned_bucket(
    store: Metastore, s3_warehouse: Warehouse, moto_server: Any, s3_bucket: str
) -> None:
    """Through the Runner (one resolver, so one question per bucket): the table's
    outcome and its unreferenced phase both say kept, and every version stays."""
    moto_server.client().put_bucket_versioning(
        Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    table = s3_warehouse.build("t", appends=2)
    unreferenced = add_unreferenced(table, s3_warehouse.resolver)
    settle(s3_warehouse.resolver, table.location())
    task = built_tasks.drop_table_task(table)
    versions = _versions(moto_server, s3_bucket)
    store.insert_tasks([task])
    with Runner(
        with_policy(store, unreferenced="delete"),
        s3_warehouse.config,
        resolver=s3_warehouse.resolver,
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])
    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert _versions(moto_server, s3_bucket) == versions
    totals = OutcomeTotals.of(outcomes)
    assert totals.files_retained == totals.files_deleted > 0 and totals.bytes_freed == 0
    assert KEPT in totals.line()
    [root] = [o for o in outcomes if o.lease.task_id == task.id]
    assert root.result is not None and root.result.unreferenced is not None
    report = root.result.unreferenced
    assert report.deleted == len(unreferenced) == report.retained
    assert report.bytes_deleted == 0 and report.bytes_retained
    assert KEPT in report.summary()


def test_the_unreferenced_line_says_kept_only_when_kept() -> None:
    kept = UnreferencedReport("delete", deleted=2, retained=2, bytes_retained=10)
    assert f"2 object(s) deleted; 10 B {KEPT}" in kept.summary()
    freed = UnreferencedReport("delete", deleted=2, bytes_deleted=10)
    assert "versioning" not in freed.summary() and "unknown" not in freed.summary()


def test_a_reclaimed_root_on_a_versioned_bucket_says_kept() -> None:
    report = ReclaimReport("s3://b/t", 86_400_000, deleted=2, retained=2, bytes_retained=10)
    assert f"2 object(s) deleted; 10 B {KEPT}" in reclaim_line(report)
    assert reclaim_json(report)["retained"] == 2 and reclaim_json(report)["bytes_deleted"] == 0
    assert "versioning" not in reclaim_line(ReclaimReport("s3://b/t", 86_400_000, deleted=2))
