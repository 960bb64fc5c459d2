"""The referenced purge's shared-location guard: a live table's files are never deleted.

A dropped table whose location a live table or view shares (at it, above it,
under it, in any realm or catalog, however the location is spelt) or whose
metadata file a live table uses is refused before anything is deleted, and
dead-lettered as permanent with the live entity named. A sibling sharing only a
string prefix (``t`` / ``t_2``) or a namespace above does not refuse. An
operator's ``allowSharedLocation`` override lets the purge go on, and says so.

Every case runs through the ``Runner`` against PostgreSQL and SQLite, each with
Polaris's schema v1 (no ``location_without_scheme``) and v5.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table
from sqlalchemy import create_engine

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.errors import MetastoreError
from polaris_pipeline.execution.runner import Runner, Status, TaskOutcome
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.storage.uri import parse_location, split_uri
from polaris_pipeline.tasks.model import Prop, TaskPolicy, TaskType, bounded_error
from tests.support.iceberg import BUILT_NEIGHBOUR, BUILT_TABLE, Warehouse
from tests.support.metastore import pipeline_store
from tests.support.unreferenced import CATALOG_TYPE_CODE, NAMESPACE_TYPE_CODE, live_entity

OTHER_REALM = "OTHER"


@pytest.fixture(params=[1, 5], ids=["v1", "v5"])
def guarded(
    metastore_url: str, policy: TaskPolicy, request: pytest.FixtureRequest
) -> Iterator[Metastore]:
    """A metastore of Polaris's schema v1 or v5, on PostgreSQL and on SQLite."""
    store = pipeline_store(metastore_url, policy, schema_version=request.param)
    yield store
    store.dispose()


@dataclass
class Dropped:
    table: Table
    files: set[str]  # every file of the dropped table: also the live one's when shared
    sibling: Table
    sibling_files: set[str]
    task_id: int

    @property
    def location(self) -> str:
        return self.table.location().rstrip("/")


def _drop(store: Metastore, wh: Warehouse, *, allow: bool = False) -> Dropped:
    table = wh.catalog.load_table(BUILT_TABLE)
    sibling = wh.catalog.load_table(BUILT_NEIGHBOUR)
    task = built_tasks.drop_table_task(table)
    if allow:
        task.properties[Prop.ALLOW_SHARED_LOCATION] = "true"
    store.insert_tasks([task])
    return Dropped(
        table, wh.built_files(BUILT_TABLE), sibling, wh.built_files(BUILT_NEIGHBOUR), task.id
    )


def _live(store: Metastore, location: str, **kwargs: Any) -> int:
    """A live entity as Polaris of ``store``'s schema version writes it."""
    indexed = (store.check_schema() or 0) >= 2
    return live_entity(store, location, with_location_column=indexed, **kwargs)


def _sweep(store: Metastore, wh: Warehouse) -> list[TaskOutcome]:
    with Runner(store, wh.config, resolver=wh.resolver, run_id="run-guard") as runner:
        return sweep_tasks(runner, ["POLARIS"])


def _assert_refused(store: Metastore, dropped: Dropped, outcomes: list[TaskOutcome]) -> str:
    """The table was refused before anything was deleted; returns the recorded error."""
    [root] = outcomes  # no child was created
    assert (root.status, root.permanent) == (Status.DEAD, True), root.error
    assert root.error is not None and "SharedLocationRefusal" in root.error
    row = store.get_task("POLARIS", dropped.task_id)
    assert row is not None and row.status == "dead" and row.failure_permanent
    assert row.last_error == bounded_error(root.error)
    assert [t.id for t in store.list_tasks()] == [dropped.task_id]
    missing = {f for f in dropped.files if not Path(split_uri(f)[1]).exists()}
    assert missing == set(), "a file of the live table was deleted"
    assert all(Path(split_uri(f)[1]).exists() for f in dropped.sibling_files)
    return row.last_error


# -- refused: a live table shares the files ----------------------------------------------


def _another_realm_over_the_same_metadata(store: Metastore, d: Dropped) -> None:
    _live(
        store,
        d.location,
        name="registered",
        realm_id=OTHER_REALM,
        catalog_id=7,
        internal_properties={"metadata-location": d.table.metadata_location},
    )


def _another_catalog(store: Metastore, d: Dropped) -> None:
    elsewhere = d.location.rsplit("/", 3)[0] + "/other-warehouse"
    catalog = _live(store, elsewhere, type_code=CATALOG_TYPE_CODE, name="sales")
    _live(store, d.location, name="orders", catalog_id=catalog)


def _nested(store: Metastore, d: Dropped) -> None:
    inner = Path(split_uri(d.location)[1]) / "nested" / "inner"
    (inner / "data").mkdir(parents=True)
    (inner / "data" / "live.parquet").write_bytes(b"PAR1live")
    d.files.add(f"{d.location}/nested/inner/data/live.parquet")
    _live(store, f"{d.location}/nested/inner", name="inner")


