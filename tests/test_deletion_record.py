"""The deletion record: every path an attempt deletes, in a JSON Lines file per attempt.

Real tables purged through the Runner and the CLI, the record on local files and
on moto's S3; a prefix that cannot be written stops the purge before any delete;
a crash after the first chunk leaves that chunk recorded.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.cleanup.batch import run_batch_cleanup
from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.cli.context import settings_for
from polaris_pipeline.cli.parser import build_parser
from polaris_pipeline.dagster.definitions import build_defs, build_defs_from_env
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.errors import LeaseLost
from polaris_pipeline.execution.outcome import Status
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import PipelineSettings, SettingsError
from polaris_pipeline.storage.config import StorageConfig, StorageRule
from polaris_pipeline.storage.deletion_record import DeletionRecord, RecordHeader
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask
from tests.support.cli import POLICY_FLAGS, run, url_of
from tests.support.iceberg import (
    BUILT_TABLE,
    Warehouse,
    drop_task_row,
    table_files,
)
from tests.support.metastore import with_policy
from tests.support.s3 import MotoS3
from tests.support.table_metadata import content_files
from tests.support.unreferenced import add_unreferenced, settle

NAME = re.compile(r"^attempt-1-[A-Za-z0-9._-]+-\d{8}T\d{12}Z-[0-9a-f]{6}\.jsonl$")


def _drop_task(table: Table) -> NewTask:
    task = drop_task_row(table)
    return NewTask(task.realm_id, task.id, task.name, task.properties, task.internal_properties)


def _local_records(root: Path) -> list[list[dict[str, Any]]]:
    return [
        [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(root.rglob("*.jsonl"))
    ]


def _results(records: list[list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Path -> its lines, over every record."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        for line in record:
            if line["record"] == "path":
                out.setdefault(line["path"], []).append(line)
    return out


def _assert_whole(record: list[dict[str, Any]], status: str) -> None:
    header, footer = record[0], record[-1]
    assert header["record"] == "header" and footer["record"] == "footer"
    assert footer["status"] == status
    paths = record[1:-1]
    assert all(line["record"] == "path" for line in paths)
    counted = {r: sum(1 for p in paths if p["result"] == r) for r in footer["totals"]}
    assert counted == footer["totals"]


def test_a_purge_records_every_deleted_path_and_the_one_already_gone(
    local_warehouse: Warehouse, store: Metastore, tmp_path: Path
) -> None:
    table = local_warehouse.build("t", partitioned=True, appends=2)
    oracle = table_files(table)
    gone = sorted(content_files(table))[0]
    Path(gone.removeprefix("file://")).unlink()
    store.insert_tasks([_drop_task(table)])
    audit = tmp_path / "audit"

    with Runner(
        store,
        local_warehouse.config,
        resolver=local_warehouse.resolver,
        deletion_record=f"file://{audit}/",
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])
        executor_id = runner.executor_id

    assert outcomes and all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert not any(local_warehouse.exists(p) for p in oracle)
    records = _local_records(audit)
    # The parent deletes nothing (it plans children): one record per child, each whole.
    assert len(records) == len(outcomes) - 1
    for record in records:
        _assert_whole(record, "done")
        header = record[0]
        assert header["realm"] == "POLARIS" and header["attempt"] == 1
        assert header["executor_id"] == executor_id and header["run_id"] is None
        assert header["task_type"] in ("MANIFEST_FILE_CLEANUP", "BATCH_FILE_CLEANUP")
        # A 63-bit id as a string: a JSON number past 2**53 loses digits in jq 1.6.
        assert isinstance(header["task_id"], str) and int(header["task_id"]) > 0
    files = sorted(audit.rglob("*.jsonl"))
    assert all(NAME.match(f.name) for f in files), [f.name for f in files]
    assert all(f.parent.parent.name == "POLARIS" for f in files)

    results = _results(records)
    assert set(results) == oracle
    # A data file two snapshots share is named by two manifests: one child deletes
    # it, the other finds it gone. Each path is deleted once, or was gone before.
    assert {line["result"] for line in results[gone]} == {"already gone"}
    for path in oracle - {gone}:
        deleted = [line for line in results[path] if line["result"] == "deleted"]
        assert len(deleted) == 1, results[path]
        assert {line["result"] for line in results[path]} <= {"deleted", "already gone"}
        # Local deletes know each file's size; the record keeps it.
        assert deleted[0]["size"] > 0


def test_a_batch_records_deleted_refused_and_already_gone(store: Metastore, tmp_path: Path) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    table.mkdir(parents=True)
    kept_out = tmp_path / "elsewhere.json"
    kept_out.write_text("not the table's")
    present = table / "m.avro"
    present.write_text("12345")
    missing = f"file://{table}/missing.avro"
    task = batch_task(
        "r1",
        [f"file://{present}", missing, f"file://{kept_out}"],
        internal={"storageLocation": f"file://{table}"},
    )
    store.insert_tasks([task])
    audit = tmp_path / "audit"

    with Runner(store, deletion_record=str(audit), run_id="dagster-run-1") as runner:
        (outcome,) = sweep_tasks(runner, ["r1"])

    assert outcome.status is Status.DEAD and outcome.permanent  # a guard refusal
    assert not present.exists() and kept_out.exists()
    (record,) = _local_records(audit)
    _assert_whole(record, "failed")
    assert record[0]["run_id"] == "dagster-run-1" and record[0]["task_type"] == "BATCH_FILE_CLEANUP"
    assert record[-1]["error"] == outcome.error
    results = {path: lines[0] for path, lines in _results([record]).items()}
    assert results[f"file://{present}"]["result"] == "deleted"
    assert results[f"file://{present}"]["size"] == 5
    assert results[missing]["result"] == "already gone"
    refused = results[f"file://{kept_out}"]
    assert refused["result"] == "refused" and "outside" in refused["reason"]
    assert record[-1]["bytes_deleted"] == 5 and record[-1]["deleted_without_size"] == 0


def test_an_unwritable_prefix_fails_the_attempt_before_any_delete(
    local_warehouse: Warehouse, store: Metastore, tmp_path: Path
) -> None:
    table = local_warehouse.build("t", appends=2)
    oracle = table_files(table)
    store.insert_tasks([_drop_task(table)])
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the record's directory should be")

    with Runner(
        store,
        local_warehouse.config,
        resolver=local_warehouse.resolver,
        deletion_record=f"file://{blocker}/audit/",
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert all(local_warehouse.exists(p) for p in oracle)  # nothing deleted
    failed = [o for o in outcomes if not o.ok]
    assert failed, "every child that would delete fails"
    for outcome in failed:
        assert outcome.status is Status.FAILED and not outcome.permanent  # retried later
        assert "cannot write the deletion record" in (outcome.error or "")
        assert "nothing more is deleted without it" in (outcome.error or "")


def _s3_record_config(moto: MotoS3, *buckets: str) -> StorageConfig:
    return StorageConfig(
        rules=tuple(StorageRule(f"s3://{b}", moto.storage_options()) for b in buckets)
    )


def _s3_records(moto: MotoS3, bucket: str) -> dict[str, bytes]:
    client = moto.client()
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_an_s3_table_recorded_on_s3_holds_its_paths_and_no_secret(
    built_s3_warehouse: Warehouse, store: Metastore, moto_server: MotoS3
) -> None:
    audit = f"pp-audit-{uuid.uuid4().hex[:12]}"
    moto_server.client().create_bucket(Bucket=audit)
    table = built_s3_warehouse.catalog.load_table(BUILT_TABLE)
    oracle = built_s3_warehouse.built_files(BUILT_TABLE)
    store.insert_tasks([_drop_task(table)])
    bucket = built_s3_warehouse.uri.removeprefix("s3://").split("/")[0]
    config = _s3_record_config(moto_server, bucket, audit)

    with Runner(
        store, config, resolver=StorageResolver(config), deletion_record=f"s3://{audit}/pp/"
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    objects = _s3_records(moto_server, audit)
    assert objects and all(key.startswith("pp/POLARIS/") for key in objects)
    for body in objects.values():
        assert moto_server.key.encode() not in body and moto_server.secret.encode() not in body
    records = [[json.loads(line) for line in body.splitlines()] for body in objects.values()]
    for record in records:
        _assert_whole(record, "done")
    results = _results(records)
    assert set(results) == oracle
    # S3 answers a delete of an absent key as deleted: a file two manifests name
    # is "deleted" twice there, never anything else.
    assert all(line["result"] == "deleted" for lines in results.values() for line in lines)


def test_a_missing_bucket_fails_the_attempt_with_nothing_deleted(
    local_warehouse: Warehouse, store: Metastore, moto_server: MotoS3
) -> None:
    table = local_warehouse.build("t", appends=1)
    oracle = table_files(table)
    store.insert_tasks([_drop_task(table)])
    absent = f"pp-absent-{uuid.uuid4().hex[:12]}"
    config = _s3_record_config(moto_server, absent)

    with Runner(
        store, config, resolver=StorageResolver(config), deletion_record=f"s3://{absent}/"
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert all(local_warehouse.exists(p) for p in oracle)
    errors = [o.error or "" for o in outcomes if not o.ok]
    assert errors and all("cannot write the deletion record" in e for e in errors)
    assert all(f"s3://{absent}/POLARIS/" in e for e in errors)
    assert not any(moto_server.secret in e for e in errors)


CRASH = textwrap.dedent(
    """
    import os, sys
    from polaris_pipeline.execution.runner import Runner
    from polaris_pipeline.execution.sweep import sweep_tasks
    from polaris_pipeline.metastore import Metastore

    store = Metastore(sys.argv[1])
    # Dies (no cleanup, no footer) once the first chunk of deletes is done.
    with Runner(store, deletion_record=sys.argv[2], progress=lambda *a: os._exit(9)) as runner:
        sweep_tasks(runner, ["r1"])
    """
)


def test_a_crash_after_the_first_chunk_leaves_that_chunk_recorded(
    store: Metastore, tmp_path: Path
) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    table.mkdir(parents=True)
    # One more than a chunk (the S3 limit of 1000 keys): two chunks.
    files = [table / f"{i:04}.avro" for i in range(1001)]
    for f in files:
        f.write_bytes(b"x")
    task = batch_task(
        "r1",
        [f"file://{f}" for f in files],
        internal={"storageLocation": f"file://{table}"},
        create_timestamp=store.now_ms() - 3_600_000,  # past Polaris's grace period
    )
    store.insert_tasks([task])
    audit = tmp_path / "audit"

    proc = subprocess.run(
        [sys.executable, "-c", CRASH, url_of(store), f"file://{audit}"],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert proc.returncode == 9, proc.stderr
    remaining = [f for f in files if f.exists()]
    assert len(remaining) == 1  # the second chunk never ran
    (record,) = _local_records(audit)
    assert record[0]["record"] == "header" and record[-1]["record"] == "path"  # no footer
    recorded = {line["path"] for line in record[1:] if line["result"] == "deleted"}
    assert recorded == {f"file://{f}" for f in files if not f.exists()}
    assert len(recorded) == 1000


def test_the_cli_sweep_records_and_its_dry_run_writes_nothing(
    local_warehouse: Warehouse, store: Metastore, tmp_path: Path
) -> None:
    table = local_warehouse.build("t", appends=2)
    oracle = table_files(table)
    store.insert_tasks([_drop_task(table)])
    audit = tmp_path / "audit"
    common = ["--metastore", url_of(store), "--deletion-record", f"file://{audit}/", *POLICY_FLAGS]

    code, out = run("sweep", "--dry-run", *common)
    assert code == 0, out
    assert not audit.exists()  # a dry run writes no record

    code, out = run("sweep", *common)
    assert code == 0, out
    records = _local_records(audit)
    assert records
    for record in records:
        _assert_whole(record, "done")
        assert record[0]["executor_id"].startswith("polaris-pipeline:sweep:")
    results = _results(records)
    assert set(results) == oracle
    for lines in results.values():
        # Deleted once; found gone by any later child naming the same file.
        assert [line["result"] for line in lines].count("deleted") == 1, lines


def test_the_setting_reaches_the_cli_env_and_the_dagster_storage_resource(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert PipelineSettings().storage.deletion_record is None  # off by default
    env = {"POLARIS_PIPELINE_DELETION_RECORD": "s3://audit/pp/"}
    assert PipelineSettings.from_env(env).storage.deletion_record == "s3://audit/pp/"
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_DELETION_RECORD"):
        PipelineSettings.from_env({"POLARIS_PIPELINE_DELETION_RECORD": "relative/dir"})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--deletion-record", "audit"])
    assert "argument --deletion-record: 'audit': " in capsys.readouterr().err
    flagged = build_parser().parse_args(["sweep", "--deletion-record", "s3://audit/pp/"])
    assert settings_for(flagged).storage.deletion_record == "s3://audit/pp/"

    resources = dict(
        build_defs(storage=PolarisStorageResource(deletion_record="s3://audit/pp/")).resources or {}
    )
    assert resources["storage"].deletion_record == "s3://audit/pp/"
    assert dict(build_defs().resources or {})["storage"].deletion_record is None
    with pytest.raises(ValueError, match=r"deletion_record\n.*not an fsspec URI prefix"):
        PolarisStorageResource(deletion_record="nowhere")

    monkeypatch.setenv("POLARIS_PIPELINE_DELETION_RECORD", "file:///var/log/pp/")
    from_env = dict(build_defs_from_env().resources or {})
    assert from_env["storage"].deletion_record == "file:///var/log/pp/"


def test_a_lease_lost_midway_through_a_chunk_leaves_what_it_deleted_recorded(
    tmp_path: Path,
) -> None:
    """The holder's check stops a chunk after two files: both are in the record."""
    table = tmp_path / "wh" / "ns" / "t"
    table.mkdir(parents=True)
    files = [table / f"{i}.avro" for i in range(5)]
    for f in files:
        f.write_bytes(b"abc")
    task = built_tasks.task_row(
        batch_task("r1", [f"file://{f}" for f in files], internal={"storageLocation": str(table)})
    )
    resolver = StorageResolver(StorageConfig())
    header = RecordHeader("r1", task.id, task.name, "BATCH_FILE_CLEANUP", 1, "holder")
    record = DeletionRecord(str(tmp_path / "audit"), resolver, header)
    checks = iter(range(100))

    def still_held() -> None:
        if next(checks) == 2:
            raise LeaseLost("lost")

    ctx = CleanupContext(
        task=task, resolver=resolver, config=StorageConfig(), still_held=still_held, record=record
    )
    with pytest.raises(LeaseLost):
        run_batch_cleanup(ctx)
    record.close("lease lost", "lost")

    (lines,) = _local_records(tmp_path / "audit")
    _assert_whole(lines, "lease lost")
    deleted = {line["path"] for line in lines if line.get("result") == "deleted"}
    assert deleted == {f"file://{f}" for f in files[:2]}
    assert [f.exists() for f in files] == [False, False, True, True, True]


