"""Polaris 1.4.1's own purge as the oracle for ours (issue 48).

Per table shape, on the same files (restored from a copy between runs), and the same task
row our builders write for the dropped table (as Polaris writes it):

- (A) Polaris plans and runs its own purge: the release's own TaskExecutorImpl runs the row
  with its TableCleanupTaskHandler, and the MANIFEST and BATCH children that handler hands
  back to it with its other handlers (tests/polaris/oracle);
- (B) we plan and run ours: our Runner executes the task, its children and its last stage;
- (C) Polaris's executor and handlers run the children our Runner wrote, as it wrote them.

C deletes exactly what A deletes; B deletes all of it, plus only the extras named here with
their reason; B deletes nothing outside the table (a live neighbour ``t_2`` beside it); the
rows each leaves behind are listed on docs/polaris-compatibility.md. 1.4.1 only: at 1.0, 1.6
and 1.7 the handlers live in polaris-runtime-service, which Maven Central does not serve.
A dropped view goes through (A) and (B) too; the hostile rows through Polaris and us.
Polaris failing part-way, and the reliability worker's executor against Polaris's:
tests/test_polaris_oracle_faults.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyiceberg import __version__ as pyiceberg_version
from pyiceberg.manifest import ManifestContent
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import StaticTable, Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from sqlalchemy import create_engine, text

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.polaris_writer import polaris_children
from builders.postgres import database_url, throwaway_database
from builders.tasks import dropped_entity_json, manifest_task_data
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import child_stages, execute_tree, sweep_tasks
from polaris_pipeline.metastore import new_entity_id
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    TableIdentifier,
    encode_batch_cleanup,
)
from tests.support.iceberg import Warehouse, view_metadata
from tests.support.java import WrittenTable, write_iceberg_tables
from tests.support.metastore import pipeline_store
from tests.support.polaris_classes import PolarisHarness
from tests.support.polaris_oracle import (
    DELETES_AND_STATISTICS,
    RELEASE,
    SCHEMA,
    files_under,
    local_path,
    oracle_harness,
)

pytestmark = pytest.mark.slow

POLARIS_A, OURS, POLARIS_C = "A", "B", "C"  # a realm per run, so rows never mix
# Table shapes we purge; builders.tables.build_table's keywords.
SHAPES: dict[str, dict[str, Any]] = {
    "v1": {"format_version": 1},
    "v2 with position and equality deletes and statistics files": DELETES_AND_STATISTICS,
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


def _pyiceberg_v3_refusal() -> str | None:
    """The venv's pyiceberg's error serialising format-version 3 table metadata (what
    writing a v3 table does first), or None when it can: a table pyiceberg writes at v3 is
    a shape where it can (test_a_pyiceberg_v3_table_is_a_shape_where_pyiceberg_writes_one)."""
    metadata = new_table_metadata(
        built_tables.TABLE_SCHEMA,
        UNPARTITIONED_PARTITION_SPEC,
        UNSORTED_SORT_ORDER,
        "file:///pyiceberg-v3-probe",
        {"format-version": "3"},
    )
    try:
        metadata.model_dump_json()
    except NotImplementedError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


PYICEBERG_V3 = "pyiceberg v3"
PYICEBERG_V3_REFUSAL = _pyiceberg_v3_refusal()
if PYICEBERG_V3_REFUSAL is None:
    SHAPES[PYICEBERG_V3] = {"format_version": 3}
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
    # builders/polaris_writer.py's imitation of the children Polaris creates
    imitation: list[tuple[str, TaskType, str]] = field(default_factory=list)
    deleted: dict[str, set[str]] = field(default_factory=dict)  # run -> files gone
    left: dict[str, list[str]] = field(default_factory=dict)  # run -> rows left, described
    polaris: dict[str, dict[str, Any]] = field(default_factory=dict)  # A, C: the oracle's answer


def _delete_files(table: Table) -> set[str]:
    """The table's delete manifests and every file their entries name (any status)."""
    out = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.content == ManifestContent.DELETES:
                out.add(local_path(manifest.manifest_path))
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    out.add(local_path(entry.data_file.file_path))
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
    return files - {local_path(f) for f in named}


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
    return oracle_harness()


