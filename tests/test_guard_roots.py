"""The guard's roots come only from what the catalog recorded, never from a file it judges.

Every case runs through the Runner against a real SQLite metastore, on real
pyiceberg tables on local disk, with a live neighbour table whose files must all
survive; the refusal must be recorded on the task's row.
"""

from __future__ import annotations

import json

import pytest
from pyiceberg.table import Table

from polaris_pipeline.execution.runner import Runner, Status, TaskOutcome
from polaris_pipeline.execution.sweep import execute_tree, sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.uri import same_location
from polaris_pipeline.tasks.model import NewTask, bounded_error
from tests.support.iceberg import Warehouse, recorded_drop_task, table_files, write_view_metadata


def _sweep(store: Metastore, wh: Warehouse, task: NewTask) -> TaskOutcome:
    """Insert ``task``, sweep everything, return the task's own outcome."""
    store.insert_tasks([task])
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        outcomes = {o.lease.task_id: o for o in sweep_tasks(runner, [task.realm_id])}
    return outcomes[task.id]


def _assert_refused_and_recorded(
    store: Metastore, task: NewTask, outcome: TaskOutcome, words: str
) -> None:
    assert outcome.status in (Status.FAILED, Status.DEAD), outcome
    assert outcome.permanent
    assert outcome.error is not None and words in outcome.error, outcome.error
    row = store.get_task(task.realm_id, task.id)
    assert row is not None, "a refused task must stay for an operator"
    assert row.last_error == bounded_error(outcome.error)  # as the row holds it


def _table_props(table: Table) -> dict[str, str]:
    return dict(table.properties)


def _namespace_dir(table: Table) -> str:
    return table.location().rsplit("/", 1)[0]


# -- no recorded location --------------------------------------------------------------


@pytest.mark.parametrize(
    "internal",
    [{}, {"storageLocation": ""}, {"storageLocation": "   "}],
    ids=["no-internal-properties", "empty-storageLocation", "blank-storageLocation"],
)
def test_no_recorded_location_refuses_a_task_aimed_at_a_live_table(
    local_warehouse: Warehouse, store: Metastore, internal: dict[str, str]
) -> None:
    """The attack of issue 13: metadata-location points at a LIVE table's file."""
    wh = local_warehouse
    live = wh.build("live", appends=1)
    live_files = table_files(live)
    before = wh.files()
    task = recorded_drop_task(
        live.metadata_location,
        name="dropped",
        internal_properties={**_table_props(live), **internal},
    )

    outcome = _sweep(store, wh, task)

    _assert_refused_and_recorded(store, task, outcome, "recorded no table location")
    assert all(wh.exists(p) for p in live_files)
    assert wh.files() == before
    assert not outcome.children


