"""Cleanup handlers on real Iceberg tables, local and on S3 (moto), called directly.

A "sweep" runs a dropped table's cleanup task, then each child in list order, the
way the runner does; a task whose handler raises (a lost lease) stays at the head
of the queue and is run again from scratch. The metastore is not involved:
``create_children`` appends to the queue.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus, read_manifest_list
from pyiceberg.table import Table
from pyiceberg.table.statistics import StatisticsFile

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.cleanup.guard.shared_location import DROPPED_METADATA_KEY
from polaris_pipeline.cleanup.manifest import iter_manifest_entries
from polaris_pipeline.cleanup.stages import CHILD_STAGES
from polaris_pipeline.errors import LeaseLost, PayloadError
from polaris_pipeline.metastore import new_entity_id
from polaris_pipeline.tasks.manifest_codec import (
    CONTENT_DELETES,
    decode_manifest_file,
    encode_manifest_file,
    manifest_ref_from_pyiceberg,
)
from polaris_pipeline.tasks.model import NewTask, TaskRow, TaskType
from polaris_pipeline.tasks.payloads import (
    decode_batch_cleanup,
    decode_dropped_entity,
    decode_manifest_cleanup,
    encode_dropped_entity,
)
from polaris_pipeline.tasks.release import PolarisRelease
from tests.support.cleanup_sweep import assert_all_ok, sweep
from tests.support.iceberg import Warehouse, drop_task_row, table_files, write_view_metadata
from tests.support.table_metadata import content_files, delete_manifest_paths, entry_statuses

UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
CAPPED = {"write.metadata.previous-versions-max": "2"}


# -- the sweep harness ---------------------------------------------------------------


# The S3 half of the local/S3 pairs whose S3 run takes 8 s or more (moto): `make test`
# runs it, `make test-fast` the local half.
S3_IS_SLOW = pytest.mark.parametrize(
    "warehouse", ["local", pytest.param("s3", marks=pytest.mark.slow)], indirect=True
)


def run_one(wh: Warehouse, task: TaskRow, **ctx_kwargs: Any) -> tuple[CleanupTally, list[NewTask]]:
    created: list[NewTask] = []

    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        created.extend(children)
        return children

    ctx_kwargs.setdefault("create_children", create)
    ctx = CleanupContext(task=task, resolver=wh.resolver, config=wh.config, **ctx_kwargs)
    return run_cleanup(ctx), created


def stage_sizes(result: CleanupTally) -> list[int]:
    """How many children the handler put in each stage of the engine's plan."""
    return [len(children) for _, children in result.child_stages]


def full_table(wh: Warehouse, name: str = "t", **kwargs: Any) -> Table:
    """A partitioned table with delete files, statistics, a capped metadata log."""
    opts: dict[str, Any] = {
        "partitioned": True,
        "with_deletes": True,
        "with_statistics": True,
        "properties": CAPPED,
    }
    opts.update(kwargs)
    return wh.build(name, **opts)


def batch_row(
    table: Table, files: list[str], *, storage_location: str | None = None, name: str = "b"
) -> TaskRow:
    data = json.dumps(
        {
            "tableId": {"namespace": list(table.name()[:-1]), "name": table.name()[-1]},
            "batchFiles": files,
            "type": "TABLE_METADATA",
        }
    )
    return built_tasks.task_row(
        NewTask(
            realm_id="POLARIS",
            id=new_entity_id(),
            name=f"entityCleanup_1_{name}",
            properties={"taskType": "3", "data": data},
            internal_properties={"storageLocation": storage_location or table.location()},
        )
    )


# -- a whole table, local and S3 -----------------------------------------------------