def test_the_component_hands_the_prefix_to_the_storage_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dagster.components.testing import create_defs_folder_sandbox

    from polaris_pipeline.dagster import PolarisSweeper

    monkeypatch.setenv("POLARIS_METASTORE_URL", "sqlite:////tmp/unused.db")
    yaml = {
        "type": "polaris_pipeline.dagster.PolarisSweeper",
        "attributes": {
            "metastore": {"url": "{{ env.POLARIS_METASTORE_URL }}"},
            "storage": {"deletion_record": "s3://audit/polaris-pipeline/"},
        },
    }
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=PolarisSweeper, defs_yaml_contents=yaml
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_, defs):
            storage = dict(defs.resources or {})["storage"]
    assert storage.deletion_record == "s3://audit/polaris-pipeline/"


def test_the_unreferenced_phase_records_the_files_it_deletes(
    local_warehouse: Warehouse, store: Metastore, tmp_path: Path
) -> None:
    table = local_warehouse.build("t", appends=1)
    unreferenced = add_unreferenced(table, local_warehouse.resolver)
    settle(local_warehouse.resolver, table.location())  # every file is older than the drop
    oracle = table_files(table)
    store.insert_tasks([_drop_task(table)])
    audit = tmp_path / "audit"

    with Runner(
        with_policy(store, unreferenced="delete"),
        local_warehouse.config,
        resolver=local_warehouse.resolver,
        deletion_record=str(audit),
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    records = _local_records(audit)
    for record in records:
        _assert_whole(record, "done")
    results = _results(records)
    assert unreferenced <= oracle and set(results) == oracle
    for path in unreferenced:
        assert [line["result"] for line in results[path]] == ["deleted"], results[path]
    # The phase's record is the table's own (its task id), apart from its children's.
    root = {o.lease.task_id for o in outcomes if o.result and o.result.unreferenced}
    (root_id,) = root
    (phase,) = [r for r in records if r[0]["task_id"] == str(root_id)]
    assert {line["path"] for line in phase[1:-1]} == unreferenced
