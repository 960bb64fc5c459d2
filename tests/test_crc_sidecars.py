"""Hadoop checksum sidecars (``.NAME.crc``) go with the local files we delete, and nothing else.

Tables Iceberg's Java library writes on local storage (through Hadoop's local
filesystem) have a sidecar beside every file; here they are written beside
pyiceberg's files by the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.table import Table

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.execution import dry_run
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.delete import bulk_delete, crc_sidecar
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask
from tests.support.iceberg import Warehouse, drop_task_row, table_files, write_sidecars
from tests.support.table_metadata import content_files


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def test_purge_deletes_every_sidecar_and_nothing_else(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    wh = local_warehouse
    table = wh.build("t", partitioned=True, with_deletes=True, with_statistics=True, appends=2)
    neighbour = wh.build("t_neighbour", appends=1)
    oracle, neighbour_files = table_files(table), table_files(neighbour)
    sidecars = write_sidecars(oracle)
    neighbour_sidecars = write_sidecars(neighbour_files)
    # Named like sidecars, but of no file we delete: one of nothing, one of a
    # neighbour's file name, one that is a sidecar's sidecar.
    data_dir = _local(table.location()) / "data"
    strays = {
        data_dir / ".x.crc",
        data_dir / ".other.parquet.crc",
        _local(next(iter(sidecars))).parent / f"..{_local(next(iter(sidecars))).name}.crc",
    }
    for stray in strays:
        stray.write_bytes(b"not ours")
    before = wh.files()

    store.insert_tasks([_polaris_drop_task(table)])
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert outcomes and all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert before - wh.files() == oracle | sidecars
    assert all(s.exists() for s in strays)
    assert all(wh.exists(p) for p in neighbour_files | neighbour_sidecars)
    assert sum(o.result.sidecars_deleted for o in outcomes if o.result) == len(sidecars)
    # File counts stay those of the table; sidecar bytes are in bytes freed.
    assert sum(o.result.deleted for o in outcomes if o.result) == len(oracle)


def test_sidecar_of_a_file_already_gone_is_finished(tmp_path: Path, store: Metastore) -> None:
    """A crash between the two unlinks leaves only the sidecar: the retry deletes it."""
    table_dir = tmp_path / "ns" / "t"
    table_dir.mkdir(parents=True)
    kept = table_dir / "kept.json"
    kept.write_text("x")
    (table_dir / ".kept.json.crc").write_text("c")
    gone = f"file://{table_dir}/gone.json"
    (table_dir / ".gone.json.crc").write_text("c")
    task = batch_task("r1", [gone, f"file://{kept}"], internal={"storageLocation": str(table_dir)})
    store.insert_tasks([task])

    with Runner(store) as runner:
        (outcome,) = sweep_tasks(runner, ["r1"])

    assert outcome.ok and outcome.result is not None
    assert sorted(p.name for p in table_dir.iterdir()) == []
    assert outcome.result.deleted == 1 and outcome.result.missing == 1
    assert outcome.result.sidecars_deleted == 2


def test_bulk_delete_takes_a_sidecar_only_when_the_check_admits_a_regular_file(
    tmp_path: Path,
) -> None:
    resolver = StorageResolver(StorageConfig())
    files = {name: tmp_path / name for name in ("a", "b", "c", "d")}
    for f in files.values():
        f.write_text("data")
    (tmp_path / ".a.crc").write_text("crc")  # admitted: goes
    (tmp_path / ".b.crc").write_text("crc")  # refused by the check: stays
    (tmp_path / ".c.crc").mkdir()  # a directory: never a sidecar
    (tmp_path / ".d.crc").symlink_to(tmp_path / ".a.crc")  # a link: not Hadoop's
    refused = str(tmp_path / ".b.crc")
    uris = [str(f) for f in files.values()]

    report = bulk_delete(resolver, uris, sidecar_check=lambda uri: uri != refused)

    assert report.ok and sorted(report.deleted) == sorted(uris)
    assert report.sidecars == [str(tmp_path / ".a.crc")]
    assert report.sidecar_bytes == 3 and report.bytes_freed == 4 * 4 + 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.crc", ".c.crc", ".d.crc"]

    # Without a check no sidecar is touched at all.
    lone = tmp_path / "e"
    lone.write_text("x")
    (tmp_path / ".e.crc").write_text("crc")
    assert bulk_delete(resolver, [str(lone)]).sidecars == []
    assert (tmp_path / ".e.crc").exists()


def test_a_file_that_failed_to_delete_keeps_its_sidecar(tmp_path: Path) -> None:
    resolver = StorageResolver(StorageConfig())
    (tmp_path / "dir").mkdir()  # deleting a directory fails
    (tmp_path / ".dir.crc").write_text("crc")
    report = bulk_delete(resolver, [str(tmp_path / "dir")], sidecar_check=lambda _: True)
    assert str(tmp_path / "dir") in report.failed
    assert (tmp_path / ".dir.crc").exists() and not report.sidecars


@pytest.mark.parametrize(
    ("uri", "sidecar"),
    [
        ("file:///wh/ns/t/data/f.parquet", "file:///wh/ns/t/data/.f.parquet.crc"),
        ("file:/wh/ns/t/data/f.parquet", "file:/wh/ns/t/data/.f.parquet.crc"),
        ("/wh/ns/t/metadata/v1.metadata.json", "/wh/ns/t/metadata/.v1.metadata.json.crc"),
        ("file:///wh/ns/t/data/.f.parquet.crc", None),  # a checksum file has none
        ("file:///wh/ns/t/data/", None),
        ("s3://bucket/wh/ns/t/data/f.parquet", None),
        ("gs://bucket/wh/f.parquet", None),
    ],
)
def test_crc_sidecar_names(uri: str, sidecar: str | None) -> None:
    assert crc_sidecar(uri) == sidecar


@pytest.mark.slow
def test_s3_objects_named_like_sidecars_are_left(s3_warehouse: Warehouse, store: Metastore) -> None:
    """Only file: locations have sidecars; on S3 such a key is just another object."""
    wh = s3_warehouse
    table = wh.build("t", appends=1)
    data_file = sorted(content_files(table))[0]
    lookalike = crc_sidecar("file:///" + data_file.split("://", 1)[1])
    assert lookalike is not None
    key = data_file.rsplit("/", 1)[0] + "/" + lookalike.rsplit("/", 1)[1]
    fs, path = wh.resolver.filesystem(key)
    fs.pipe_file(path, b"crc")
    oracle = table_files(table) - {key}
    store.insert_tasks([_polaris_drop_task(table)])

    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert not any(wh.exists(p) for p in oracle)
    assert wh.exists(key)


def test_dry_run_lists_the_sidecars_it_would_delete(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    wh = local_warehouse
    table = wh.build("t", partitioned=True, with_deletes=True, with_statistics=True, appends=1)
    oracle = table_files(table)
    sidecars = write_sidecars(oracle)
    (_local(table.location()) / "data" / ".x.crc").write_bytes(b"not ours")
    before = wh.files()

    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        plan = dry_run.plan(runner, built_tasks.task_row(_polaris_drop_task(table)))

    assert plan.ok, plan.error_summary()
    assert set(plan.would_delete) == oracle | sidecars
    assert wh.files() == before


def _polaris_drop_task(table: Table) -> NewTask:
    """The drop task Polaris writes for ``table``, ready to insert."""
    task = drop_task_row(table)
    return NewTask(task.realm_id, task.id, task.name, task.properties, task.internal_properties)
