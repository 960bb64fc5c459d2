"""``gc.enabled`` as Iceberg reads it: Java's ``Boolean.parseBoolean``.

Garbage collection is on only when the property is absent or equals ``true``
ignoring case; every other spelling keeps the content files. Each spelling is
tried in each place the catalog or the table can carry it: the dropped entity's
properties, the table metadata's properties, the task's internal properties, and
a MANIFEST_FILE_CLEANUP task's internal properties (Polaris's own child).
"""

from __future__ import annotations

import base64
import json

import pytest

from polaris_pipeline.cleanup.gc_policy import gc_disabling_value, gc_enabled
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.manifest_codec import encode_manifest_file, manifest_ref_from_pyiceberg
from polaris_pipeline.tasks.model import NewTask, Prop
from tests.support.iceberg import Warehouse, recorded_drop_task, table_files
from tests.support.table_metadata import content_files

KEEP = ["false", "FALSE", "0", "no", " true", "true ", ""]
DELETE = ["true", "TRUE", "tRuE", None]  # None: the property is absent


@pytest.mark.parametrize("value", KEEP)
def test_every_other_spelling_turns_gc_off(value: str) -> None:
    assert not gc_enabled(value)
    assert gc_disabling_value({"gc.enabled": value}) is not None


@pytest.mark.parametrize("value", DELETE)
def test_absent_or_true_ignoring_case_keeps_gc_on(value: str | None) -> None:
    assert gc_enabled(value)
    assert gc_disabling_value({} if value is None else {"gc.enabled": value}, None, {}) is None


def test_any_one_source_turning_gc_off_is_enough() -> None:
    assert gc_disabling_value({"gc.enabled": "true"}, {"gc.enabled": "no"}) is not None
    # Java folds no non-ASCII character onto the letters of "true".
    assert not gc_enabled("\u0074\u0072\u0075\u0065\u0301")
    assert not gc_enabled("TRUE\u0130")


def _purge(store: Metastore, wh: Warehouse, task: NewTask) -> None:
    store.insert_tasks([task])
    with Runner(store, wh.config, resolver=wh.resolver) as runner:
        outcomes = sweep_tasks(runner, [task.realm_id])
    assert outcomes and all(o.ok for o in outcomes), [o.error for o in outcomes]


@pytest.mark.parametrize("where", ["entity", "metadata", "task"])
@pytest.mark.parametrize("value", [*KEEP, *DELETE])
def test_table_purge_follows_gc_enabled(
    local_warehouse: Warehouse, store: Metastore, where: str, value: str | None
) -> None:
    wh = local_warehouse
    setting = {} if value is None else {"gc.enabled": value}
    table = wh.build("t", appends=1, properties=setting if where == "metadata" else {})
    assert (table.metadata.properties.get("gc.enabled") == value) or where != "metadata"
    oracle = table_files(table)
    content = content_files(table)
    assert content
    before = wh.files()
    internal = {
        k: v for k, v in table.properties.items() if k != "gc.enabled"
    }  # only the source under test carries it
    internal["storageLocation"] = table.location()
    if where == "task":
        internal.update(setting)
    task = recorded_drop_task(
        table.metadata_location,
        entity_properties=setting if where == "entity" else {},
        internal_properties=internal,
    )

    _purge(store, wh, task)

    gone = before - wh.files()
    if value in KEEP:
        assert all(wh.exists(p) for p in content)
        assert gone == oracle - content
    else:
        assert gone == oracle


@pytest.mark.parametrize("value", [*KEEP, *DELETE])
def test_polaris_manifest_task_follows_gc_enabled(
    local_warehouse: Warehouse, store: Metastore, value: str | None
) -> None:
    """A MANIFEST_FILE_CLEANUP row (as Polaris writes it) copies the parent's internal
    properties, so its gc.enabled is there."""
    wh = local_warehouse
    table = wh.build("t", appends=1)
    mf = next(iter(table.current_snapshot().manifests(table.io)))  # type: ignore[union-attr]
    files = [e.data_file.file_path for e in mf.fetch_manifest_entry(table.io, False)]
    data = json.dumps(
        {
            "tableId": {"namespace": ["ns"], "name": "t"},
            "manifestFileData": base64.b64encode(
                encode_manifest_file(manifest_ref_from_pyiceberg(mf))
            ).decode(),
        }
    )
    internal = {"storageLocation": table.location()}
    if value is not None:
        internal["gc.enabled"] = value
    task = NewTask(
        "POLARIS",
        new_entity_id(),
        "entityCleanup_1_m",
        {Prop.TASK_TYPE: "2", Prop.DATA: data},
        internal,
    )

    _purge(store, wh, task)

    assert not wh.exists(mf.manifest_path)
    assert files and all(wh.exists(p) for p in files) is (value in KEEP)
    assert any(wh.exists(p) for p in files) is (value in KEEP)