@S3_IS_SLOW
def test_sweep_deletes_exactly_the_table(warehouse: Warehouse) -> None:
    table = full_table(warehouse)
    odd = built_tables.add_data_file_named(table, "odd[1]*name.parquet")
    table = warehouse.catalog.load_table(table.name())
    neighbour = warehouse.build("t_neighbour", properties=CAPPED)
    oracle = table_files(table)
    neighbour_files = table_files(neighbour)
    delete_files = content_files(table) - {
        p
        for s in table.metadata.snapshots
        for m in s.manifests(table.io)
        if m.content == ManifestContent.DATA
        for p in (e.data_file.file_path for e in m.fetch_manifest_entry(table.io, False))
    }
    # The table really has what the cleanup must handle.
    assert delete_manifest_paths(table)
    assert len(delete_files) == 2
    assert entry_statuses(table) == set(ManifestEntryStatus)
    assert table.metadata.statistics and table.metadata.partition_statistics
    before = warehouse.files()

    runs = sweep(warehouse, drop_task_row(table))

    assert_all_ok(runs)
    after = warehouse.files()
    assert before - after == oracle
    assert odd in oracle and not warehouse.exists(odd)
    assert delete_files <= oracle
    assert not any(warehouse.exists(p) for p in delete_files)
    assert all(warehouse.exists(p) for p in neighbour_files)
    parent, last = runs[0].result, runs[-1]
    assert parent.deleted == 0 and stage_sizes(parent)[-1] == 1
    assert decode_batch_cleanup(last.task.data()).batch_files == (table.metadata_location,)
    assert last.result.deleted_paths_sample == [table.metadata_location]
    assert sum(r.result.deleted for r in runs) >= len(oracle)


def test_current_metadata_file_goes_last(local_warehouse: Warehouse) -> None:
    wh = local_warehouse
    table = full_table(wh)
    oracle = table_files(table)
    parent, children = run_one(wh, drop_task_row(table))
    stages = stage_sizes(parent)
    assert len(stages) == 3 and sum(stages) == len(children) and stages[-1] == 1
    kinds = [c.properties["taskType"] for c in children]
    assert kinds == ["2"] * stages[0] + ["3"] * (stages[1] + 1)
    assert wh.exists(table.metadata_location)

    for child in children[:-1]:
        result, _ = run_one(wh, built_tasks.task_row(child))
        assert result.ok
        # Every other file may be gone by now; the metadata file is still there.
        assert wh.exists(table.metadata_location)
    assert (oracle & wh.files()) == {table.metadata_location}
    result, _ = run_one(wh, built_tasks.task_row(children[-1]))
    assert result.ok and result.deleted == 1
    assert oracle.isdisjoint(wh.files())


def test_table_with_only_a_metadata_file_is_deleted_by_the_parent(
    local_warehouse: Warehouse,
) -> None:
    local_warehouse.catalog.create_namespace_if_not_exists("ns")
    table = local_warehouse.catalog.create_table("ns.bare", schema=built_tables.TABLE_SCHEMA)
    assert not table.metadata.snapshots and not table.metadata.metadata_log
    result, children = run_one(local_warehouse, drop_task_row(table))
    assert result.ok and not children and not result.child_stages
    assert result.deleted == 1 and not local_warehouse.exists(table.metadata_location)


def test_format_v1_table_is_swept(local_warehouse: Warehouse) -> None:
    table = local_warehouse.build("v1", format_version=1, properties=CAPPED)
    oracle = table_files(table)
    before = local_warehouse.files()
    runs = sweep(local_warehouse, drop_task_row(table))
    assert_all_ok(runs)
    assert before - local_warehouse.files() == oracle


# -- children match Polaris's format -------------------------------------------------