def _spelt(spelling: Callable[[str], str]) -> Callable[[Metastore, Dropped], None]:
    def add(store: Metastore, d: Dropped) -> None:
        _live(store, spelling(d.location), name="spelt")

    return add


def _path_of(location: str) -> str:
    return split_uri(location)[1]


def _metadata_file_only(store: Metastore, d: Dropped) -> None:
    # Its own location elsewhere: only its metadata-location (spelt file:/) says it
    # uses the dropped table's metadata file.
    _live(
        store,
        d.location.rsplit("/", 3)[0] + "/elsewhere/reg",
        name="registered_elsewhere",
        realm_id=OTHER_REALM,
        internal_properties={"metadata-location": "file:" + _path_of(d.table.metadata_location)},
    )


REFUSING = {
    "another-realm-same-metadata": (
        _another_realm_over_the_same_metadata,
        ["'registered'", f"{OTHER_REALM}/", "catalog id 7", "at location 'file:///"],
    ),
    "another-catalog": (_another_catalog, ["'orders'", "POLARIS/", "catalog 'sales'"]),
    "nested": (_nested, ["'inner'", "/t/nested/inner'", "at or under the prefix"]),
    "a-table-above": (
        lambda store, d: _live(store, d.location.rsplit("/", 1)[0], name="outer"),
        ["'outer'", "the prefix lies inside it"],
    ),
    "file-colon-slash": (_spelt(lambda loc: "file:" + _path_of(loc)), ["'spelt'"]),
    "file-triple-slash-trailing": (_spelt(lambda loc: loc + "/"), ["'spelt'"]),
    "bare-path": (_spelt(_path_of), ["'spelt'"]),
    "metadata-location-only": (
        _metadata_file_only,
        ["'registered_elsewhere'", "metadata-location", "a file about to be deleted"],
    ),
}


@pytest.mark.parametrize("case", list(REFUSING))
def test_a_live_table_sharing_the_files_refuses_the_purge_before_any_delete(
    guarded: Metastore, built_local_warehouse: Warehouse, case: str
) -> None:
    add_live, words = REFUSING[case]
    dropped = _drop(guarded, built_local_warehouse)
    add_live(guarded, dropped)

    error = _assert_refused(guarded, dropped, _sweep(guarded, built_local_warehouse))

    for word in words:
        assert word in error, error
    assert "--allow-shared-location" in error


def test_s3a_and_s3_are_one_location(guarded: Metastore, built_s3_warehouse: Warehouse) -> None:
    dropped = _drop(guarded, built_s3_warehouse)
    _live(guarded, "s3a://" + dropped.location.removeprefix("s3://"), name="spark_side")

    [root] = _sweep(guarded, built_s3_warehouse)

    assert (root.status, root.permanent) == (Status.DEAD, True)
    assert root.error is not None and "'spark_side'" in root.error
    assert all(built_s3_warehouse.exists(f) for f in dropped.files)
    row = guarded.get_task("POLARIS", dropped.task_id)
    assert row is not None and row.failure_permanent and "spark_side" in (row.last_error or "")


# -- not refused ---------------------------------------------------------------------