def test_entity_location_guards_when_storage_location_is_empty(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    """Empty storageLocation, the entity's recorded location: the metadata file of a
    live neighbour is outside it and refused before it is read."""
    wh = local_warehouse
    dropped = wh.build("t", appends=1)
    live = wh.build("t_live", appends=1)
    live_files = table_files(live)
    before = wh.files()
    task = recorded_drop_task(
        live.metadata_location,
        entity_properties={"location": dropped.location()},
        internal_properties={"storageLocation": ""},
    )

    outcome = _sweep(store, wh, task)

    _assert_refused_and_recorded(store, task, outcome, "outside the table location")
    assert all(wh.exists(p) for p in live_files)
    assert wh.files() == before


@pytest.mark.parametrize("empty_storage_location", [False, True])
def test_entity_location_alone_purges_exactly_the_table(
    local_warehouse: Warehouse, store: Metastore, empty_storage_location: bool
) -> None:
    """No storageLocation (Polaris found no storage configuration): the entity's
    ``location`` is the root, and the children carry it as their storageLocation."""
    wh = local_warehouse
    table = wh.build("t", appends=1)
    live = wh.build("t_live", appends=1)
    oracle, live_files = table_files(table), table_files(live)
    before = wh.files()
    internal = {"storageLocation": ""} if empty_storage_location else {}
    task = recorded_drop_task(
        table.metadata_location,
        entity_properties={"location": table.location()},
        internal_properties=internal,
    )

    store.insert_tasks([task])
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        (lease,) = runner.lease(1, ["POLARIS"])
        parent = runner.execute(lease)
        children = [store.get_task("POLARIS", c.task_id) for c in parent.children]
        # The children are leased to this runner already: run them as the sweep would.
        rest = [o for child in parent.children for o in execute_tree(runner, child)]

    assert parent.ok and children and all(rest_o.ok for rest_o in rest)
    assert {c.internal_properties["storageLocation"] for c in children if c} == {table.location()}
    assert before - wh.files() == oracle
    assert all(wh.exists(p) for p in live_files)


# -- the metadata file's own location ------------------------------------------------


def _crafted_metadata(table: Table, neighbour: Table, declared: str) -> str:
    """A metadata file inside ``table``'s directory declaring ``declared`` as its
    location and listing the neighbour's manifest list in every snapshot."""
    doc = json.loads(table.io.new_input(table.metadata_location).open().read())
    doc["location"] = declared
    neighbour_list = neighbour.current_snapshot().manifest_list  # type: ignore[union-attr]
    for snapshot in doc["snapshots"]:
        snapshot["manifest-list"] = neighbour_list
    path = f"{table.location()}/metadata/99999-crafted.metadata.json"
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(json.dumps(doc).encode())
    return path


@pytest.mark.parametrize("declared", ["wider", "narrower", "sibling"])
@pytest.mark.parametrize("recorded_in", ["storageLocation", "entity"])
def test_metadata_declaring_another_location_is_refused(
    local_warehouse: Warehouse, store: Metastore, declared: str, recorded_in: str
) -> None:
    """A file claiming the namespace directory (and naming the neighbour's manifest
    list), a sub-directory, or a neighbour's location: refused, nothing deleted."""
    wh = local_warehouse
    table = wh.build("t", appends=1)
    neighbour = wh.build("t_neighbour", appends=1)
    location = {
        "wider": _namespace_dir(table),
        "narrower": f"{table.location()}/data",
        "sibling": neighbour.location(),
    }[declared]
    crafted = _crafted_metadata(table, neighbour, location)
    neighbour_files = table_files(neighbour)
    before = wh.files()
    if recorded_in == "storageLocation":
        records = {"internal_properties": {"storageLocation": table.location()}}
    else:
        records = {"entity_properties": {"location": table.location()}}
    task = recorded_drop_task(crafted, **records)  # type: ignore[arg-type]

    outcome = _sweep(store, wh, task)

    _assert_refused_and_recorded(store, task, outcome, f"declares location {location!r}")
    assert all(wh.exists(p) for p in neighbour_files)
    assert wh.files() == before


def test_trailing_slash_is_the_only_tolerated_difference(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=1)
    oracle = table_files(table)
    before = wh.files()
    task = recorded_drop_task(
        table.metadata_location,
        internal_properties={**_table_props(table), "storageLocation": table.location() + "/"},
    )

    outcome = _sweep(store, wh, task)

    assert outcome.ok, outcome.error
    assert before - wh.files() == oracle


@pytest.mark.parametrize(
    ("recorded", "declared", "agree"),
    [
        ("s3://b/wh/ns/t", "s3://b/wh/ns/t", True),
        ("s3://b/wh/ns/t/", "s3://b/wh/ns/t", True),
        ("s3://b/wh/ns/t", "s3://b/wh/ns/t/", True),
        ("s3://b/wh/ns/t", "s3://b/wh/ns", False),
        ("s3://b/wh/ns/t", "s3://b/wh/ns/t/data", False),
        ("s3://b/wh/ns/t", "s3://b/wh/ns/t_2", False),
        # Issue 26: one location in two spellings agrees (Polaris's StorageLocation).
        ("s3://b/wh/ns/t", "s3a://b/wh/ns/t", True),
        ("file:///wh/t", "file:/wh/t", True),
        ("", "", False),
        ("s3://b/wh/ns/t", "", False),
    ],
)
def test_locations_agree_only_when_they_name_one_location(
    recorded: str, declared: str, agree: bool
) -> None:
    assert same_location(recorded, declared) is agree


# -- views -------------------------------------------------------------------------------


def test_view_task_without_internal_properties_at_a_table_file_is_refused(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    wh = local_warehouse
    live = wh.build("live", appends=1)
    live_files = table_files(live)
    before = wh.files()
    task = recorded_drop_task(live.metadata_location, name="v", is_view=True)

    outcome = _sweep(store, wh, task)

    _assert_refused_and_recorded(store, task, outcome, "recorded no table location")
    assert all(wh.exists(p) for p in live_files)
    assert wh.files() == before


def test_view_task_whose_recorded_location_is_a_table_is_refused(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    """Even when the locations agree, a table's metadata file is not a view's."""
    wh = local_warehouse
    live = wh.build("live", appends=1)
    before = wh.files()
    task = recorded_drop_task(
        live.metadata_location,
        name="v",
        is_view=True,
        entity_properties={"location": live.location()},
    )

    outcome = _sweep(store, wh, task)

    _assert_refused_and_recorded(store, task, outcome, "not Iceberg view metadata")
    assert wh.files() == before


@pytest.mark.parametrize("recorded_in", ["storageLocation", "entity"])
def test_view_metadata_declaring_a_wider_location_is_refused(
    local_warehouse: Warehouse, store: Metastore, recorded_in: str
) -> None:
    wh = local_warehouse
    location = f"{wh.uri}/ns/v"
    io = wh.catalog._load_file_io(location=location)
    metadata = write_view_metadata(f"{wh.uri}/ns", io)
    # Move the file under the view's directory, keeping its (wider) location.
    inside = f"{location}/metadata/00001-wider.metadata.json"
    with io.new_output(inside).create(overwrite=True) as out:
        out.write(io.new_input(metadata).open().read())
    before = wh.files()
    if recorded_in == "storageLocation":
        records = {"internal_properties": {"storageLocation": location}}
    else:
        records = {"entity_properties": {"location": location}}
    task = recorded_drop_task(inside, name="v", is_view=True, **records)  # type: ignore[arg-type]

    outcome = _sweep(store, wh, task)

    _assert_refused_and_recorded(store, task, outcome, "declares location")
    assert wh.files() == before


def test_view_with_entity_location_only_is_deleted(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    wh = local_warehouse
    location = f"{wh.uri}/ns/v"
    io = wh.catalog._load_file_io(location=location)
    current = write_view_metadata(location, io)
    task = recorded_drop_task(
        current, name="v", is_view=True, entity_properties={"location": location}
    )

    outcome = _sweep(store, wh, task)

    assert outcome.ok, outcome.error
    assert not wh.exists(current)
    assert store.get_task(task.realm_id, task.id) is None


def test_root_properties_the_entity_recorded_reach_the_children(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    """write.data.path recorded on the entity (no storageLocation, no task properties):
    the parent admits the data files, and the children get it too, since they see
    no entity."""
    wh = local_warehouse
    data_root = f"{wh.uri}/elsewhere/t_data"
    table = wh.build("t", appends=1, properties={"write.data.path": data_root})
    oracle = table_files(table)
    before = wh.files()
    task = recorded_drop_task(
        table.metadata_location,
        entity_properties={"location": table.location(), "write.data.path": data_root},
    )

    store.insert_tasks([task])
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        (lease,) = runner.lease(1, ["POLARIS"])
        parent = runner.execute(lease)
        children = [store.get_task("POLARIS", c.task_id) for c in parent.children]
        rest = [o for child in parent.children for o in execute_tree(runner, child)]

    assert parent.ok and children and all(o.ok for o in rest), [o.error for o in rest]
    for child in children:
        assert child is not None
        assert child.internal_properties["storageLocation"] == table.location()
        assert child.internal_properties["write.data.path"] == data_root
    assert before - wh.files() == oracle