def test_children_match_polaris_format(local_warehouse: Warehouse) -> None:
    table = full_table(local_warehouse, properties={})
    task = drop_task_row(table, realm_id="realm-1")
    manifests = {
        mf.manifest_path: mf
        for s in table.metadata.snapshots
        for mf in read_manifest_list(table.io.new_input(s.manifest_list))
    }

    # Children for Polaris 1.7+: batch payloads carry "type".
    result, children = run_one(
        local_warehouse, task, metadata_batch_size=4, release=PolarisRelease(1, 7)
    )

    assert result.ok and result.children == children
    types = [c.properties["taskType"] for c in children]
    # Manifest children come first: the runner goes in list order.
    assert types == sorted(types)
    manifest_children = [c for c in children if c.properties["taskType"] == "2"]
    *batch_children, last = [c for c in children if c.properties["taskType"] == "3"]
    assert children[-1] is last
    assert stage_sizes(result) == [len(manifest_children), len(batch_children), 1]
    assert [stage for stage, _ in result.child_stages] == list(CHILD_STAGES)
    assert len(manifest_children) == len(manifests)
    assert len({c.id for c in children}) == len(children)
    for child in children:
        assert child.realm_id == "realm-1"
        # Polaris copies the parent's; we add the dropped metadata file (a restore check).
        assert child.internal_properties == {
            **task.internal_properties,
            DROPPED_METADATA_KEY: table.metadata_location,
        }
        assert set(child.properties) == {"taskType", "data"}

    seen: set[str] = set()
    for child in manifest_children:
        raw = json.loads(child.properties["data"])
        assert set(raw) == {"tableId", "manifestFileData"}
        assert raw["tableId"] == {"namespace": ["ns"], "name": "t"}
        blob = base64.b64decode(raw["manifestFileData"])
        assert blob[:2] == b"\xc2\x01"
        ref = decode_manifest_file(blob)
        assert decode_manifest_cleanup(child.properties["data"]).manifest == ref
        assert ref == manifest_ref_from_pyiceberg(manifests[ref.manifest_path])
        assert re.fullmatch(re.escape(f"{task.name}_{ref.manifest_path}_") + UUID_RE, child.name), (
            child.name
        )
        seen.add(ref.manifest_path)
    assert seen == set(manifests)
    delete_refs = [
        decode_manifest_cleanup(c.properties["data"]).manifest for c in manifest_children
    ]
    assert any(ref.content == CONTENT_DELETES for ref in delete_refs)

    batched: list[str] = []
    for child in batch_children:
        raw = json.loads(child.properties["data"])
        assert set(raw) == {"tableId", "batchFiles", "type"}
        assert raw["type"] == "TABLE_METADATA"
        assert raw["tableId"] == {"namespace": ["ns"], "name": "t"}
        assert 1 <= len(raw["batchFiles"]) <= 4
        payload = decode_batch_cleanup(child.properties["data"])
        assert list(payload.batch_files) == raw["batchFiles"]
        listing = "[" + ", ".join(raw["batchFiles"]) + "]"
        assert re.fullmatch(re.escape(f"{task.name}_{listing}_") + UUID_RE, child.name)
        batched.extend(raw["batchFiles"])
    metadata = table.metadata
    expected = (
        {s.manifest_list for s in metadata.snapshots}
        | {e.metadata_file for e in metadata.metadata_log}
        | {s.statistics_path for s in metadata.statistics}
        | {s.statistics_path for s in metadata.partition_statistics}
    )
    assert len(batched) == len(set(batched))
    assert set(batched) == expected
    assert table.metadata_location not in batched
    # The current metadata file is the last child's, alone, in the same format.
    raw = json.loads(last.properties["data"])
    assert raw == {
        "tableId": {"namespace": ["ns"], "name": "t"},
        "batchFiles": [table.metadata_location],
        "type": "TABLE_METADATA",
    }
    listing = f"[{table.metadata_location}]"
    assert re.fullmatch(re.escape(f"{task.name}_{listing}_") + UUID_RE, last.name)
    # The parent deleted nothing itself.
    assert result.deleted == 0
    assert all(local_warehouse.exists(p) for p in [*batched, table.metadata_location])


def test_default_batch_size_is_ten(local_warehouse: Warehouse) -> None:
    table = local_warehouse.build("t", appends=8)
    _, children = run_one(local_warehouse, drop_task_row(table))
    sizes = [
        len(decode_batch_cleanup(c.properties["data"]).batch_files)
        for c in children
        if c.properties["taskType"] == "3"
    ]
    assert max(sizes) == 10 and len(sizes) >= 2


# -- gc.enabled, capped metadata log -------------------------------------------------


@pytest.mark.parametrize("where", ["table", "task"])
def test_gc_disabled_keeps_content_files(local_warehouse: Warehouse, where: str) -> None:
    props = {"gc.enabled": "false"} if where == "table" else {}
    table = full_table(local_warehouse, properties=props)
    extra = {"gc.enabled": "false"} if where == "task" else {}
    oracle = table_files(table)
    content = content_files(table)
    delete_manifests = delete_manifest_paths(table)
    before = local_warehouse.files()

    runs = sweep(local_warehouse, drop_task_row(table, extra_internal_properties=extra))

    assert_all_ok(runs)
    assert all(r.task.task_type() != TaskType.MANIFEST_FILE_CLEANUP for r in runs)
    assert "gc.enabled='false': content files kept" in runs[0].result.notes
    assert all(local_warehouse.exists(p) for p in content)
    assert before - local_warehouse.files() == oracle - content
    assert delete_manifests and not any(local_warehouse.exists(p) for p in delete_manifests)


