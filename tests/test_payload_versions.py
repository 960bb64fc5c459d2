"""Rows we write are rows the running Polaris version reads; namespaces as Polaris encodes them.

- BATCH_FILE_CLEANUP children carry ``type`` only for a schema v5+ metastore
  (Polaris 1.7+); below v5, and without a version row, they omit it (Polaris
  1.0-1.6 fail to decode it; 1.7+ reads a missing ``type`` as TABLE_METADATA).
- ``parent-namespace`` levels are Java ``URLEncoder`` form-encoded, joined by ``%1F``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, TaskType
from polaris_pipeline.tasks.payloads import (
    BATCH_TYPE_TABLE_METADATA,
    BatchCleanupPayload,
    DroppedEntity,
    TableIdentifier,
    batch_type_readable,
    decode_batch_cleanup,
    decode_manifest_cleanup,
    encode_batch_cleanup,
    table_identifier,
)
from polaris_pipeline.testing.tasks import task_row
from tests.support.iceberg import Warehouse, drop_task_row, recorded_drop_task, table_files
from tests.support.tasks import set_schema_version

# -- the batch payload's type, per schema version --------------------------------------


@pytest.mark.parametrize(
    ("version", "readable"), [(None, False), (1, False), (4, False), (5, True), (6, True)]
)
def test_type_is_written_only_from_schema_v5(version: int | None, readable: bool) -> None:
    assert batch_type_readable(version) is readable


def test_a_payload_without_type_reads_as_table_metadata() -> None:
    payload = BatchCleanupPayload(TableIdentifier(("ns",), "t"), ("s3://b/wh/ns/t/m.json",))
    bare = encode_batch_cleanup(payload, with_type=False)
    assert json.loads(bare) == {
        "tableId": {"namespace": ["ns"], "name": "t"},
        "batchFiles": ["s3://b/wh/ns/t/m.json"],
    }
    assert decode_batch_cleanup(bare) == payload
    assert decode_batch_cleanup(bare).type == BATCH_TYPE_TABLE_METADATA
    assert json.loads(encode_batch_cleanup(payload))["type"] == BATCH_TYPE_TABLE_METADATA


@pytest.mark.parametrize("version", [4, 5, None])
def test_children_follow_the_metastore_schema_version(
    local_warehouse: Warehouse, metastore: Metastore, version: int | None
) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=1)
    oracle = table_files(table)
    before = wh.files()
    set_schema_version(metastore, version)
    parent_task = drop_task_row(table)
    metastore.insert_tasks(
        [
            NewTask(
                parent_task.realm_id,
                parent_task.id,
                parent_task.name,
                parent_task.properties,
                parent_task.internal_properties,
            )
        ]
    )

    with Runner(metastore, wh.config, resolver=wh.resolver) as runner:
        (lease,) = runner.lease(1, ["POLARIS"])
        parent = runner.execute(lease)
        rows = [metastore.get_task("POLARIS", c.task_id) for c in parent.children]
        rest = [o for child in parent.children for o in runner.execute_tree(child)]

    assert parent.ok and rows and all(r is not None for r in rows)
    batches = [
        json.loads(r.properties["data"])
        for r in rows
        if r is not None and r.task_type() == TaskType.BATCH_FILE_CLEANUP
    ]
    assert batches
    if version is not None and version >= 5:
        assert all(b.get("type") == "TABLE_METADATA" for b in batches)
    else:
        assert all("type" not in b for b in batches)
    assert all(set(b) <= {"tableId", "batchFiles", "type"} for b in batches)
    # Our own runner reads either form: the table is gone, exactly.
    assert all(o.ok for o in rest), [o.error for o in rest]
    assert before - wh.files() == oracle


# -- namespaces, as Polaris encodes them -----------------------------------------------

# Levels as Java's URLEncoder writes them (form encoding), joined by "%1F".
JAVA_ENCODED = [
    ("sales+dept", ("sales dept",)),
    ("a%2Bb", ("a+b",)),
    ("100%25", ("100%",)),
    ("x.y", ("x.y",)),
    ("%C3%BCber%1Fq+3", ("\u00fcber", "q 3")),
    ("a%1Fsales+dept%1Fa%2Bb%1F100%25%1Fx.y", ("a", "sales dept", "a+b", "100%", "x.y")),
    ("", ()),
]


@pytest.mark.parametrize(("encoded", "levels"), JAVA_ENCODED)
def test_parent_namespace_is_form_decoded(encoded: str, levels: tuple[str, ...]) -> None:
    entity = DroppedEntity(id=1, name="t", internal_properties={"parent-namespace": encoded})
    assert table_identifier(entity) == TableIdentifier(levels, "t")


def test_children_name_the_namespace_polaris_meant(local_warehouse: Warehouse) -> None:
    """A namespace level with a space, a plus, a percent sign and a dot: every
    child's tableId carries the decoded levels."""
    wh = local_warehouse
    table = wh.build("t", appends=1)
    task = task_row(
        recorded_drop_task(
            table.metadata_location,
            internal_properties={"storageLocation": table.location()},
            parent_namespace="sales+dept%1Fa%2Bb%1F100%25%1Fx.y",
        )
    )
    created: list[NewTask] = []

    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        created.extend(children)
        return children

    ctx = CleanupContext(task=task, resolver=wh.resolver, config=wh.config, create_children=create)
    result = run_cleanup(ctx)

    assert result.ok and created
    expected = TableIdentifier(("sales dept", "a+b", "100%", "x.y"), "t")
    for child in created:
        if child.properties["taskType"] == "2":
            assert decode_manifest_cleanup(child.properties["data"]).table_id == expected
        else:
            assert decode_batch_cleanup(child.properties["data"]).table_id == expected
        assert json.loads(child.properties["data"])["tableId"]["namespace"] == [
            "sales dept",
            "a+b",
            "100%",
            "x.y",
        ]
