"""What a run of ``polaris_task_job`` tells an operator: its step metadata and log lines.

Real runs on a real Dagster instance (SQLite storage), requested by the sweeper
sensor over a real metastore (PostgreSQL and SQLite) and pyiceberg tables on
local files. Each done step must say which task and realm it ran, what it
deleted and freed, what the guard refused and which lease it held; a failed
step must say what failed in one line before its traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from dagster import DagsterInstance, SensorResult, build_sensor_context
from dagster._core.events import DagsterEvent

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask
from tests.support.dagster import deployed_sensor, sweeper_resources
from tests.support.iceberg import Warehouse, table_files

OLD_MS = 10 * 60_000
LEASE_KEYS = {
    "task",
    "realm",
    "task id",
    "type",
    "lease executor",
    "lease attempt",
    "lease started",
}
GROUP_KEYS = {
    "realm",
    "lease executor",
    "child tasks",
    "by status",
    "files deleted",
    "files already gone",
    "bytes freed",
    "refused paths",
    "tasks",
}
DONE_KEYS = LEASE_KEYS | {
    "status",
    "files deleted",
    "files already gone",
    "bytes freed",
    "refused paths",
    "child tasks",
}


def _resource(store: Metastore) -> PolarisMetastoreResource:
    return PolarisMetastoreResource(
        url=store.url.render_as_string(hide_password=False),
        lease_timeout_ms=store.policy.lease_timeout_ms,
        grace_ms=store.policy.grace_ms,
        max_attempts=store.policy.max_attempts,
    )


def _sweep_and_run(
    store: Metastore, instance: DagsterInstance, storage: PolarisStorageResource
) -> Any:
    """One sensor tick, as the daemon evaluates it, then its one run."""
    metastore = _resource(store)
    with build_sensor_context(
        instance=instance,
        resources=sweeper_resources(
            metastore, SweeperSettings(interval_seconds=0), storage=storage
        ),
    ) as context:
        evaluation = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(evaluation, SensorResult), evaluation
    [request] = evaluation.run_requests or []
    return polaris_task_job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources={"metastore": metastore, "storage": storage},
        raise_on_error=False,
    )


def _local(uri: str) -> Path:
    return Path(unquote(urlparse(uri).path))


def _values(event: DagsterEvent) -> dict[str, Any]:
    return {k: v.value for k, v in event.step_output_data.metadata.items()}


def _messages(instance: DagsterInstance, run_id: str) -> list[str]:
    return [entry.user_message for entry in instance.all_logs(run_id)]


def test_every_done_step_says_task_realm_deletions_bytes_refusals_and_lease(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    victim = local_warehouse.build("victim", partitioned=True, with_deletes=True)
    existing = {f for f in table_files(victim) if local_warehouse.exists(f)}
    sizes = {f: _local(f).stat().st_size for f in existing}
    task = built_tasks.drop_table_task(
        victim, realm_id="POLARIS", create_timestamp=metastore.now_ms() - OLD_MS
    )
    metastore.insert_tasks([task])
    storage = PolarisStorageResource(allowed_prefixes=[local_warehouse.uri])

    result = _sweep_and_run(metastore, instance, storage)

    assert result.success
    run_executor = f"polaris-pipeline:run:{result.run_id}"
    outputs = [
        e
        for e in result.all_events
        if e.is_successful_output
        and e.step_key.startswith(("run_polaris_task", "run_"))
        and e.step_output_data.output_name in ("outcome", "result")
    ]
    root_event = next(e for e in outputs if e.step_key == "run_polaris_task")
    groups = [e for e in outputs if e is not root_event]
    # The root step and the group steps of each stage (manifests, batches, metadata file).
    assert len(groups) >= 3
    root = _values(root_event)
    assert root.keys() >= DONE_KEYS, sorted(root)
    assert root["task id"] == str(task.id) and root["type"] == "entity_cleanup_scheduler"
    assert root["status"] == "done" and root["realm"] == "POLARIS"
    assert root["lease executor"] == run_executor and root["lease attempt"] == 1
    assert root["lease started"].startswith("20")  # ISO time, database clock
    assert root["files deleted"] == 0  # the children delete, the metadata file last
    total_deleted = total_freed = children_reported = 0
    for event in groups:
        meta = _values(event)
        assert meta.keys() >= GROUP_KEYS, (event.step_key, sorted(meta))
        assert meta["realm"] == "POLARIS"
        assert meta["lease executor"] == run_executor
        assert meta["refused paths"] == 0
        assert isinstance(meta["bytes freed"], int) and meta["bytes freed"] > 0
        tasks = meta["tasks"]
        assert len(tasks) == meta["child tasks"] >= 1
        assert meta["by status"] == {"done": len(tasks)}
        assert all(t["status"] == "done" and t["lease attempt"] == 1 for t in tasks)
        assert sum(t["files deleted"] for t in tasks) == meta["files deleted"]
        assert sum(t["bytes freed"] for t in tasks) == meta["bytes freed"]
        children_reported += len(tasks)
        total_deleted += meta["files deleted"]
        total_freed += meta["bytes freed"]
        sample = meta.get("deleted paths (sample)") or []
        assert len(sample) == min(meta["files deleted"], 20)
        assert all(p in existing and not local_warehouse.exists(p) for p in sample)
    assert root["child tasks"] == children_reported >= 3
    # Together the steps deleted exactly the files the table had, and say how much they freed.
    assert total_deleted == len(existing)
    assert total_freed == sum(sizes.values())

    # The log says the same in words, with what was deleted, at INFO (shown by default).
    messages = _messages(instance, result.run_id)
    done_lines = [m for m in messages if " done: " in m]
    assert len(done_lines) == 1 + children_reported  # one per task
    assert all(
        "file(s) deleted" in m and "freed" in m and "refused by the guard" in m for m in done_lines
    )
    assert all(f"lease {run_executor} attempt 1" in m for m in done_lines)
    listed = [m for m in messages if m.startswith("deleted (")]
    named = {p.strip() for m in listed for p in m.split("): ", 1)[1].split(", ")}
    assert named and named <= existing
    assert all(len(m) < 400 for m in done_lines)
    # The children are the run's own from their creation: no adoption line for each
    # (every line is an event the run stores).
    assert not any("adopted this lineage" in m for m in messages)


def test_a_guard_refusal_fails_with_one_line_and_the_refused_paths(
    metastore: Metastore, tmp_path: Path, instance: DagsterInstance
) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    (table / "metadata").mkdir(parents=True)
    inside = table / "metadata" / "snap-1.avro"
    inside.write_bytes(b"m" * 64)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    task: NewTask = batch_task(
        "POLARIS",
        [str(inside), str(outside)],
        internal={"storageLocation": f"file://{table}"},
        create_timestamp=metastore.now_ms() - OLD_MS,
    )
    metastore.insert_tasks([task])

    result = _sweep_and_run(metastore, instance, PolarisStorageResource())

    assert not result.success
    # The guard kept the outside file; the batch still deleted what it admitted.
    assert outside.read_text() == "keep me" and not inside.exists()
    [failure] = [e for e in result.all_events if e.is_step_failure]
    data = failure.step_failure_data
    user = data.user_failure_data
    assert user is not None and user.description is not None
    # One line that says what failed...
    assert "\n" not in user.description
    assert user.description.startswith("guard refused 1 path(s), first ")
    assert str(outside) in user.description
    # ...and it is the first line of the error the UI shows above the stack trace.
    first_line = data.error.message.strip().splitlines()[0]
    assert first_line.endswith(user.description), first_line
    assert data.error.stack  # the traceback is still there, below

    meta = {k: v.value for k, v in user.metadata.items()}
    assert meta.keys() >= LEASE_KEYS, sorted(meta)
    assert meta["realm"] == "POLARIS" and meta["task id"] == str(task.id)
    assert meta["lease executor"] == f"polaris-pipeline:run:{result.run_id}"
    assert meta["lease attempt"] == 1
    # A guard refusal cannot heal by retrying: dead-lettered at once.
    assert meta["status"] == "dead" and meta["permanent"] is True
    assert meta["files deleted"] == 1 and meta["bytes freed"] == 64
    assert meta["refused paths"] == 1
    [refusal] = meta["refused paths (sample)"]
    assert refusal["path"] == str(outside) and refusal["reason"]
    assert meta["dagster run id"] == result.run_id and "next attempt" not in meta

    row = metastore.get_task("POLARIS", task.id)
    assert row is not None and row.last_error == user.description
    errors = [m for m in _messages(instance, result.run_id) if " failed (dead-lettered" in m]
    assert len(errors) == 1 and user.description in errors[0]