def test_gc_disabled_manifest_task_keeps_its_files(local_warehouse: Warehouse) -> None:
    """A manifest task (e.g. Polaris's) of a gc-disabled table deletes only the manifest."""
    table = local_warehouse.build("t", properties={"gc.enabled": "false"})
    _, children = run_one(local_warehouse, drop_task_row(table))
    assert all(c.properties["taskType"] == "3" for c in children)
    mf = next(iter(table.current_snapshot().manifests(table.io)))  # type: ignore[union-attr]
    data = json.dumps(
        {
            "tableId": {"namespace": ["ns"], "name": "t"},
            "manifestFileData": base64.b64encode(
                encode_manifest_file(manifest_ref_from_pyiceberg(mf))
            ).decode(),
        }
    )
    task = built_tasks.task_row(
        NewTask(
            "POLARIS",
            7,
            "m",
            {"taskType": "2", "data": data},
            {"storageLocation": table.location(), "gc.enabled": "false"},
        )
    )
    files = [e.data_file.file_path for e in mf.fetch_manifest_entry(table.io, False)]
    result, _ = run_one(local_warehouse, task)
    assert result.ok and result.deleted == 1
    assert "gc.enabled='false': content files kept" in result.notes
    assert not local_warehouse.exists(mf.manifest_path)
    assert all(local_warehouse.exists(p) for p in files)


def test_capped_log_removes_older_metadata(local_warehouse: Warehouse) -> None:
    table = local_warehouse.build(
        "t", appends=6, properties={"write.metadata.previous-versions-max": "1"}
    )
    in_log = {e.metadata_file for e in table.metadata.metadata_log}
    on_disk = {p for p in local_warehouse.files() if p.endswith(".metadata.json")}
    beyond = on_disk - in_log - {table.metadata_location}
    assert len(in_log) == 1 and len(beyond) >= 8

    runs = sweep(local_warehouse, drop_task_row(table))

    assert_all_ok(runs)
    assert not any(local_warehouse.exists(p) for p in on_disk)
    assert f"{len(beyond)} metadata file(s) older than the metadata log found" in (
        runs[0].result.notes
    )


# -- dry run -------------------------------------------------------------------------


@S3_IS_SLOW
def test_dry_run_lists_exactly_the_oracle(warehouse: Warehouse) -> None:
    table = full_table(warehouse)
    oracle = table_files(table)
    before = warehouse.files()
    calls: list[Any] = []

    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        calls.append(children)
        return children

    result, _ = run_one(warehouse, drop_task_row(table), dry_run=True, create_children=create)

    assert warehouse.files() == before
    assert not calls and not result.children
    assert result.deleted == 0 and not result.refused and not result.failed
    assert len(result.would_delete) == len(set(result.would_delete))
    assert set(result.would_delete) == oracle
    # Children's dry runs agree with the real plan, and delete nothing either.
    _, children = run_one(warehouse, drop_task_row(table))
    listed: set[str] = set()
    for child in children:
        r, _ = run_one(warehouse, built_tasks.task_row(child), dry_run=True)
        assert r.deleted == 0 and r.ok
        listed.update(r.would_delete)
    assert listed == oracle
    assert warehouse.files() == before


# -- crash injection -----------------------------------------------------------------


