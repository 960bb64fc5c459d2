"""Polaris 1.4.1's own purge as the oracle for ours (issue 48).

Per table shape, on the same files (restored from a copy between runs), and the same task
row our builders write for the dropped table (as Polaris writes it):

- (A) Polaris plans and runs its own purge: the release's TableCleanupTaskHandler, then its
  MANIFEST and BATCH handlers on the children it created (tests/polaris/oracle);
- (B) we plan and run ours: our Runner executes the task, its children and its last stage;
- (C) Polaris's handlers run the children our Runner wrote, as it wrote them.

C deletes exactly what A deletes; B deletes all of it, plus only the extras named here with
their reason; B deletes nothing outside the table (a live neighbour ``t_2`` beside it); the
rows each leaves behind are listed on docs/polaris-compatibility.md. 1.4.1 only: at 1.0, 1.6
and 1.7 the handlers live in polaris-runtime-service, which Maven Central does not serve.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRunStatus
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import StaticTable, Table
from sqlalchemy import create_engine, text

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.daemon import DaemonHarness
from builders.postgres import database_url, throwaway_database
from polaris_pipeline.execution.runner import Runner, child_stages
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    TableIdentifier,
    encode_batch_cleanup,
)
from polaris_pipeline.tasks.release import RELEASE_ENV
from tests.support.iceberg import Warehouse, view_metadata
from tests.support.java import WrittenTable, write_iceberg_tables
from tests.support.polaris_classes import InstallError, PolarisHarness, install
from tests.support.polaris_writer import polaris_children
from tests.support.table_metadata import referenced_files
from tests.support.tasks import dropped_entity_json, manifest_task_data

pytestmark = pytest.mark.slow

RELEASE = "1.4.1"
SCHEMA = 4
POLARIS_A, OURS, POLARIS_C = "A", "B", "C"  # a realm per run, so rows never mix
# Table shapes we purge; builders.tables.build_table's keywords.
SHAPES: dict[str, dict[str, Any]] = {
    "v1": {"format_version": 1},
    "v2 with position and equality deletes and statistics files": {
        "partitioned": True,
        "with_deletes": True,
        "with_statistics": True,
    },
    # Old metadata files stay on disk but fall out of the log (Iceberg's default keeps them).
    "v2 with a metadata log capped at 2 (write.metadata.previous-versions-max)": {
        "properties": {"write.metadata.previous-versions-max": "2"},
    },
    # Expiring removes snapshots from the metadata, not their files (pyiceberg deletes none).
    "v2 with its two oldest snapshots expired": {"expire_oldest": 2},
    # Written by Iceberg's Java library in Spark (tests/java/spark/IcebergTableWriter.java):
    # merge-on-read deletes, Puffin and partition statistics, Hadoop's .crc sidecars.
    "Iceberg Java v2 (Spark, position deletes)": {"java_format": 2},
    "Iceberg Java v3 (Spark, deletion vectors)": {"java_format": 3},
}
# What we delete beyond Polaris 1.4.1, and why (the page lists it).
UNNAMED_REASON = (
    "files the current metadata does not name (metadata files out of the log, files only "
    "expired snapshots named): Polaris 1.4.1 deletes what the current metadata names; we "
    "delete the older metadata files still on disk too, and our last stage every file left "
    "under the table's location"
)
DELETE_FILES_REASON = (
    "a delete manifest and its delete files: 1.4.1's MANIFEST handler reads a manifest with "
    "ManifestFiles.read, which throws on a delete manifest ('Cannot read a delete manifest "
    "with a ManifestReader'), so Polaris leaves them and the row; we delete them"
)


@dataclass
class Purges:
    shape: str
    table_files: set[str]  # every file under the table's location before any run
    outside: set[str]  # every other file of the warehouse (the live neighbour)
    delete_files: set[str]  # delete manifests and the delete files they name
    unnamed: set[str]  # the table's files its current metadata does not name
    # tests/support/polaris_writer.py's imitation of the children Polaris creates
    imitation: list[tuple[str, TaskType, str]] = field(default_factory=list)
    deleted: dict[str, set[str]] = field(default_factory=dict)  # run -> files gone
    left: dict[str, list[str]] = field(default_factory=dict)  # run -> rows left, described
    polaris: dict[str, dict[str, Any]] = field(default_factory=dict)  # A, C: the oracle's answer


def _files(root: Path) -> set[str]:
    return {str(Path(d) / f) for d, _, names in os.walk(root) for f in names}


def _local(uri: str) -> str:
    return uri.removeprefix("file://") if uri.startswith("file:///") else uri.removeprefix("file:")


def _delete_files(table: Table) -> set[str]:
    """The table's delete manifests and every file their entries name (any status)."""
    out = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.content == ManifestContent.DELETES:
                out.add(_local(manifest.manifest_path))
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    out.add(_local(entry.data_file.file_path))
    return out


