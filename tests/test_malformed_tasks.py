"""Every malformed payload is a clear error recorded on that task only; the sweep goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders.tasks import TABLE_ID, batch_task, dropped_entity_json, manifest_task_data
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.manifest_codec import encode_manifest_file
from polaris_pipeline.tasks.model import NewTask, Prop
from tests.support.tasks import insert_raw_task, manifest_ref

GOOD_MANIFEST = encode_manifest_file(manifest_ref())

# (case, properties, the words the recorded error must contain)
CASES: list[tuple[str, dict[str, str], str]] = [
    ("unknown task type", {Prop.TASK_TYPE: "9", Prop.DATA: "{}"}, "unknown taskType '9'"),
    ("task type not a number", {Prop.TASK_TYPE: "purge", Prop.DATA: "{}"}, "unknown taskType"),
    ("no task type", {Prop.DATA: "{}"}, "no taskType"),
    ("no data", {Prop.TASK_TYPE: "3"}, "no data"),
    ("data not JSON", {Prop.TASK_TYPE: "1", Prop.DATA: "{oops"}, "not JSON"),
    ("data a JSON array", {Prop.TASK_TYPE: "3", Prop.DATA: "[1]"}, "array"),
    (
        "entity of another type",
        {Prop.TASK_TYPE: "1", Prop.DATA: dropped_entity_json(typeCode=6)},
        "typeCode",
    ),
    (
        "no metadata-location",
        {Prop.TASK_TYPE: "1", Prop.DATA: dropped_entity_json(internalProperties="{}")},
        "metadata-location",
    ),
    (
        "internal properties not JSON",
        {Prop.TASK_TYPE: "1", Prop.DATA: dropped_entity_json(internalProperties="{bad")},
        "internalProperties",
    ),
    ("entity truncated", {Prop.TASK_TYPE: "1", Prop.DATA: dropped_entity_json()[:40]}, "not JSON"),
    (
        "base64 garbage",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data("!!!not-base64")},
        "base64",
    ),
    (
        "wrong magic",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data(b"\x00\x01" + GOOD_MANIFEST[2:])},
        "magic",
    ),
    (
        "manifest not Avro",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data(GOOD_MANIFEST[:2] + b"\x00\x05hello")},
        "schema",
    ),
    (
        "datum truncated",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data(GOOD_MANIFEST[:-6])},
        "datum",
    ),
    (
        "no manifestFileData",
        {Prop.TASK_TYPE: "2", Prop.DATA: json.dumps({"tableId": TABLE_ID})},
        "manifestFileData",
    ),
    (
        "no tableId",
        {Prop.TASK_TYPE: "3", Prop.DATA: json.dumps({"batchFiles": [], "type": "TABLE_METADATA"})},
        "tableId",
    ),
    (
        "batchFiles not a list",
        {Prop.TASK_TYPE: "3", Prop.DATA: json.dumps({"tableId": TABLE_ID, "batchFiles": "x"})},
        "batchFiles",
    ),
    (
        "batch path not a string",
        {Prop.TASK_TYPE: "3", Prop.DATA: json.dumps({"tableId": TABLE_ID, "batchFiles": [7]})},
        "batchFiles",
    ),
    (
        "batch path with NUL",
        {
            Prop.TASK_TYPE: "3",
            Prop.DATA: json.dumps({"tableId": TABLE_ID, "batchFiles": ["a\x00b"]}),
        },
        "NUL",
    ),
]


def _insert_malformed(store: Metastore, props: dict[str, str]) -> int:
    task_id = new_entity_id()
    store.insert_tasks(
        [NewTask("r1", task_id, f"bad_{task_id}", props, {"storageLocation": "file:///wh/ns/t"})]
    )
    return task_id


@pytest.mark.parametrize(("case", "props", "expected"), CASES, ids=[c[0] for c in CASES])
def test_malformed_payload_recorded_on_that_task_only(
    metastore: Metastore, tmp_path: Path, case: str, props: dict[str, str], expected: str
) -> None:
    table = tmp_path / "ns" / "t"
    table.mkdir(parents=True)
    good_files = [table / f"f{i}" for i in range(2)]
    for f in good_files:
        f.write_text("x")
    location = {"storageLocation": str(table)}
    before = batch_task("r1", [str(good_files[0])], internal=location)
    metastore.insert_tasks([before])
    bad_id = _insert_malformed(metastore, props)
    after = batch_task("r1", [str(good_files[1])], internal=location)
    metastore.insert_tasks([after])

    with Runner(metastore) as runner:
        outcomes = {o.lease.task_id: o for o in sweep_tasks(runner, ["r1"])}

    assert outcomes[before.id].status is Status.DONE
    assert outcomes[after.id].status is Status.DONE
    assert not any(f.exists() for f in good_files)
    bad = outcomes[bad_id]
    # Permanent: dead-lettered at once, marked so (no hour of retries).
    assert bad.status is Status.DEAD and bad.permanent
    assert bad.error is not None and expected in bad.error, bad.error
    assert f"r1/{bad_id}" in bad.error  # the error names the task
    row = metastore.get_task("r1", bad_id)
    assert row is not None  # never dropped: its work is not done
    assert row.last_error == bad.error and row.status == "dead" and row.failure_permanent
    assert row.properties.get(Prop.DATA) == props.get(Prop.DATA)  # payload kept as it was


def test_properties_not_a_json_object_recorded_and_original_kept(
    metastore: Metastore, tmp_path: Path
) -> None:
    good = tmp_path / "t" / "f"
    good.parent.mkdir()
    good.write_text("x")
    metastore.insert_tasks(
        [batch_task("r1", [str(good)], internal={"storageLocation": str(good.parent)})]
    )
    pg = metastore.dialect == "postgresql"
    raw = "not json at all {" if not pg else '["an", "array"]'
    insert_raw_task(metastore, "r1", 5, "weird; DROP TABLE x", json.loads(raw) if pg else raw)
    with Runner(metastore) as runner:
        outcomes = {o.lease.task_id: o for o in sweep_tasks(runner, ["r1"])}
    assert not good.exists()
    weird = outcomes[5]
    assert weird.status is Status.DEAD and weird.permanent and weird.error is not None
    assert "not a JSON object" in weird.error
    row = metastore.get_task("r1", 5)
    assert row is not None and row.last_error == weird.error
    kept = row.properties[Prop.ORIGINAL]
    assert (json.loads(kept) == json.loads(raw)) if pg else kept == raw