class CrashAt:
    """A fence that raises LeaseLost on its k-th call (0: never), counting calls."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == self.k:
            raise LeaseLost(f"injected at fence call {self.k}")


@pytest.fixture
def crash_table(local_warehouse: Warehouse, tmp_path: Path) -> tuple[Table, set[str], Any]:
    """A table plus neighbour, a backup of the warehouse, and a restore function."""
    table = full_table(local_warehouse)
    local_warehouse.build("t_neighbour")
    oracle = table_files(table)
    root = Path(local_warehouse.uri[len("file://") :])
    backup = tmp_path / "backup"
    shutil.copytree(root, backup)

    def restore() -> None:
        shutil.rmtree(root)
        shutil.copytree(backup, root)

    return table, oracle, restore


@pytest.mark.slow
def test_crash_at_every_fence_call_still_deletes_exactly_the_table(
    local_warehouse: Warehouse, crash_table: tuple[Table, set[str], Any]
) -> None:
    table, oracle, restore = crash_table
    task = drop_task_row(table)
    before = local_warehouse.files()
    counter = CrashAt(0)
    assert_all_ok(sweep(local_warehouse, task, fence=counter, delete_chunk_size=2))
    total = counter.calls
    assert total > 20  # parent, every chunk of every manifest, every batch

    for k in range(1, total + 1):
        restore()
        crash = CrashAt(k)
        runs = sweep(local_warehouse, task, fence=crash, delete_chunk_size=2)
        assert crash.calls > k, f"crash {k} was never reached"
        assert_all_ok(runs)
        assert before - local_warehouse.files() == oracle, f"crash at fence call {k}"


def test_crash_after_children_inserted(
    local_warehouse: Warehouse, crash_table: tuple[Table, set[str], Any]
) -> None:
    table, oracle, _restore = crash_table
    before = local_warehouse.files()
    failures = [LeaseLost("commit acknowledged too late")]

    def after_create() -> None:
        if failures:
            raise failures.pop()

    runs = sweep(local_warehouse, drop_task_row(table), after_create=after_create)

    assert_all_ok(runs)
    # Both attempts of the parent created children; the duplicates found nothing left.
    parents = [r for r in runs if r.task.task_type() == TaskType.ENTITY_CLEANUP_SCHEDULER]
    assert len(parents) == 1
    assert before - local_warehouse.files() == oracle


# -- guard ---------------------------------------------------------------------------


@pytest.mark.slow
def test_batch_guard_refuses_outside_paths(s3_warehouse: Warehouse, moto_server: Any) -> None:
    wh = s3_warehouse
    table = wh.build("t")
    neighbour = wh.build("t_neighbour")
    neighbour_files = table_files(neighbour)
    victim = sorted(p for p in neighbour_files if p.endswith(".parquet"))[0]
    other_bucket = f"{wh.uri.split('/')[2]}-other"
    client = moto_server.client()
    client.create_bucket(Bucket=other_bucket)
    client.put_object(Bucket=other_bucket, Key="wh/ns/t/data/x.parquet", Body=b"x")
    own = table.metadata.metadata_log[0].metadata_file
    loc = table.location()
    sneaky = [
        f"s3://{other_bucket}/wh/ns/t/data/x.parquet",
        victim,
        loc + "/../t_neighbour/" + victim.split("/t_neighbour/", 1)[1],
        loc,
        loc + "_suffix/data/file.parquet",
    ]

    result, _ = run_one(wh, batch_row(table, [*sneaky, own]))

    assert [r.path for r in result.refused] == sneaky
    assert result.deleted == 1 and not wh.exists(own)
    assert not result.ok and "guard refused 5 path(s)" in (result.error_summary() or "")
    assert all(wh.exists(p) for p in neighbour_files)
    assert client.get_object(Bucket=other_bucket, Key="wh/ns/t/data/x.parquet")


def test_batch_guard_local_dotdot_and_other_scheme(local_warehouse: Warehouse) -> None:
    wh = local_warehouse
    table = wh.build("t")
    neighbour = wh.build("t_neighbour")
    neighbour_files = table_files(neighbour)
    victim = sorted(p for p in neighbour_files if p.endswith(".parquet"))[0]
    loc = table.location()
    paths = [
        loc + "/../t_neighbour/" + victim.split("/t_neighbour/", 1)[1],
        victim,
        "s3://bucket/wh/ns/t/data/x.parquet",
        "/etc/passwd",
    ]
    dry, _ = run_one(wh, batch_row(table, paths), dry_run=True)
    result, _ = run_one(wh, batch_row(table, paths))
    for r in (dry, result):
        assert [x.path for x in r.refused] == paths
        assert r.deleted == 0 and not r.would_delete
    assert all(wh.exists(p) for p in neighbour_files)


def test_manifest_naming_foreign_file_is_refused_and_kept(local_warehouse: Warehouse) -> None:
    """A table that imported a neighbour's file: the file stays, and so does its manifest."""
    wh = local_warehouse
    neighbour = wh.build("t_neighbour")
    neighbour_files = table_files(neighbour)
    foreign = sorted(p for p in neighbour_files if p.endswith(".parquet"))[0]
    table = wh.build("t")
    table.add_files([foreign])
    table = wh.catalog.load_table(table.name())
    importing = next(
        m.manifest_path
        for m in table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
        if any(e.data_file.file_path == foreign for e in m.fetch_manifest_entry(table.io, False))
    )

    runs = sweep(wh, drop_task_row(table))

    refused = [(r.task.name, x.path) for r in runs for x in r.result.refused]
    assert {p for _, p in refused} == {foreign}
    failed_runs = [r for r in runs if not r.result.ok]
    assert all(r.task.task_type() == TaskType.MANIFEST_FILE_CLEANUP for r in failed_runs)
    assert any("manifest kept" in n for r in failed_runs for n in r.result.notes)
    assert wh.exists(importing)
    assert all(wh.exists(p) for p in neighbour_files)