def _unnamed(table: Table, files: set[str]) -> set[str]:
    """``files`` the current metadata does not name: not it, not its log, nor what its
    snapshots and statistics name (every manifest entry, any status)."""
    metadata = table.metadata
    named = {table.metadata_location, *(e.metadata_file for e in metadata.metadata_log)}
    named |= {s.statistics_path for s in metadata.statistics}
    named |= {s.statistics_path for s in metadata.partition_statistics}
    for snapshot in metadata.snapshots:
        named.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            named.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                named.add(entry.data_file.file_path)
    return files - {_local(f) for f in named}


def _polaris_rows(answer: dict[str, Any]) -> list[str]:
    return [f"{row['name'].split('_')[0]} type {row['taskType']}" for row in answer["left"]]


def _copy_rows(url: str, source: str, target: str, ids: list[int]) -> None:
    """Our children's rows, as our Runner wrote them, into another realm (for run C)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            columns = [
                r[0]
                for r in conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_schema = 'polaris_schema' AND table_name = 'entities'"
                        " AND column_name <> 'realm_id' ORDER BY ordinal_position"
                    )
                )
            ]
            names = ", ".join(columns)
            conn.execute(
                text(
                    f"INSERT INTO polaris_schema.entities (realm_id, {names})"
                    f" SELECT :target, {names} FROM polaris_schema.entities"
                    " WHERE realm_id = :source AND id = ANY(:ids)"
                ),
                {"target": target, "source": source, "ids": ids},
            )
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def harness() -> PolarisHarness:
    try:
        directory = install(RELEASE)
    except InstallError as exc:
        pytest.fail(str(exc), pytrace=False)
    found = PolarisHarness(RELEASE, directory)
    assert found.runtime_service, f"Polaris {RELEASE}'s polaris-runtime-service is not installed"
    return found


SHAPE_IDS = dict(
    zip(
        SHAPES,
        ("v1", "v2-deletes-stats", "v2-capped-log", "v2-expired", "java-v2", "java-v3"),
        strict=True,
    )
)
# The Hadoop catalog's pointer to the current metadata file: no metadata file names it,
# and a table held by Polaris has none (as tests/test_java_spark_purge.py removes it).
VERSION_HINT = "version-hint.text"


@pytest.fixture(scope="module")
def spark_tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, WrittenTable]]:
    """One Spark run for the module (its JVM takes most of a minute): tables ``db.t2`` (v2)
    and ``db.t3`` (v3) and the live neighbour ``db.t2_live``, under one warehouse that each
    Java shape's purges restore when they end."""
    root = tmp_path_factory.mktemp("polaris-oracle-spark") / "wh"
    written = write_iceberg_tables(root, [("t2", 2), ("t3", 3), ("t2_live", 2)])
    for table in written.values():
        metadata = Path(_local(table.location)) / "metadata"
        (metadata / VERSION_HINT).unlink()
        (metadata / f".{VERSION_HINT}.crc").unlink()
    return root, written


def _java_table(written: WrittenTable) -> tuple[Table, built_tasks.DropSpec]:
    spec = built_tasks.DropSpec(("db",), written.name, written.metadata_location, written.location)
    return StaticTable.from_metadata(written.metadata_location), spec


