"""Failures that cannot heal are dead-lettered at once; transient ones back off."""

from __future__ import annotations

import json
from pathlib import Path

from builders.tasks import batch_task, dropped_entity_json
from polaris_pipeline.errors import (
    GuardRefusal,
    PayloadError,
    StorageError,
    is_permanent,
)
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, Prop, TaskState


def _task(realm: str, task_type: str, data: str, internal: dict[str, str] | None = None) -> NewTask:
    task = batch_task(realm, internal=internal)
    task.properties.update({Prop.TASK_TYPE: task_type, Prop.DATA: data})
    return task


def _sweep_once(store: Metastore) -> list[Status]:
    with Runner(store, run_id="run-1") as runner:
        return [o.status for o in sweep_tasks(runner, ["r"])]


def test_classification() -> None:
    assert is_permanent(PayloadError("bad"))
    assert is_permanent(GuardRefusal("file:///x", "outside"))
    assert not is_permanent(StorageError("timeout"))
    assert not is_permanent(OSError("disk"))
    assert not is_permanent(RuntimeError("bug"))


def test_undecodable_payload_is_dead_after_one_attempt(metastore: Metastore) -> None:
    bad = _task("r", "3", "{not json")
    metastore.insert_tasks([bad])
    with Runner(metastore, run_id="run-1") as runner:
        outcomes = sweep_tasks(runner, ["r"])
    assert [(o.status, o.permanent) for o in outcomes] == [(Status.DEAD, True)]
    row = metastore.get_task("r", bad.id)
    assert row is not None
    assert row.attempt_count == 1 and row.status == "dead" and row.failure_permanent
    assert row.properties[Prop.PERMANENT] == "true"
    assert row.last_error is not None and "not JSON" in row.last_error
    assert row.next_attempt_ms is None and row.properties[Prop.RUN_ID] == "run-1"
    _, rows = metastore.tasks_with_state(["r"])
    assert [s for _, s in rows] == [TaskState.DEAD]
    assert metastore.lease_available("again", 10) == []


def test_unknown_task_type_and_wrong_entity_are_dead_at_once(metastore: Metastore) -> None:
    unknown = _task("r", "9", "{}")
    # Spaced JSON (never Jackson's) with typeCode 3 is not recognised as unhandled:
    # the decoder refuses it, permanently.
    role = _task("r", "1", dropped_entity_json(typeCode=3))
    no_type_code = _task("r", "1", json.dumps({"id": 1, "name": "t", "subTypeCode": 2}))
    metastore.insert_tasks([unknown, role, no_type_code])
    assert _sweep_once(metastore) == [Status.DEAD] * 3
    for task, words in (
        (unknown, "unknown taskType"),
        (role, "typeCode is 3"),
        (no_type_code, "no typeCode"),
    ):
        row = metastore.get_task("r", task.id)
        assert row is not None and row.failure_permanent and row.attempt_count == 1
        assert row.last_error is not None and words in row.last_error


def test_guard_refusal_is_permanent(metastore: Metastore, tmp_path: Path) -> None:
    root = tmp_path / "wh" / "ns" / "t"
    neighbour = tmp_path / "wh" / "ns" / "other" / "f.parquet"
    neighbour.parent.mkdir(parents=True)
    neighbour.write_bytes(b"live")
    task = batch_task("r", [neighbour.as_uri()], internal={"storageLocation": root.as_uri()})
    metastore.insert_tasks([task])
    assert _sweep_once(metastore) == [Status.DEAD]
    row = metastore.get_task("r", task.id)
    assert row is not None and row.failure_permanent and row.status == "dead"
    assert row.last_error is not None and "guard refused" in row.last_error
    assert neighbour.read_bytes() == b"live"


def test_transient_storage_failure_backs_off(metastore: Metastore, tmp_path: Path) -> None:
    """Storage that cannot be read now (a path through a file: stat fails with
    ENOTDIR) may be readable later: backoff, not dead."""
    root = tmp_path / "wh" / "ns" / "t"
    root.mkdir(parents=True)
    (root / "metadata").write_bytes(b"a file where a directory should be")
    stuck = root / "metadata" / "v1.metadata.json"
    task = batch_task("r", [stuck.as_uri()], internal={"storageLocation": root.as_uri()})
    metastore.insert_tasks([task])
    now = metastore.now_ms()
    assert _sweep_once(metastore) == [Status.FAILED]
    row = metastore.get_task("r", task.id)
    assert row is not None
    assert row.status == "failed" and not row.failure_permanent
    assert Prop.PERMANENT not in row.properties
    assert row.next_attempt_ms is not None and row.next_attempt_ms > now
    assert row.last_error is not None and "cannot stat" in row.last_error
    _, rows = metastore.tasks_with_state(["r"])
    assert [s for _, s in rows] == [TaskState.BACKING_OFF]


def test_requeue_clears_the_permanent_mark(metastore: Metastore) -> None:
    bad = _task("r", "3", "{not json")
    metastore.insert_tasks([bad])
    assert _sweep_once(metastore) == [Status.DEAD]
    assert metastore.requeue("r", bad.id) is TaskState.ORPHANED
    row = metastore.get_task("r", bad.id)
    assert row is not None and not row.failure_permanent and row.attempt_count == 0


def test_a_transient_failure_after_a_permanent_one_clears_the_mark(
    metastore: Metastore, tmp_path: Path
) -> None:
    """The mark describes the last failure only."""
    root = tmp_path / "wh" / "ns" / "t"
    root.mkdir(parents=True)
    (root / "data").write_bytes(b"not a directory")
    stuck = root / "data" / "d.parquet"
    task = batch_task("r", [stuck.as_uri()], internal={"storageLocation": root.as_uri()})
    task.properties.update({Prop.PERMANENT: "true", Prop.STATUS: "requeued"})
    metastore.insert_tasks([task])
    assert _sweep_once(metastore) == [Status.FAILED]
    row = metastore.get_task("r", task.id)
    assert row is not None and not row.failure_permanent