def test_table_metadata_outside_storage_location_is_refused(local_warehouse: Warehouse) -> None:
    wh = local_warehouse
    table = wh.build("t")
    neighbour = wh.build("t_neighbour")
    before = wh.files()
    task = drop_task_row(table, extra_internal_properties={"storageLocation": neighbour.location()})

    result, children = run_one(wh, task)

    assert [r.path for r in result.refused] == [table.metadata_location]
    assert not children and result.deleted == 0
    assert wh.files() == before


def test_table_plan_with_a_refused_path_schedules_nothing(local_warehouse: Warehouse) -> None:
    """A statistics file registered outside the location: the parent stops untouched."""
    wh = local_warehouse
    neighbour = wh.build("t_neighbour")
    victim = neighbour.metadata_location
    table = wh.build("t")
    snapshot_id = table.metadata.current_snapshot_id
    stats = StatisticsFile.model_validate(
        {
            "snapshot-id": snapshot_id,
            "statistics-path": victim,
            "file-size-in-bytes": 1,
            "file-footer-size-in-bytes": 1,
            "blob-metadata": [],
        }
    )
    with table.transaction() as tx:
        tx.update_statistics().set_statistics(stats).commit()
    table = wh.catalog.load_table(table.name())
    before = wh.files()

    result, children = run_one(wh, drop_task_row(table))
    dry, _ = run_one(wh, drop_task_row(table), dry_run=True)

    assert [r.path for r in result.refused] == [victim]
    assert not children and result.deleted == 0
    assert any("no child created, nothing deleted" in n for n in result.notes)
    assert wh.files() == before
    assert [r.path for r in dry.refused] == [victim] and victim not in dry.would_delete
    assert table.metadata_location in dry.would_delete


@pytest.mark.parametrize("recorded", [True, False])
def test_write_data_path_is_a_root_only_when_the_catalog_recorded_it(
    local_warehouse: Warehouse, recorded: bool
) -> None:
    """Data files under write.data.path: deleted when the task carries the property,
    refused and kept when only the metadata file says so (it could be crafted)."""
    wh = local_warehouse
    data_root = f"{wh.uri}/elsewhere/t_data"
    table = wh.build("t", appends=1, properties={"write.data.path": data_root})
    content = content_files(table)
    assert content and all(p.startswith(data_root + "/") for p in content)
    assert table.metadata.properties["write.data.path"] == data_root
    oracle = table_files(table)
    task = drop_task_row(table)
    if not recorded:
        internal = {k: v for k, v in task.internal_properties.items() if k != "write.data.path"}
        task = dataclasses.replace(task, internal_properties=internal)
    before = wh.files()

    runs = sweep(wh, task)

    if recorded:
        assert_all_ok(runs)
        assert before - wh.files() == oracle
        return
    refused = {r.path for run in runs for r in run.result.refused}
    assert refused == content
    assert all(wh.exists(p) for p in content)
    failing = [run for run in runs if not run.result.ok]
    assert failing and all(r.task.task_type() == TaskType.MANIFEST_FILE_CLEANUP for r in failing)
    # A manifest whose files were refused stays, so the refusal can be acted on.
    for run in failing:
        manifest = decode_manifest_cleanup(run.task.data()).manifest.manifest_path
        assert wh.exists(manifest)
    assert "outside" in (failing[0].result.error_summary() or "")