@pytest.fixture(scope="module", params=SHAPES, ids=SHAPE_IDS.get)
def purges(
    request: pytest.FixtureRequest,
    harness: PolarisHarness,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Purges]:
    shape = str(request.param)
    tmp = tmp_path_factory.mktemp("polaris-oracle")
    root = tmp / "wh"
    uri = built_tables.local_warehouse_uri(root)
    catalog = built_tables.open_catalog(uri, tmp / "catalog.db", name="local")
    config = StorageConfig()
    warehouse = Warehouse("local", uri, catalog, config, StorageResolver(config))
    options = dict(SHAPES[shape])
    expire = int(options.pop("expire_oldest", 0))
    java_format = options.pop("java_format", None)
    if java_format is not None:
        root, written = request.getfixturevalue("spark_tables")
        table, spec = _java_table(written[f"t{java_format}"])
    else:
        table = warehouse.build("t", **options)
        if expire:
            oldest = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
            by_id = [s.snapshot_id for s in oldest[:expire]]
            table.maintenance.expire_snapshots().by_ids(by_id).commit()
            table = catalog.load_table(("ns", "t"))
        spec = built_tasks.DropSpec.of_table(table)
        warehouse.build("t_2")  # a live neighbour whose location shares the table's as a prefix
    location = Path(_local(table.metadata.location))
    every = _files(root)
    table_files = {f for f in every if f.startswith(f"{location}/")}
    out = Purges(
        shape,
        table_files,
        every - table_files,
        _delete_files(table),
        _unnamed(table, table_files),
    )
    original = tmp / "original"
    shutil.copytree(root, original)

    def restore() -> None:
        shutil.rmtree(root)
        shutil.copytree(original, root)

    with throwaway_database("pp_polaris_oracle") as name:
        url = database_url(name)
        policy = TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, polaris_version=RELEASE)
        store = Metastore(url, policy=policy)
        try:
            store.init_schema(SCHEMA)
            parent = built_tasks.drop_task(spec)
            store.insert_tasks([dataclasses.replace(parent, realm_id=r) for r in (POLARIS_A, OURS)])
            out.imitation = polaris_children(table, parent.name)

            out.polaris[POLARIS_A] = harness.purge(url, POLARIS_A)
            out.deleted[POLARIS_A] = every - _files(root)
            out.left[POLARIS_A] = _polaris_rows(out.polaris[POLARIS_A])
            restore()

            with Runner(store, config, resolver=warehouse.resolver) as runner:
                (lease,) = runner.lease(1, [OURS])
                root_outcome = runner.execute(lease)
                _copy_rows(url, OURS, POLARIS_C, [c.task_id for c in root_outcome.children])
                rest = [
                    outcome
                    for _, stage in child_stages(root_outcome)
                    for child in stage
                    for outcome in runner.execute_tree(child)
                ]
                if root_outcome.finish is not None:
                    runner.finish_table(
                        root_outcome.finish,
                        children_done=all(o.ok for o in rest),
                        result=root_outcome.result,
                    )
            out.deleted[OURS] = every - _files(root)
            out.left[OURS] = [
                f"{task.name.split('_')[0]} type {task.properties.get('taskType')}"
                for task in store.list_tasks([OURS])
            ]
            restore()

            out.polaris[POLARIS_C] = harness.purge(url, POLARIS_C)
            out.deleted[POLARIS_C] = every - _files(root)
            out.left[POLARIS_C] = _polaris_rows(out.polaris[POLARIS_C])
            restore()  # the Java shapes share their warehouse
            yield out
        finally:
            store.dispose()


@pytest.fixture
def _report(request: pytest.FixtureRequest, purges: Purges) -> None:
    """The page's facts: per shape, the files each run deleted and the rows it left."""
    props = request.node.user_properties
    props.append(("polaris_release", RELEASE))
    counts = " / ".join(
        str(len(purges.deleted.get(run, ()))) for run in (POLARIS_A, OURS, POLARIS_C)
    )
    props.append(
        (
            f"polaris_fact:oracle, {purges.shape}: files deleted by A Polaris / B ours / "
            f"C Polaris on our children (of {len(purges.table_files)})",
            counts,
        )
    )
    for run in (POLARIS_A, OURS, POLARIS_C):
        rows = purges.left.get(run, [])
        props.append(
            (
                f"polaris_fact:oracle, {purges.shape}: rows {run} leaves",
                "; ".join(rows) if rows else "none",
            )
        )


@pytest.mark.usefixtures("_report")
def test_polaris_on_our_children_deletes_exactly_what_polaris_deletes(purges: Purges) -> None:
    """(C) Polaris's handlers running the children our code wrote delete exactly the files
    (A) Polaris's own purge deletes, and leave the same kinds of rows; beyond them only
    files the current metadata does not name (older metadata files our children name)."""
    on_ours, polaris = purges.deleted[POLARIS_C], purges.deleted[POLARIS_A]
    assert polaris <= on_ours, sorted(polaris - on_ours)
    assert on_ours - polaris <= purges.unnamed, sorted(on_ours - polaris - purges.unnamed)
    assert sorted(purges.left[POLARIS_C]) == sorted(purges.left[POLARIS_A])