SHAPE_IDS = dict(
    zip(
        SHAPES,
        ("v1", "v2-deletes-stats", "v2-capped-log", "v2-expired", "java-v2", "java-v3", "v3"),
        strict=False,  # the last only where pyiceberg writes v3
    )
)
assert list(SHAPE_IDS) == list(SHAPES)
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
        metadata = Path(local_path(table.location)) / "metadata"
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
    location = Path(local_path(table.metadata.location))
    every = files_under(root)
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
        store = pipeline_store(url, policy, schema_version=SCHEMA)
        try:
            parent = built_tasks.drop_task(spec)
            store.insert_tasks([dataclasses.replace(parent, realm_id=r) for r in (POLARIS_A, OURS)])
            out.imitation = polaris_children(table, parent.name)

            out.polaris[POLARIS_A] = harness.purge(url, POLARIS_A)
            out.deleted[POLARIS_A] = every - files_under(root)
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
                    for outcome in execute_tree(runner, child)
                ]
                if root_outcome.finish is not None:
                    runner.finish_table(
                        root_outcome.finish,
                        children_done=all(o.ok for o in rest),
                        result=root_outcome.result,
                    )
            out.deleted[OURS] = every - files_under(root)
            out.left[OURS] = [
                f"{task.name.split('_')[0]} type {task.properties.get('taskType')}"
                for task in store.list_tasks([OURS])
            ]
            restore()

            out.polaris[POLARIS_C] = harness.purge(url, POLARIS_C)
            out.deleted[POLARIS_C] = every - files_under(root)
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
    """(C) Polaris's executor running the children our code wrote deletes exactly the files
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
    """builders/polaris_writer.polaris_children (the soak's dying Polaris) writes the
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


def test_a_pyiceberg_v3_table_is_a_shape_where_pyiceberg_writes_one(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A table pyiceberg writes at format version 3 is an oracle shape (A, B, C above) where
    the venv's pyiceberg writes one; where it cannot, writing one fails with the error this
    page shows, and the v3 shapes are Iceberg Java's alone."""
    props = request.node.user_properties
    props.append(("polaris_release", RELEASE))
    fact = f"polaris_fact:oracle, {PYICEBERG_V3} (a table pyiceberg {pyiceberg_version} writes)"
    if PYICEBERG_V3_REFUSAL is None:
        assert SHAPES[PYICEBERG_V3] == {"format_version": 3}
        props.append((fact, "written: a shape of its own"))
        return
    assert PYICEBERG_V3 not in SHAPES
    uri = built_tables.local_warehouse_uri(tmp_path / "wh")
    catalog = built_tables.open_catalog(uri, tmp_path / "catalog.db", name="local")
    with pytest.raises(NotImplementedError) as refused:
        built_tables.build_table(catalog, ("ns", "t"), format_version=3)
    assert f"{type(refused.value).__name__}: {refused.value}" == PYICEBERG_V3_REFUSAL
    props.append((fact, f"not written: pyiceberg refuses ({PYICEBERG_V3_REFUSAL})"))


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
        local = Path(local_path(uri))
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(body)
        paths.append(str(local))
    return paths


def test_a_dropped_view_polaris_keeps_its_row_and_we_delete_its_metadata_file(
    harness: PolarisHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A dropped view's row: (A) Polaris 1.4.1's own executor and handlers take it as a table's and
    fail reading the view metadata on every attempt, so they delete nothing, create no child and
    leave the row; (B) we delete the view's current metadata file alone (nothing of the live
    neighbour view ``v_2``) and leave no row; (C) there is nothing to run: we create no child
    for a view."""
    props = request.node.user_properties
    props.append(("polaris_release", RELEASE))
    root = tmp_path / "wh"
    older, current = _write_view(root / "ns" / "v", 2)
    _write_view(root / "ns" / "v_2", 1)  # live, its location has the view's as a prefix
    every = files_under(root)
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
        store = pipeline_store(
            url, TaskPolicy(grace_ms=0, polaris_version=RELEASE), schema_version=SCHEMA
        )
        try:
            store.insert_tasks(
                [dataclasses.replace(parent, realm_id=realm) for realm in VIEW_REALMS.values()]
            )
            answer = harness.purge(url, VIEW_REALMS[POLARIS_A])
            deleted[POLARIS_A] = every - files_under(root)
            left[POLARIS_A] = _polaris_rows(answer)
            shutil.rmtree(root)
            shutil.copytree(original, root)
            with Runner(store, StorageConfig()) as runner:
                outcomes = sweep_tasks(runner, [VIEW_REALMS[OURS]])
            deleted[OURS] = every - files_under(root)
            left[OURS] = [
                f"{task.name.split('_')[0]} type {task.properties.get('taskType')}"
                for task in store.list_tasks([VIEW_REALMS[OURS]])
            ]
        finally:
            store.dispose()
    props.append(
        (
            f"polaris_fact:oracle, {VIEW_SHAPE}: files deleted by A Polaris / B ours / "
            f"C Polaris on our children (of {len(files_under(original / 'ns' / 'v'))})",
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
    """The same hostile rows go to Polaris 1.4.1's executor and to our sweep: the page lists
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
        store = pipeline_store(url, policy, schema_version=SCHEMA)
        try:
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
                outcomes = {
                    o.lease.task_id: o for o in sweep_tasks(runner, [HOSTILE_REALMS["ours"]])
                }
            for kind, task in rows["polaris"].items():
                ours = rows["ours"][kind]
                attempts = runs.get(task.id, ["not run"])
                # Each distinct outcome once, its first exception alone (not its causes).
                polaris_did = "; ".join(
                    dict.fromkeys(a.split(" | caused by ")[0] for a in attempts)
                )
                if len(attempts) > 1:
                    polaris_did += f" ({len(attempts)} attempts)"
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
