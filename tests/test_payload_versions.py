"""Rows we write are rows the running Polaris release reads; namespaces as Polaris encodes them.

- BATCH_FILE_CLEANUP children carry ``type`` only for Polaris 1.7+ (1.0-1.6 fail
  to decode it; 1.7+ fail without it). The release is the setting (or the realm's
  override), else inferred: a BATCH row Polaris wrote with ``type`` means 1.7+,
  else the schema version's floor (v5: 1.7+; v4: 1.4, no ``type``; none: 1.0).
  The upgraded deployment, a 1.7 server on a v4 database, is the case that
  the schema version alone got wrong.
- ``parent-namespace`` levels are Java ``URLEncoder`` form-encoded, joined by ``%1F``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from builders.tasks import batch_task, task_row
from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import execute_tree
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskType
from polaris_pipeline.tasks.payloads import (
    BATCH_TYPE_TABLE_METADATA,
    BatchCleanupPayload,
    DroppedEntity,
    TableIdentifier,
    decode_batch_cleanup,
    decode_manifest_cleanup,
    encode_batch_cleanup,
    table_identifier,
)
from tests.support.iceberg import Warehouse, drop_task_row, recorded_drop_task, table_files
from tests.support.metastore import pipeline_store
from tests.support.tasks import set_schema_version

# -- the batch payload's type, per schema version --------------------------------------


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
        rest = [o for child in parent.children for o in execute_tree(runner, child)]

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


def _batch_children(
    wh: Warehouse, store: Metastore, realm: str = "POLARIS", table_name: str = "t"
) -> list[dict[str, object]]:
    """Run one dropped table's task in ``realm``; the ``data`` of the BATCH children it wrote."""
    table = wh.build(table_name, appends=1)
    oracle = table_files(table)
    before = wh.files()
    parent_task = drop_task_row(table)
    store.insert_tasks(
        [
            NewTask(
                realm,
                parent_task.id,
                parent_task.name,
                parent_task.properties,
                parent_task.internal_properties,
            )
        ]
    )
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        (lease,) = runner.lease(1, [realm])
        parent = runner.execute(lease)
        rows = [store.get_task(realm, c.task_id) for c in parent.children]
        rest = [o for child in parent.children for o in execute_tree(runner, child)]
    assert parent.ok and rows and all(r is not None for r in rows)
    # Our own runner reads either form: the table is gone, exactly.
    assert all(o.ok for o in rest), [o.error for o in rest]
    assert before - wh.files() == oracle
    batches = [
        json.loads(r.properties["data"])
        for r in rows
        if r is not None and r.task_type() == TaskType.BATCH_FILE_CLEANUP
    ]
    assert batches
    return batches


def _polaris_batch_row(store: Metastore, realm: str, *, typed: bool, ours: bool = False) -> None:
    """A BATCH row as Polaris (or, ``ours``, this project) wrote it, dead-lettered so the
    sweep leaves it alone: evidence only."""
    extra = {Prop.STATUS: "dead", Prop.EXECUTOR: "polaris-other:x", Prop.ATTEMPT_COUNT: "1"}
    if ours:
        extra[Prop.CREATED_BY] = "polaris-pipeline"
    task = batch_task(realm, ["file:///nowhere/ns/t/metadata/old.json"], extra=extra)
    if not typed:
        data = json.loads(task.properties[Prop.DATA])
        del data["type"]
        task.properties[Prop.DATA] = json.dumps(data, separators=(",", ":"))
    store.insert_tasks([task])


def _store(url: str, schema_version: int, **policy: object) -> Metastore:
    return pipeline_store(
        url,
        TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, **policy),  # type: ignore[arg-type]
        schema_version=schema_version,
    )


def test_an_upgraded_17_on_a_v4_database_configured_gets_type(
    local_warehouse: Warehouse, metastore_url: str
) -> None:
    store = _store(metastore_url, 4, polaris_version="1.7")
    try:
        batches = _batch_children(local_warehouse, store)
    finally:
        store.dispose()
    assert all(b.get("type") == "TABLE_METADATA" for b in batches)


def test_an_upgraded_17_on_a_v4_database_is_inferred_from_polaris_rows(
    local_warehouse: Warehouse, metastore_url: str
) -> None:
    """Release unset: an old untyped row (1.4's orphan) and a typed one (1.7's): 1.7+."""
    store = _store(metastore_url, 4)
    try:
        _polaris_batch_row(store, "POLARIS", typed=False)
        _polaris_batch_row(store, "POLARIS", typed=True)
        batches = _batch_children(local_warehouse, store)
    finally:
        store.dispose()
    assert all(b.get("type") == "TABLE_METADATA" for b in batches)


@pytest.mark.parametrize("evidence", ["none", "untyped polaris row", "typed row of ours"], ids=str)
def test_a_v4_database_without_evidence_of_17_gets_no_type(
    local_warehouse: Warehouse, metastore_url: str, evidence: str
) -> None:
    """Inferred 1.4 (v4's floor): our own typed children are no evidence of the release."""
    store = _store(metastore_url, 4)
    try:
        if evidence == "untyped polaris row":
            _polaris_batch_row(store, "POLARIS", typed=False)
        if evidence == "typed row of ours":
            _polaris_batch_row(store, "POLARIS", typed=True, ours=True)
        batches = _batch_children(local_warehouse, store)
    finally:
        store.dispose()
    assert all("type" not in b for b in batches)


def test_a_realm_override_of_the_release_decides_for_that_realm_only(
    local_warehouse: Warehouse, metastore_url: str
) -> None:
    overrides = {"NEW": RealmOverride(polaris_version="1.7.1")}
    store = _store(metastore_url, 4, polaris_version="1.4", realm_overrides=overrides)
    try:
        upgraded = _batch_children(local_warehouse, store, realm="NEW")
        # A typed Polaris row in the old realm does not beat its configured release.
        _polaris_batch_row(store, "POLARIS", typed=True)
        old = _batch_children(local_warehouse, store, realm="POLARIS", table_name="t2")
    finally:
        store.dispose()
    assert all(b.get("type") == "TABLE_METADATA" for b in upgraded)
    assert all("type" not in b for b in old)


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