@pytest.mark.usefixtures("_report")
def test_we_delete_what_polaris_deletes_and_only_the_named_extras(
    purges: Purges, request: pytest.FixtureRequest
) -> None:
    """(B) our purge deletes every file (A) Polaris's deletes; beyond it only the delete
    manifests and delete files 1.4.1's MANIFEST handler cannot read and the files the
    current metadata does not name; and it leaves no row."""
    ours, polaris = purges.deleted[OURS], purges.deleted[POLARIS_A]
    assert polaris <= ours, sorted(polaris - ours)
    extras = ours - polaris
    named = purges.delete_files | purges.unnamed
    assert extras <= named, sorted(extras - named)
    for kind, reason in (
        (purges.delete_files, DELETE_FILES_REASON),
        (purges.unnamed, UNNAMED_REASON),
    ):
        if extras & kind:
            request.node.user_properties.append(
                (
                    f"polaris_difference:oracle, {purges.shape}: we delete "
                    f"{len(extras & kind)} more files than Polaris 1.4.1",
                    reason,
                )
            )
    assert purges.left[OURS] == []


@pytest.mark.usefixtures("_report")
def test_we_delete_nothing_outside_the_table(purges: Purges) -> None:
    """(B) deletes only files under the dropped table's location: the live neighbour
    ``t_2`` (whose location has the table's as a prefix) keeps every file."""
    assert purges.deleted[OURS] <= purges.table_files
    assert purges.outside and not purges.deleted[OURS] & purges.outside


@pytest.mark.usefixtures("_report")
def test_polaris_purge_runs_and_deletes_the_table(purges: Purges) -> None:
    """(A) is a real purge, not an empty one: Polaris deletes files of the table, inside its
    location only, and created MANIFEST and BATCH children (its order: the table's metadata
    log first, then manifest lists, then statistics files)."""
    answer = purges.polaris[POLARIS_A]
    assert purges.deleted[POLARIS_A] and purges.deleted[POLARIS_A] <= purges.table_files
    kinds = [row["taskType"] for row in answer["created"]]
    assert "2" in kinds and "3" in kinds, answer["created"]


@pytest.mark.usefixtures("_report")
def test_our_imitation_writes_the_children_polaris_writes(purges: Purges) -> None:
    """tests/support/polaris_writer.polaris_children (the soak's dying Polaris) writes the
    children Polaris 1.4.1's own TableCleanupTaskHandler creates: one MANIFEST child per
    manifest (Polaris's order among them is a hash map's), and the same BATCH children in
    the same order with the same files, the current metadata file in none."""
    created = purges.polaris[POLARIS_A]["created"]

    def without_suffix(name: str) -> str:  # the random UUID ending a child's name
        return name.rsplit("_", 1)[0]

    manifest, batch = TaskType.MANIFEST_FILE_CLEANUP, TaskType.BATCH_FILE_CLEANUP
    assert sorted(
        without_suffix(c["name"]) for c in created if c["taskType"] == str(manifest.code)
    ) == sorted(without_suffix(name) for name, kind, _ in purges.imitation if kind is manifest)
    polaris_batches = [
        json.loads(c["data"])["batchFiles"] for c in created if c["taskType"] == str(batch.code)
    ]
    ours = [json.loads(data)["batchFiles"] for _, kind, data in purges.imitation if kind is batch]
    assert ours == polaris_batches


# A view at 1.4.1: its row names view metadata, which the table handler reads as a table's.
VIEW_SHAPE = "a dropped view (Iceberg view metadata, two versions on disk)"
VIEW_REALMS = {POLARIS_A: "VA", OURS: "VB"}
# The field TableMetadataParser requires first that view metadata does not have.
VIEW_PARSE_ERROR = "Cannot parse missing int: last-column-id"
VIEW_REASON = (
    "1.4.1's TableCleanupTaskHandler takes a view's row (the entity is TABLE_LIKE) and reads "
    f"its metadata file as table metadata, which throws ('{VIEW_PARSE_ERROR}') on each of "
    "the executor's 3 attempts: Polaris deletes nothing and leaves the row; we delete the "
    "view's current metadata file (its older versions' files stay: no metadata names them)"
)


def _write_view(location: Path, versions: int) -> list[str]:
    """``versions`` view metadata files under ``location``; the last is the current one."""
    paths = []
    for _ in range(versions):
        uri, body = view_metadata(f"file://{location}", name=location.name)
        local = Path(_local(uri))
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(body)
        paths.append(str(local))
    return paths


