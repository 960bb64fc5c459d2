"""The table roots the catalog recorded, decoded once with the task (``DecodedTask.roots``).

Every reader (the guard, the unreferenced listing, the task's storage, the leak
report's task owners) reads them there or through the one function
(``tasks/roots.py``'s ``recorded_roots``): the task's ``storageLocation``, else the
dropped entity's ``location``; root properties from the entity and the task.
"""

from __future__ import annotations

import dataclasses

from builders.tasks import DropSpec, batch_task, drop_task, task_row
from polaris_pipeline.leaks.owners import task_location
from polaris_pipeline.storage.uri import parse_location
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import Prop, TaskRow
from polaris_pipeline.tasks.roots import RecordedRoots, recorded_roots

SPEC = DropSpec(
    namespace=("ns",),
    name="t",
    metadata_location="s3://b/wh/ns/t/metadata/v2.metadata.json",
    location="s3://b/wh/ns/t",
    table_properties={"write.data.path": "s3://b/data/t", "owner": "me"},
)


def _table_row(**internal_changes: str) -> TaskRow:
    row = task_row(drop_task(SPEC))
    internal = {**row.internal_properties, **internal_changes}
    return dataclasses.replace(row, internal_properties=internal)


def test_a_table_task_carries_the_roots_its_catalog_recorded() -> None:
    decoded = DecodedTask.from_row(_table_row())
    assert decoded.roots == RecordedRoots(
        "s3://b/wh/ns/t", "the task's storageLocation", {"write.data.path": "s3://b/data/t"}
    )
    assert decoded.roots == recorded_roots(decoded.row, decoded.entity)
    # No storageLocation: the dropped entity's location, said as such.
    bare = DecodedTask.from_row(_table_row(storageLocation=" "))
    assert bare.roots is not None
    assert (bare.roots.location, bare.roots.source) == (
        "s3://b/wh/ns/t",
        "the dropped entity's location property",
    )
    assert bare.table is not None and bare.table.location == "s3://b/wh/ns/t"


def test_a_child_and_a_task_that_does_not_decode_carry_their_storage_location() -> None:
    child = DecodedTask.from_row(task_row(batch_task("r", internal={"storageLocation": "/wh/t"})))
    assert child.roots == RecordedRoots("/wh/t", "the task's storageLocation", {})
    row = _table_row()
    broken = dataclasses.replace(row, properties={**row.properties, Prop.DATA: "not json"})
    decoded = DecodedTask.from_row(broken)
    assert decoded.error is not None and decoded.roots is not None
    assert decoded.roots.location == "s3://b/wh/ns/t"
    nothing = batch_task("r", internal={"storageLocation": ""})
    assert DecodedTask.from_row(task_row(nothing)).roots is None


def test_a_reread_row_with_other_roots_is_decoded_again() -> None:
    row = _table_row()
    decoded = DecodedTask.from_row(row)
    same = dataclasses.replace(row, entity_version=row.entity_version + 1)
    assert decoded.reread(same).roots is decoded.roots  # a lease's write: kept
    internal = {**row.internal_properties, "write.data.path": "s3://b/elsewhere/t"}
    again = decoded.reread(dataclasses.replace(row, internal_properties=internal))
    assert again.roots is not None
    assert again.roots.properties == {"write.data.path": "s3://b/elsewhere/t"}


def test_the_leak_reports_task_owner_is_the_same_location() -> None:
    for row in (_table_row(), _table_row(storageLocation="")):
        roots = DecodedTask.from_row(row).roots
        assert roots is not None
        assert task_location(row) == parse_location(roots.location, directory=True)