def test_without_storage_location_the_metadata_file_is_not_a_root(
    local_warehouse: Warehouse,
) -> None:
    """Without storageLocation (and no entity location) the task is refused: the
    metadata file's own location is never taken as the guard's root."""
    wh = local_warehouse
    table = wh.build("t")
    before = wh.files()
    task = drop_task_row(table)
    internal = {k: v for k, v in task.internal_properties.items() if k != "storageLocation"}
    entity = decode_dropped_entity(task.data())
    assert entity.properties.get("location")  # Polaris records it: take it away too
    unlocated = dataclasses.replace(entity, properties={})
    props = {**task.properties, "data": encode_dropped_entity(unlocated)}
    task = TaskRow(**{**task.__dict__, "internal_properties": internal, "properties": props})

    runs = sweep(wh, task)

    assert len(runs) == 1 and not runs[0].created
    assert [r.path for r in runs[0].result.refused] == [table.metadata_location]
    assert "recorded no table location" in (runs[0].result.error_summary() or "")
    assert wh.files() == before


# -- literal paths -------------------------------------------------------------------


@S3_IS_SLOW
def test_glob_characters_are_taken_literally(warehouse: Warehouse) -> None:
    wh = warehouse
    table = wh.build("t")
    odd = built_tables.add_data_file_named(table, "odd[1]*name.parquet")
    table = wh.catalog.load_table(table.name())
    # Files a glob expansion of the odd name would match; the table does not name them.
    bait = [odd.replace("odd[1]*name", n) for n in ("odd1name", "odd1-more-name")]
    for b in bait:
        with table.io.new_output(b).create(overwrite=True) as out:
            out.write(b"not iceberg")
    oracle = table_files(table) - set(bait)

    runs = sweep(wh, drop_task_row(table))

    assert_all_ok(runs)
    assert not wh.exists(odd)
    assert all(wh.exists(b) for b in bait)
    assert {p for p in wh.files() if "/ns/t/" in p} == set(bait)
    assert oracle.isdisjoint(wh.files())


# -- idempotency, failures, progress -------------------------------------------------


@S3_IS_SLOW
def test_rerunning_finished_tasks_deletes_nothing(warehouse: Warehouse) -> None:
    table = full_table(warehouse)
    runs = sweep(warehouse, drop_task_row(table))
    assert_all_ok(runs)
    after = warehouse.files()

    for run in runs:
        again, created = run_one(warehouse, run.task)
        assert again.ok and again.deleted == 0 and not created, run.task.name
        assert again.missing >= 1
    assert warehouse.files() == after
    parent_again, _ = run_one(warehouse, runs[0].task)
    assert "metadata file already gone: nothing to do" in parent_again.notes


def test_failed_delete_keeps_the_manifest_until_a_retry_succeeds(
    local_warehouse: Warehouse,
) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=1)
    _, children = run_one(wh, drop_task_row(table))
    manifest_task = built_tasks.task_row(
        next(c for c in children if c.properties["taskType"] == "2")
    )
    ref = decode_manifest_cleanup(manifest_task.data()).manifest
    entries = list(iter_manifest_entries(wh.resolver.input_file(ref.manifest_path)))
    blocked = entries[0].path
    path = Path(blocked[len("file://") :])
    path.unlink()
    path.mkdir()  # a directory is never deleted: the delete of this path fails

    result, _ = run_one(wh, manifest_task)

    assert blocked in result.failed and not result.ok
    assert wh.exists(ref.manifest_path)
    path.rmdir()
    retry, _ = run_one(wh, manifest_task)
    assert retry.ok and not wh.exists(ref.manifest_path)