def test_a_dropped_view_polaris_keeps_its_row_and_we_delete_its_metadata_file(
    harness: PolarisHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A dropped view's row: (A) Polaris 1.4.1's own handlers take it as a table's and fail
    reading the view metadata on every attempt, so they delete nothing, create no child and
    leave the row; (B) we delete the view's current metadata file alone (nothing of the live
    neighbour view ``v_2``) and leave no row; (C) there is nothing to run: we create no
    child for a view."""
    props = request.node.user_properties
    props.append(("polaris_release", RELEASE))
    root = tmp_path / "wh"
    older, current = _write_view(root / "ns" / "v", 2)
    _write_view(root / "ns" / "v_2", 1)  # live, its location has the view's as a prefix
    every = _files(root)
    original = tmp_path / "original"
    shutil.copytree(root, original)
    spec = built_tasks.DropSpec(
        ("ns",), "v", f"file://{current}", f"file://{root}/ns/v", is_view=True
    )
    parent = built_tasks.drop_task(spec)
    deleted: dict[str, set[str]] = {}
    left: dict[str, list[str]] = {}
    with throwaway_database("pp_polaris_oracle_view") as name:
        url = database_url(name)
        store = Metastore(url, policy=TaskPolicy(grace_ms=0, polaris_version=RELEASE))
        try:
            store.init_schema(SCHEMA)
            store.insert_tasks(
                [dataclasses.replace(parent, realm_id=realm) for realm in VIEW_REALMS.values()]
            )
            answer = harness.purge(url, VIEW_REALMS[POLARIS_A])
            deleted[POLARIS_A] = every - _files(root)
            left[POLARIS_A] = _polaris_rows(answer)
            shutil.rmtree(root)
            shutil.copytree(original, root)
            with Runner(store, StorageConfig()) as runner:
                outcomes = runner.sweep([VIEW_REALMS[OURS]])
            deleted[OURS] = every - _files(root)
            left[OURS] = [
                f"{task.name.split('_')[0]} type {task.properties.get('taskType')}"
                for task in store.list_tasks([VIEW_REALMS[OURS]])
            ]
        finally:
            store.dispose()
    props.append(
        (
            f"polaris_fact:oracle, {VIEW_SHAPE}: files deleted by A Polaris / B ours / "
            f"C Polaris on our children (of {len(_files(original / 'ns' / 'v'))})",
            f"{len(deleted[POLARIS_A])} / {len(deleted[OURS])} / 0 (we create no children)",
        )
    )
    for run in (POLARIS_A, OURS):
        props.append(
            (
                f"polaris_fact:oracle, {VIEW_SHAPE}: rows {run} leaves",
                "; ".join(left[run]) or "none",
            )
        )
    props.append((f"polaris_fact:oracle, {VIEW_SHAPE}: rows C leaves", "none (nothing to run)"))
    (run,) = answer["runs"]
    assert run["attempts"] == [f"threw java.lang.IllegalArgumentException: {VIEW_PARSE_ERROR}"] * 3
    assert not deleted[POLARIS_A] and answer["created"] == []
    assert left[POLARIS_A] == ["entityCleanup type 1"]
    assert [o.ok for o in outcomes] == [True]
    assert deleted[OURS] == {current}, sorted(deleted[OURS])
    assert Path(older).exists() and left[OURS] == []
    props.append(
        (
            f"polaris_difference:oracle, {VIEW_SHAPE}: we delete 1 more file than Polaris 1.4.1",
            VIEW_REASON,
        )
    )


# Polaris's purge failing part-way: its storage refuses every delete, or its run stops
# after a few deletes (a crash). The oracle's argument for each.
FAULTS = {
    "storage refuses every delete": "refuse-deletes",
    "stopped after 5 deletes": "stop-after=5",
}
FAULT_REALM = "F"


@dataclass
class PolarisFailed:
    """A table Polaris 1.4.1's purge failed on, its rows left as Polaris left them."""

    url: str
    store: Metastore
    root: Path
    named: set[str]  # every file the table's metadata names
    neighbour: set[str]  # every file of the live neighbour ``t_2``

    def assert_finished(self) -> None:
        """Every file the metadata names is gone, the neighbour keeps every file, no row."""
        assert self.store.list_tasks([FAULT_REALM]) == []
        remaining = _files(self.root)
        assert not self.named & remaining, sorted(self.named & remaining)
        assert self.neighbour <= remaining