def test_a_sibling_sharing_a_string_prefix_and_a_namespace_above_do_not_refuse(
    guarded: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(guarded, built_local_warehouse)
    _live(guarded, dropped.sibling.location(), name="t_2")
    _live(
        guarded,
        dropped.location.rsplit("/", 1)[0],
        type_code=NAMESPACE_TYPE_CODE,
        name="ns",
    )

    outcomes = _sweep(guarded, built_local_warehouse)

    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert guarded.list_tasks() == []
    assert not any(Path(split_uri(f)[1]).exists() for f in dropped.files)
    assert all(Path(split_uri(f)[1]).exists() for f in dropped.sibling_files)
    assert all(o.result is None or o.result.shared_location_override is None for o in outcomes)


# -- children -------------------------------------------------------------------------


def test_children_are_refused_once_a_live_table_appears_at_the_location(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    """Each child checks again before its deletes: a table created at the path after
    its parent planned stops every manifest and batch child, which are dead-lettered."""
    dropped = _drop(metastore, built_local_warehouse)
    with Runner(
        metastore, built_local_warehouse.config, resolver=built_local_warehouse.resolver
    ) as runner:
        [lease] = runner.lease(1, ["POLARIS"])
        parent = runner.execute(lease)
        assert parent.ok and parent.children, parent.error
        _live(metastore, dropped.location, name="created_meanwhile", realm_id=OTHER_REALM)
        children = [runner.execute(child) for child in parent.children]

    kinds = {c.task_type for c in children}
    assert kinds == {TaskType.MANIFEST_FILE_CLEANUP.code, TaskType.BATCH_FILE_CLEANUP.code}
    for child in children:
        assert (child.status, child.permanent) == (Status.DEAD, True), child.error
        assert child.error is not None and "'created_meanwhile'" in child.error
        row = metastore.get_task("POLARIS", child.lease.task_id)
        assert row is not None and row.failure_permanent
    assert all(Path(split_uri(f)[1]).exists() for f in dropped.files)


# -- the override ---------------------------------------------------------------------


def test_requeue_with_the_override_lets_the_purge_go_on_and_says_so(
    guarded: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(guarded, built_local_warehouse)
    _another_realm_over_the_same_metadata(guarded, dropped)
    _assert_refused(guarded, dropped, _sweep(guarded, built_local_warehouse))

    guarded.requeue("POLARIS", dropped.task_id, allow_shared_location=True)
    row = guarded.get_task("POLARIS", dropped.task_id)
    assert row is not None and row.properties[Prop.ALLOW_SHARED_LOCATION] == "true"
    outcomes = _sweep(guarded, built_local_warehouse)

    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    root = outcomes[0]
    assert root.result is not None and root.result.shared_location_override is not None
    assert "'registered'" in root.result.shared_location_override
    assert any("shared-location guard overridden" in n for n in root.result.notes)
    # The children carried the override down and went past the same live table.
    assert len(outcomes) > 1
    for child in outcomes[1:]:
        assert child.row is not None and child.row.shared_location_allowed
    assert not any(Path(split_uri(f)[1]).exists() for f in dropped.files)
    assert guarded.list_tasks() == []


def test_a_requeue_without_the_override_is_refused_again(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(metastore, built_local_warehouse)
    _live(metastore, dropped.location, name="live")
    _assert_refused(metastore, dropped, _sweep(metastore, built_local_warehouse))

    metastore.requeue("POLARIS", dropped.task_id)
    error = _assert_refused(metastore, dropped, _sweep(metastore, built_local_warehouse))

    assert "'live'" in error


def test_a_view_sharing_a_live_views_location_is_refused(
    metastore: Metastore, tmp_path: Path
) -> None:
    """A dropped view's metadata file is kept while a live view is registered over it."""
    root = tmp_path / "wh" / "ns" / "v"
    (root / "metadata").mkdir(parents=True)
    metadata = root / "metadata" / "00001-v.metadata.json"
    location = built_tables.local_warehouse_uri(root)
    view = {"view-uuid": "u", "format-version": 1, "location": location}
    metadata.write_text(json.dumps(view), encoding="utf-8")
    spec = built_tasks.DropSpec(
        namespace=("ns",),
        name="v",
        metadata_location=metadata.as_uri(),
        location=location,
        is_view=True,
    )
    task = built_tasks.drop_task(spec)
    metastore.insert_tasks([task])
    live_entity(metastore, location, name="live_view", realm_id=OTHER_REALM)

    with Runner(metastore) as runner:
        [outcome] = sweep_tasks(runner, ["POLARIS"])

    assert (outcome.status, outcome.permanent) == (Status.DEAD, True)
    assert outcome.error is not None and "'live_view'" in outcome.error
    assert metadata.exists()


# -- the metadata-location lookup -------------------------------------------------------


@pytest.mark.parametrize(
    "root",
    ["file:///wh/ns/t_1%x", "s3://bucket/wh/ns/t", "file:///wh/nś/tä"],
    ids=["like-wildcards", "s3", "non-ascii"],
)
def test_metadata_users_finds_a_live_table_over_a_file_in_any_spelling(
    guarded: Metastore, root: str
) -> None:
    """Found whatever the path holds (LIKE's wildcards, characters JSON may escape) and
    however the file is spelt; a file of a sibling (``t_1%x_2``) is not found."""
    metadata = f"{root}/metadata/00001-a.metadata.json"
    spelt = metadata.replace("file:///", "file:/").replace("s3://", "s3a://")
    _live(guarded, root, name="registered", internal_properties={"metadata-location": spelt})
    _live(
        guarded,
        root + "_2",
        name="sibling",
        internal_properties={"metadata-location": f"{root}_2/metadata/00001-a.metadata.json"},
    )
    live = LiveLocations(guarded.engine, guarded.check_schema())

    [hit] = live.metadata_users([metadata, f"{root}/data/a.parquet"])
    none = live.metadata_users([f"{root}/metadata/00002-b.metadata.json"])

    assert hit.name == "registered" and "metadata-location" in hit.why
    assert none == []


def test_a_database_error_in_an_overlap_check_is_a_metastore_error(tmp_path: Path) -> None:
    """Each check (held connection or not) says the overlap check failed, never a raw
    SQLAlchemy error: a database with no Polaris tables is one."""
    live = LiveLocations(create_engine(f"sqlite:///{tmp_path / 'empty.db'}"), None)
    prefix = parse_location("file:///wh/ns/t", directory=True)
    with pytest.raises(MetastoreError, match="overlap check failed: no such table"):
        live.overlaps(prefix)
    with live.held(), pytest.raises(MetastoreError, match="overlap check failed: no such table"):
        live.enclosing_table(prefix)