def test_manifest_chunks_fence_and_report_progress(local_warehouse: Warehouse) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=4)
    _, children = run_one(wh, drop_task_row(table))
    # The largest manifest: the overwrite's, with ADDED and DELETED entries.
    best = max(
        (built_tasks.task_row(c) for c in children if c.properties["taskType"] == "2"),
        key=lambda t: len(
            list(
                iter_manifest_entries(
                    wh.resolver.input_file(decode_manifest_cleanup(t.data()).manifest.manifest_path)
                )
            )
        ),
    )
    ref = decode_manifest_cleanup(best.data()).manifest
    n = len({e.path for e in iter_manifest_entries(wh.resolver.input_file(ref.manifest_path))})
    assert n >= 2
    fence = CrashAt(0)
    progress: list[tuple[int, int, str]] = []

    result, _ = run_one(
        wh, best, fence=fence, progress=lambda *a: progress.append(a), delete_chunk_size=1
    )

    assert result.ok and result.deleted == n + 1
    assert fence.calls == n + 1  # one per chunk, one before the manifest itself
    assert [p[0] for p in progress] == list(range(1, n + 1))
    assert all(ref.manifest_path in p[2] for p in progress)
    assert result.bytes_freed is not None and result.bytes_freed > 0


def test_deleted_paths_sample_is_bounded(local_warehouse: Warehouse) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=25)
    files = sorted(p for p in table_files(table) if p.endswith(".metadata.json"))
    files.remove(table.metadata_location)
    sizes = sum(Path(p[len("file://") :]).stat().st_size for p in files)
    result, _ = run_one(wh, batch_row(table, files))
    assert result.deleted == len(files) > 20
    assert result.deleted_paths_sample == files[:20]
    assert result.bytes_freed == sizes


# -- views and payload errors --------------------------------------------------------


def test_view_cleanup_deletes_only_the_metadata_file(warehouse: Warehouse) -> None:
    wh = warehouse
    location = f"{wh.uri}/ns/v"
    io = wh.catalog._load_file_io(location=location)
    current = write_view_metadata(location, io)
    older = write_view_metadata(location, io)
    spec = built_tasks.DropSpec(("ns",), "v", current, location, is_view=True)
    task = built_tasks.task_row(built_tasks.drop_task(spec))

    result, children = run_one(wh, task)

    assert result.ok and result.deleted == 1 and not children
    assert not wh.exists(current) and wh.exists(older)
    again, _ = run_one(wh, task)
    assert again.deleted == 0 and again.missing == 1


def test_undecodable_payload_raises_payload_error_naming_the_task(
    local_warehouse: Warehouse,
) -> None:
    task = built_tasks.task_row(
        NewTask("POLARIS", 42, "entityCleanup_9", {"taskType": "1", "data": "{nope"}, {})
    )
    with pytest.raises(PayloadError) as info:
        run_one(local_warehouse, task)
    assert info.value.task == task.label


def test_unknown_task_type_raises_payload_error(local_warehouse: Warehouse) -> None:
    task = built_tasks.task_row(NewTask("POLARIS", 43, "x", {"taskType": "9", "data": "{}"}, {}))
    with pytest.raises(PayloadError, match="unknown taskType"):
        run_one(local_warehouse, task)


@pytest.mark.parametrize("format_version", [1, 2])
def test_streamed_entries_match_pyiceberg(local_warehouse: Warehouse, format_version: int) -> None:
    """Every entry of every manifest (all statuses, data and delete manifests) is seen."""
    table = local_warehouse.build(
        "t", format_version=format_version, with_deletes=format_version == 2, partitioned=True
    )
    contents: set[int] = set()
    for snapshot in table.metadata.snapshots:
        for mf in snapshot.manifests(table.io):
            expected = [
                (int(e.status), int(e.data_file.content), e.data_file.file_path)
                for e in mf.fetch_manifest_entry(table.io, discard_deleted=False)
            ]
            got = [
                (e.status, e.content, e.path)
                for e in iter_manifest_entries(
                    local_warehouse.resolver.input_file(mf.manifest_path)
                )
            ]
            assert got == expected
            contents.update(c for _, c, _ in got)
    assert contents == ({0, 1, 2} if format_version == 2 else {0})