@contextmanager
def _polaris_failed(
    harness: PolarisHarness, tmp_path: Path, fault: str, request: pytest.FixtureRequest
) -> Iterator[PolarisFailed]:
    """Polaris 1.4.1's handlers fail part-way on a table with deletes and statistics (live
    neighbour ``t_2`` beside it); the rows they leave (those they created, and the parent
    unless its own run succeeded) are written to the metastore as Polaris wrote them."""
    request.node.user_properties.append(("polaris_release", RELEASE))
    root = tmp_path / "wh"
    uri = built_tables.local_warehouse_uri(root)
    catalog = built_tables.open_catalog(uri, tmp_path / "catalog.db", name="local")
    config = StorageConfig()
    warehouse = Warehouse("local", uri, catalog, config, StorageResolver(config))
    table = warehouse.build(
        "t", **SHAPES["v2 with position and equality deletes and statistics files"]
    )
    named = {_local(f) for f in referenced_files(table)}
    warehouse.build("t_2")
    location = Path(_local(table.metadata.location))
    neighbour = {f for f in _files(root) if not f.startswith(f"{location}/")}
    with throwaway_database("pp_polaris_oracle_faults") as name:
        url = database_url(name)
        store = Metastore(url, policy=TaskPolicy(polaris_version=RELEASE))
        try:
            store.init_schema(SCHEMA)
            parent = dataclasses.replace(built_tasks.drop_table_task(table), realm_id=FAULT_REALM)
            store.insert_tasks([parent])
            answer = harness.purge(url, FAULT_REALM, FAULTS[fault])
            left = {row["id"]: row for row in answer["left"]}
            assert left, answer["runs"]  # the fault made Polaris leave work behind
            kinds = sorted(f"type {row['taskType']}" for row in left.values())
            request.node.user_properties.append(
                (
                    f"polaris_fact:oracle, Polaris failing ({fault}): rows it leaves",
                    f"{len(left)} ({', '.join(sorted(set(kinds)))}); parent "
                    + ("left" if parent.id in left else "done"),
                )
            )
            # The metastore as Polaris would have left it: children it created (with the
            # parent's internal properties, as its TableCleanupTaskHandler copies them),
            # the parent gone when its own run succeeded.
            store.insert_tasks(
                [
                    NewTask(
                        FAULT_REALM,
                        row["id"],
                        row["name"],
                        {"taskType": row["taskType"], "data": row["data"]},
                        dict(parent.internal_properties),
                    )
                    for task_id, row in left.items()
                    if task_id != parent.id
                ]
            )
            if parent.id not in left:
                engine = create_engine(url)
                with engine.begin() as conn:
                    conn.execute(
                        text(
                            "DELETE FROM polaris_schema.entities"
                            " WHERE realm_id = :realm AND id = :id"
                        ),
                        {"realm": FAULT_REALM, "id": parent.id},
                    )
                engine.dispose()
            yield PolarisFailed(url, store, root, named, neighbour)
        finally:
            store.dispose()


@pytest.mark.parametrize("fault", FAULTS)
def test_polaris_fails_and_our_sweeper_finishes(
    fault: str,
    harness: PolarisHarness,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    repo_bin: Path,
) -> None:
    """Polaris 1.4.1's handlers fail part-way and leave rows (those it created, and the
    parent unless its own run succeeded), written to the metastore as Polaris wrote them;
    then our CLI sweep runs: every file the table's metadata names is gone, the live
    neighbour keeps every file, and no row is left."""
    with _polaris_failed(harness, tmp_path, fault, request) as failed:
        done = subprocess.run(
            [
                str(repo_bin / "polaris-pipeline"),
                "sweep",
                "--metastore",
                failed.url,
                "--realm",
                FAULT_REALM,
                "--grace-ms",
                "0",
                "--polaris-version",
                RELEASE,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        failed.assert_finished()


def test_polaris_fails_and_our_daemon_finishes(
    harness: PolarisHarness,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    start_daemon: Callable[..., DaemonHarness],
) -> None:
    """Polaris 1.4.1's handlers stop after 5 deletes and leave their rows as Polaris wrote
    them; then our sensor and its runs, through a real ``dagster-daemon``, finish the
    purge: every file the table's metadata names is gone, the live neighbour keeps every
    file, no row is left, and every run succeeded."""
    with _polaris_failed(harness, tmp_path, "stopped after 5 deletes", request) as failed:
        daemon = start_daemon(
            metastore_url=failed.url,
            extra_env={RELEASE_ENV: RELEASE},
        )
        daemon.wait_for(
            lambda: failed.store.count_tasks([FAULT_REALM]) == 0,
            timeout_s=300,
            what="the daemon's runs to finish every row Polaris left",
        )
        runs = daemon.wait_runs_finished(timeout_s=120)
        assert {r.status for r in runs} == {DagsterRunStatus.SUCCESS}, daemon.diagnose()
        failed.assert_finished()


@pytest.fixture
def repo_bin() -> Path:
    """The venv's scripts: the CLI beside the interpreter running the tests."""
    return Path(sys.executable).parent


# The same BATCH rows to Polaris's own executor and to the reliability worker's model of it.
EXECUTOR_ROWS = {  # kind -> (files, of which missing); None: data that is not JSON
    "some files missing": (3, 1),
    "every file missing": (2, 2),
    "every file present": (2, 0),
    "data that is not JSON": None,
}
EXECUTOR_FAULTS = {"no fault": None, "storage refuses every delete": "refuse-deletes"}


def _executor_rows(realm: str, directory: Path) -> list[NewTask]:
    """EXECUTOR_ROWS in ``realm``, their files under ``directory``, as 1.4.1 writes BATCH
    rows (no ``type``); each named by its kind's index."""
    rows = []
    for i, shape in enumerate(EXECUTOR_ROWS.values()):
        data = "{oops"
        if shape is not None:
            files = []
            for k in range(shape[0]):
                path = directory / f"r{i}" / f"f{k}.avro"
                path.parent.mkdir(parents=True, exist_ok=True)
                if k >= shape[1]:
                    path.write_bytes(b"x")
                files.append(f"file://{path}")
            payload = BatchCleanupPayload(TableIdentifier(("ns",), "t"), tuple(files))
            data = encode_batch_cleanup(payload, with_type=False)
        props = {Prop.TASK_TYPE: TaskType.BATCH_FILE_CLEANUP.code, Prop.DATA: data}
        internal = {"storageLocation": f"file://{directory}"}
        rows.append(NewTask(realm, new_entity_id(), f"batch_{i}", props, internal))
    return rows


@pytest.mark.parametrize("fault", EXECUTOR_FAULTS)
def test_the_workers_polaris_executor_leaves_what_polaris_leaves(
    fault: str, harness: PolarisHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The reliability worker's Polaris-style executor (tests/reliability/polaris_executor.py)
    and Polaris 1.4.1's own executor and BATCH handler, on the same rows (files missing,
    present, all missing, undecodable data), with and without storage that refuses every
    delete: the same rows left, the same files deleted, the same number of delete calls
    (the existence check, 3 tries per delete)."""
    from tests.reliability import journal as jr
    from tests.reliability.worker import run_polaris

    request.node.user_properties.append(("polaris_release", RELEASE))
    realms = {"polaris": "EP", "worker": "EW"}
    dirs = {who: tmp_path / who for who in realms}
    with throwaway_database("pp_polaris_oracle_executor") as name:
        url = database_url(name)
        store = Metastore(url, policy=TaskPolicy(polaris_version=RELEASE))
        try:
            store.init_schema(SCHEMA)
            for who, realm in realms.items():
                store.insert_tasks(_executor_rows(realm, dirs[who]))
            before = {who: _files(d) for who, d in dirs.items()}
            answer = harness.purge(url, realms["polaris"], EXECUTOR_FAULTS[fault])
            journal_path = tmp_path / "worker.jsonl"
            journal = jr.Journal(journal_path)
            cfg = {
                "url": url,
                "realms": [realms["worker"]],
                "refuse_deletes": EXECUTOR_FAULTS[fault] is not None,
                "idle_rounds": 1,
                "idle_s": 0,
            }
            assert run_polaris(cfg, journal) == 0
            journal.close()
            worker_left = sorted(t.name for t in store.list_tasks([realms["worker"]]))
        finally:
            store.dispose()
    polaris_left = sorted(row["name"] for row in answer["left"])
    kinds = {f"batch_{i}": kind for i, kind in enumerate(EXECUTOR_ROWS)}
    request.node.user_properties.append(
        (
            f"polaris_fact:oracle, Polaris's executor on BATCH rows ({fault}): rows it leaves",
            ", ".join(kinds[n] for n in polaris_left) or "none",
        )
    )
    gone = {
        who: {str(Path(f).relative_to(dirs[who])) for f in before[who] - _files(dirs[who])}
        for who in realms
    }
    worker_calls = sum(1 for e in jr.load([journal_path]) if e["ev"] == "begin")
    assert worker_left == polaris_left
    assert gone["worker"] == gone["polaris"]
    assert worker_calls == answer["deleteCalls"]


HOSTILE_REALMS = {"polaris": "HP", "ours": "HO"}


def _stable(error: str) -> str:
    """An outcome's error without what changes from run to run (task ids, paths)."""
    error = re.sub(r"task \S+ '[^']*': ", "", error)
    return error.split(", first ")[0][:160]


def _hostile_rows(realm: str, warehouse: Path, outside: Path) -> dict[str, NewTask]:
    """One row of each hostile kind (issue 48), as a Polaris metastore could hold them."""
    location = warehouse / "ns" / "h"
    internal = {"storageLocation": f"file://{location}"}
    namespace = json.loads(dropped_entity_json(typeCode=6, name="dropped_ns"))
    table_id = TableIdentifier(("ns",), "h")
    props = {
        "a BATCH path outside the table": {
            Prop.TASK_TYPE: TaskType.BATCH_FILE_CLEANUP.code,
            Prop.DATA: encode_batch_cleanup(
                BatchCleanupPayload(table_id, (f"file://{outside}",)), with_type=False
            ),
        },
        "an unknown task type": {Prop.TASK_TYPE: "9", Prop.DATA: "{}"},
        "data that is not JSON": {Prop.TASK_TYPE: "1", Prop.DATA: "{oops"},
        "manifest bytes that are not base64": {
            Prop.TASK_TYPE: "2",
            Prop.DATA: manifest_task_data("!!!not-base64"),
        },
        "a dropped namespace": {
            Prop.TASK_TYPE: TaskType.ENTITY_CLEANUP_SCHEDULER.code,
            Prop.DATA: json.dumps(namespace, separators=(",", ":")),
        },
    }
    return {
        kind: NewTask(realm, new_entity_id(), f"entityCleanup_hostile_{i}", p, dict(internal))
        for i, (kind, p) in enumerate(props.items())
    }


def test_hostile_rows_through_polaris_and_us(
    harness: PolarisHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The same hostile rows go to Polaris 1.4.1's handlers and to our sweep: the page lists
    what each does with each; we never delete the file a BATCH row names outside its table
    (Polaris does: it deletes any path it is given)."""
    props = request.node.user_properties
    props.append(("polaris_release", RELEASE))
    outside = tmp_path / "wh" / "ns" / "neighbour" / "data" / "keep.parquet"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"a live neighbour's file")
    with throwaway_database("pp_polaris_oracle_hostile") as name:
        url = database_url(name)
        policy = TaskPolicy(grace_ms=0, max_attempts=2, polaris_version=RELEASE)
        store = Metastore(url, policy=policy)
        try:
            store.init_schema(SCHEMA)
            rows = {
                who: _hostile_rows(realm, tmp_path / "wh", outside)
                for who, realm in HOSTILE_REALMS.items()
            }
            store.insert_tasks([task for per in rows.values() for task in per.values()])
            answer = harness.purge(url, HOSTILE_REALMS["polaris"])
            polaris_deleted_outside = not outside.exists()
            outside.write_bytes(b"a live neighbour's file")
            runs = {run["id"]: run["attempts"] for run in answer["runs"]}
            left = {row["id"] for row in answer["left"]}
            with Runner(store, StorageConfig()) as runner:
                outcomes = {o.lease.task_id: o for o in runner.sweep([HOSTILE_REALMS["ours"]])}
            for kind, task in rows["polaris"].items():
                ours = rows["ours"][kind]
                polaris_did = "; ".join(dict.fromkeys(runs.get(task.id, ["not run"])))
                polaris_did += ", row left" if task.id in left else ", row dropped"
                outcome = outcomes.get(ours.id)
                we_did = (
                    "not leased (left for an operator)"
                    if outcome is None
                    else f"{outcome.status.value}: {_stable(outcome.error or '')}"
                )
                props.append(
                    (
                        f"polaris_difference:hostile row, {kind}",
                        f"Polaris: {polaris_did}. Ours: {we_did}",
                    )
                )
            assert outside.exists()  # our sweep: refused, the file is kept
            props.append(
                (
                    "polaris_fact:hostile BATCH path outside the table",
                    "Polaris deletes it" if polaris_deleted_outside else "Polaris keeps it",
                )
            )
        finally:
            store.dispose()
    assert outside.read_bytes() == b"a live neighbour's file"
