"""``polaris_task_job`` run for real: Dagster instances (SQLite and PostgreSQL storage),
a real metastore, pyiceberg tables on local files and on the moto S3 server.

Runs are requested by the sweeper sensor, as in production, then executed.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    JobDefinition,
    RetryPolicy,
    RunRequest,
    SensorResult,
    build_sensor_context,
    execute_job,
    reconstructable,
)

from builders import tables as built_tables
from builders.postgres import throwaway_database
from builders.tasks import batch_task
from polaris_pipeline.dagster.contract import run_config_for
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
)
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.dagster.task_job import (
    MULTIPROCESS_EXECUTOR,
    build_polaris_task_job,
    polaris_task_job,
)
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.model import NewTask, Prop
from tests.support.dagster import (
    child_summaries,
    dagster_postgres_url,
    metastore_resource,
    temp_instance,
)
from tests.support.iceberg import Warehouse, table_files
from tests.support.table_metadata import content_files
from tests.support.task_job import OLD_MS, drop, step_events, storage_resource, sweep
from tests.support.tasks import purge_child

FAST_RETRIES = RetryPolicy(max_retries=2, delay=0.05)


# -- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def dagster_pg_url() -> Iterator[str]:
    """A PostgreSQL database for Dagster's own storage, created and dropped by this session."""
    with throwaway_database("pp_dagster") as name:
        yield dagster_postgres_url(name)


@pytest.fixture(params=["sqlite-instance", "postgres-instance"])
def instance(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DagsterInstance]:
    """A Dagster instance whose run and event storage is SQLite files, or PostgreSQL."""
    home = tmp_path / "dagster_home"
    if request.param == "sqlite-instance":
        inst = temp_instance(home)
    else:
        inst = temp_instance(home, postgres_url=request.getfixturevalue("dagster_pg_url"))
    with inst:
        yield inst


@pytest.fixture
def sqlite_instance(tmp_path: Path) -> Iterator[DagsterInstance]:
    with temp_instance(tmp_path / "dagster_home") as inst:
        yield inst


# -- helpers -----------------------------------------------------------------------


def execute(
    request: RunRequest,
    instance: DagsterInstance,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    job: JobDefinition = polaris_task_job,
) -> Any:
    return job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources={"metastore": metastore, "storage": storage},
        raise_on_error=False,
    )


def messages(instance: DagsterInstance, run_id: str) -> list[str]:
    return [entry.user_message for entry in instance.all_logs(run_id)]


def files_deleted(result: Any) -> int:
    total = 0
    for event in result.all_events:
        if event.is_successful_output:
            value = event.step_output_data.metadata.get("files deleted")
            total += int(value.value) if value is not None else 0
    return total


def assert_table_purged(
    warehouse: Warehouse, victim_files: set[str], neighbour_files: Sequence[str]
) -> None:
    left = sorted(f for f in victim_files if warehouse.exists(f))
    assert not left, f"{len(left)} file(s) of the dropped table remain, e.g. {left[:3]}"
    missing = sorted(f for f in neighbour_files if not warehouse.exists(f))
    assert not missing, f"neighbour table lost {missing[:3]}"


# -- table cleanup, end to end -----------------------------------------------------


@pytest.mark.slow
def test_table_cleanup_runs_children_in_order(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    victim = local_warehouse.build(
        "victim", partitioned=True, with_deletes=True, with_statistics=True
    )
    neighbour = local_warehouse.build("neighbour", appends=1)
    victim_files = table_files(victim)
    existing = {f for f in victim_files if local_warehouse.exists(f)}
    neighbour_files = sorted(table_files(neighbour))
    task = drop(metastore, victim)
    resource = metastore_resource(metastore)
    storage = storage_resource(local_warehouse)

    [request] = sweep(resource, instance)
    assert request.run_key == f"POLARIS:{task.id}:1"
    result = execute(request, instance, resource, storage)

    assert result.success
    assert_table_purged(local_warehouse, victim_files, neighbour_files)
    assert metastore.list_tasks() == []  # the task and every child it created
    assert files_deleted(result) == len(existing)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.SUCCESS
    assert run.tags["polaris/task_id"] == str(task.id)
    assert run.tags["dagster/max_retries"] == "2"

    root = result.output_for_node("run_polaris_task", "outcome")
    assert root["status"] == "done" and root["deleted"] == 0  # the children delete
    manifests = child_summaries(result, "run_manifest_children")
    later = child_summaries(result, "run_metadata_children")
    [final] = child_summaries(result, "run_current_metadata_children")
    assert manifests and later
    assert {o["task_type"] for o in manifests} == {"manifest_file_cleanup"}
    assert {o["task_type"] for o in later} == {"batch_file_cleanup"}
    assert final["task_type"] == "batch_file_cleanup" and final["deleted"] == 1
    assert root["children"] == len(manifests) + len(later) + 1
    # Grouped: 20 children to a step by default.
    steps = result.output_for_node("run_manifest_children")
    assert len(steps) == -(-len(manifests) // 20)

    # Each stage finished before the next one started; the metadata file went last.
    events = step_events(instance, result.run_id)

    def first_start(prefix: str) -> float:
        return min(
            ts for kind, key, ts in events if kind == "STEP_START" and key.startswith(prefix)
        )

    def last_success(prefix: str) -> float:
        return max(
            ts for kind, key, ts in events if kind == "STEP_SUCCESS" and key.startswith(prefix)
        )

    assert last_success("run_manifest_children") <= first_start("run_metadata_children")
    assert last_success("run_metadata_children") <= first_start("run_current_metadata_children")
    assert any(
        f"deleted (all): {victim.metadata_location}" in m for m in messages(instance, result.run_id)
    )


@pytest.mark.slow
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_table_cleanup_on_s3(
    metastore: Metastore,
    s3_warehouse: Warehouse,
    moto_server: Any,
    sqlite_instance: DagsterInstance,
) -> None:
    victim = s3_warehouse.build("victim", with_deletes=True, appends=1)
    neighbour = s3_warehouse.build("neighbour", appends=1)
    victim_files = table_files(victim)
    neighbour_files = sorted(table_files(neighbour))
    drop(metastore, victim)
    resource = metastore_resource(metastore)
    storage = storage_resource(s3_warehouse, moto_server)

    [request] = sweep(resource, sqlite_instance)
    result = execute(request, sqlite_instance, resource, storage)

    assert result.success
    assert_table_purged(s3_warehouse, victim_files, neighbour_files)
    assert metastore.list_tasks() == []
    # No secret leaks into what the run stored.
    text_of_run = "\n".join(messages(sqlite_instance, result.run_id))
    assert moto_server.secret not in text_of_run


def test_table_without_manifest_children_still_runs_its_batches(
    metastore: Metastore, local_warehouse: Warehouse, sqlite_instance: DagsterInstance
) -> None:
    """gc.enabled=false: no manifest child; the manifest stage is empty, the batches still run."""
    victim = local_warehouse.build("victim", appends=1, properties={"gc.enabled": "false"})
    content = content_files(victim)
    drop(metastore, victim)
    resource = metastore_resource(metastore)

    [request] = sweep(resource, sqlite_instance)
    result = execute(request, sqlite_instance, resource, storage_resource(local_warehouse))

    assert result.success
    assert metastore.list_tasks() == []
    children = child_summaries(result, "run_metadata_children")
    assert children and {o["task_type"] for o in children} == {"batch_file_cleanup"}
    # The metadata file is still the last stage, after the batches.
    [final] = child_summaries(result, "run_current_metadata_children")
    assert final["deleted"] == 1 and final["task_type"] == "batch_file_cleanup"
    assert all(local_warehouse.exists(f) for f in content)  # gc disabled: data stays
    assert not local_warehouse.exists(victim.metadata_location)


# -- failures ----------------------------------------------------------------------


def test_failed_task_records_the_run_id_and_the_run_fails_with_one_line(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    task = NewTask(
        realm_id="POLARIS",
        id=new_entity_id(),
        name="entityCleanup_42",
        properties={Prop.TASK_TYPE: "1", Prop.DATA: '{"id": 42, "name": '},
        internal_properties={"storageLocation": "file:///nowhere/ns/t"},
        create_timestamp=metastore.now_ms() - OLD_MS,
    )
    metastore.insert_tasks([task])
    resource = metastore_resource(metastore)

    [request] = sweep(resource, instance)
    result = execute(request, instance, resource, PolarisStorageResource())

    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE
    [failure] = [e for e in result.all_events if e.is_step_failure]
    user = failure.step_failure_data.user_failure_data
    assert user is not None and user.description is not None
    assert "\n" not in user.description
    assert user.description.startswith(f"task POLARIS/{task.id} 'entityCleanup_42': ")
    assert "not JSON" in user.description
    assert user.metadata["dagster run id"].value == result.run_id
    # A permanent failure is not retried by the op's RetryPolicy.
    assert not [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]

    row = metastore.get_task("POLARIS", task.id)
    assert row is not None
    assert row.properties[Prop.RUN_ID] == result.run_id
    # A payload that cannot decode fails the same way every time: dead-lettered at once.
    assert row.status == "dead" and row.last_error == user.description
    assert row.attempt_count == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_transient_failure_is_retried_in_the_run_then_recorded(
    metastore: Metastore, sqlite_instance: DagsterInstance
) -> None:
    """Storage that cannot be reached: the op retries under the same lease, then records."""
    location = "s3://unreachable/wh/ns/t"
    task = batch_task(
        "POLARIS",
        [f"{location}/metadata/snap-1.avro"],
        internal={"storageLocation": location},
        create_timestamp=metastore.now_ms() - OLD_MS,
    )
    metastore.insert_tasks([task])
    resource = metastore_resource(metastore)
    options = {
        "endpoint_url": f"http://127.0.0.1:{_closed_port()}",
        "key": "k",
        "secret": "s",
        "client_kwargs": {"region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
    }
    storage = PolarisStorageResource(locations=[{"prefix": "s3://unreachable", "options": options}])
    job = build_polaris_task_job("polaris_task_job_fast_retries", retry_policy=FAST_RETRIES)

    [request] = sweep(resource, sqlite_instance)
    result = execute(request, sqlite_instance, resource, storage, job=job)

    assert not result.success
    retries = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert len(retries) == FAST_RETRIES.max_retries
    [failure] = [e for e in result.all_events if e.is_step_failure]
    user = failure.step_failure_data.user_failure_data
    assert user is not None and user.description is not None
    assert "\n" not in user.description and "snap-1.avro" in user.description
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None
    # One lease, one recorded failure: every try ran under the sensor's lease.
    assert row.attempt_count == 1
    assert row.status == "failed" and row.properties[Prop.RUN_ID] == result.run_id
    assert row.last_error == user.description


def test_one_failing_child_in_a_group_does_not_stop_the_others(
    metastore: Metastore, local_warehouse: Warehouse, sqlite_instance: DagsterInstance
) -> None:
    """A data file that cannot be deleted fails its manifest child; the rest of the group runs."""
    victim = local_warehouse.build("victim", appends=3)
    drop(metastore, victim)
    blocked = sorted(content_files(victim))[0]
    path = Path(blocked.removeprefix("file://"))
    path.unlink()
    path.mkdir()  # a directory is never deleted: that child's delete fails every time
    resource = metastore_resource(metastore)
    job = build_polaris_task_job("polaris_task_job_fast_retries", retry_policy=FAST_RETRIES)

    [request] = sweep(resource, sqlite_instance)
    result = execute(request, sqlite_instance, resource, storage_resource(local_warehouse), job)

    assert not result.success
    root = result.output_for_node("run_polaris_task", "outcome")
    left = metastore.list_tasks()
    failed = [t for t in left if t.status == "failed"]
    waiting = [t for t in left if t.status != "failed"]
    # Every manifest naming the blocked file failed (it may be named twice: added,
    # then deleted by the overwrite); every other manifest child finished and is gone.
    assert failed and {t.task_type_code for t in failed} == {"2"}
    assert all(blocked in (t.last_error or "") for t in failed)
    # The later stages never started: their children wait, the metadata file is there.
    assert waiting and {t.task_type_code for t in waiting} == {"3"}
    assert local_warehouse.exists(victim.metadata_location)
    assert not any(
        k.startswith(("run_metadata_children", "run_current_metadata_children"))
        for _, k, _ in step_events(sqlite_instance, result.run_id)
    )
    n_manifests = root["children"] - len(waiting)
    assert n_manifests > len(failed) >= 1
    # One group step (default 20 to a step) ran every manifest child, retried, then failed.
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key.startswith("run_manifest_children[")
    assert failure.step_key.endswith(f"_n{n_manifests}]")
    user = failure.step_failure_data.user_failure_data
    assert user is not None and user.description is not None
    assert user.description.startswith(f"{len(failed)} of {n_manifests} child task(s) failed")
    assert blocked in user.description and "\n" not in user.description
    assert {t.id for t in failed} == {
        int(line.split("POLARIS/")[1].split(" ")[0])
        for line in messages(sqlite_instance, result.run_id)
        if "failed (recorded;" in line
    }


# -- leases: taken when the run starts ---------------------------------------------


def local_batch(store: Metastore, tmp_path: Path, n: int = 2) -> tuple[NewTask, list[Path]]:
    """An orphaned BATCH task over ``n`` local files."""
    root = tmp_path / "wh" / "ns" / "t"
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    files = [root / "metadata" / f"snap-{uuid.uuid4().hex[:8]}.avro" for _ in range(n)]
    for f in files:
        f.write_bytes(b"x" * 10)
    task = batch_task(
        "POLARIS",
        [f"file://{f}" for f in files],
        internal={"storageLocation": f"file://{root}"},
        create_timestamp=store.now_ms() - OLD_MS,
    )
    store.insert_tasks([task])
    return task, files


def launch(
    instance: DagsterInstance,
    metastore: PolarisMetastoreResource,
    task_id: int,
    *,
    tags: dict[str, str] | None = None,
    storage: PolarisStorageResource | None = None,
    job: JobDefinition = polaris_task_job,
) -> Any:
    """A run launched by hand: the launchpad's minimal config, realm and task id."""
    return job.execute_in_process(
        run_config=run_config_for("POLARIS", task_id),
        tags=tags or {},
        instance=instance,
        resources={"metastore": metastore, "storage": storage or PolarisStorageResource()},
        raise_on_error=False,
    )


def run_tags(instance: DagsterInstance, result: Any) -> dict[str, str]:
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    return dict(run.tags)


def failure_text(result: Any) -> str:
    [failure] = [e for e in result.all_events if e.is_step_failure]
    user = failure.step_failure_data.user_failure_data
    assert user is not None and user.description is not None
    return str(user.description)


def reexecution_tags(parent: str, **extra: str) -> dict[str, str]:
    """The tags Dagster puts on a re-execution of run ``parent`` (UI or run retry)."""
    return {"dagster/parent_run_id": parent, "dagster/root_run_id": parent, **extra}


def test_waiting_in_the_queue_costs_no_attempt(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    """Selected, then the run waits longer than a lease: it still runs as attempt 1."""
    task, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore, lease_timeout_ms=1_000)

    [request] = sweep(resource, sqlite_instance)
    time.sleep(1.2)
    # Another sweep meanwhile selects the same version: the same run key (Dagster drops it).
    [again] = sweep(resource, sqlite_instance)
    assert again.run_key == request.run_key
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None and row.attempt_count == 0 and row.executor_id is None
    # The run itself holds a lease of the usual length: a one-second lease could lapse
    # while it works on a loaded machine, which is not what this test is about.
    run_resource = metastore_resource(metastore)
    result = execute(request, sqlite_instance, run_resource, PolarisStorageResource())

    assert result.success
    assert not any(f.exists() for f in files)
    assert metastore.get_task("POLARIS", task.id) is None
    tags = run_tags(sqlite_instance, result)
    assert tags["polaris/attempt"] == "1" and tags["polaris/outcome"] == "done"
    assert tags["polaris/executor"] == run_resource.run_executor_id(result.run_id)


def test_a_task_taken_after_selection_ends_the_sweepers_run_as_skipped(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    task, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore)

    [request] = sweep(resource, sqlite_instance)
    # A Polaris server (or another deployment) leases the task before the run starts.
    assert metastore.lease_task("POLARIS", task.id, "polaris-server-2") is not None
    result = execute(request, sqlite_instance, resource, PolarisStorageResource())

    assert result.success  # the sweeper lost a race: not a failure alarm
    assert all(f.exists() for f in files)
    outcome = result.output_for_node("run_polaris_task", "outcome")
    assert outcome["status"] == "skipped"
    assert "held by another holder: polaris-server-2, attempt 1" in outcome["message"]
    assert run_tags(sqlite_instance, result)["polaris/outcome"] == "skipped"
    assert any(
        m.startswith("skipped: ") and m.endswith("nothing was done")
        for m in messages(sqlite_instance, result.run_id)
    )
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None and row.executor_id == "polaris-server-2"
    assert row.attempt_count == 1 and Prop.ERROR not in row.properties


def test_a_sweepers_run_whose_task_is_gone_or_backing_off_is_skipped(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    gone, _ = local_batch(metastore, tmp_path)
    waiting, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore)
    requests = {int(r.tags["polaris/task_id"]): r for r in sweep(resource, sqlite_instance)}
    finished = metastore.lease_task("POLARIS", gone.id, "other")
    assert finished is not None and metastore.complete(finished)
    failed = metastore.lease_task("POLARIS", waiting.id, "other")
    assert failed is not None
    metastore.fail(failed, "boom")

    for task_id, expected in (
        (gone.id, "is gone: it was completed (or discarded); nothing to do"),
        (waiting.id, "is backing off until "),
    ):
        result = execute(requests[task_id], sqlite_instance, resource, PolarisStorageResource())
        assert result.success
        outcome = result.output_for_node("run_polaris_task", "outcome")
        assert outcome["status"] == "skipped" and expected in outcome["message"]
        assert run_tags(sqlite_instance, result)["polaris/outcome"] == "skipped"
    # The sweeper's run never retries a backing-off task early: that is an operator's call.
    row = metastore.get_task("POLARIS", waiting.id)
    assert row is not None and row.status == "failed" and all(f.exists() for f in files)


def test_an_operator_launch_needs_only_realm_and_task_id(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    task, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore)

    result = launch(sqlite_instance, resource, task.id)

    assert result.success
    assert not any(f.exists() for f in files)
    assert metastore.get_task("POLARIS", task.id) is None
    assert run_tags(sqlite_instance, result)["polaris/attempt"] == "1"


@pytest.mark.parametrize("state", ["backing off", "dead"])
def test_an_operator_reexecution_retries_a_backing_off_or_dead_task_now(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance, state: str
) -> None:
    task, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore, max_attempts=1 if state == "dead" else 8)
    store = resource.get_metastore()  # its policy: one attempt allowed for "dead"
    lease = store.lease_task("POLARIS", task.id, "earlier-run")
    assert lease is not None
    store.fail(lease, "storage was down")
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None and row.status == ("dead" if state == "dead" else "failed")

    # The failed run re-executed from the UI: a parent, no retry number; the sweeper's tag.
    parent = str(uuid.uuid4())
    tags = reexecution_tags(parent, **{"polaris/launched_by": "sweeper"})
    result = launch(sqlite_instance, resource, task.id, tags=tags)

    assert result.success
    assert not any(f.exists() for f in files)
    assert metastore.get_task("POLARIS", task.id) is None
    assert run_tags(sqlite_instance, result)["polaris/start"] == (
        f"operator retry: {state} task retried now"
    )
    assert any(
        m.startswith(f"operator retry: {state} task retried now")
        and "last error: storage was down" in m
        for m in messages(sqlite_instance, result.run_id)
    )


def test_an_operator_run_fails_clearly_on_a_held_pending_or_gone_task(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    held, held_files = local_batch(metastore, tmp_path)
    assert metastore.lease_task("POLARIS", held.id, "polaris-server-2") is not None
    fresh = batch_task("POLARIS", ["file:///nowhere/x.avro"])  # created now: within grace
    metastore.insert_tasks([fresh])
    resource = metastore_resource(metastore, grace_ms=60_000)

    result = launch(sqlite_instance, resource, held.id)
    assert not result.success
    text_ = failure_text(result)
    assert f"task POLARIS/{held.id} " in text_
    assert "held by another holder: polaris-server-2, attempt 1, lease until " in text_
    assert "wait for that run to finish" in text_
    assert all(f.exists() for f in held_files)

    result = launch(sqlite_instance, resource, fresh.id)
    assert not result.success and "is pending: created at " in failure_text(result)
    row = metastore.get_task("POLARIS", fresh.id)
    assert row is not None and row.executor_id is None

    missing = new_entity_id()
    result = launch(sqlite_instance, resource, missing)
    assert not result.success
    assert failure_text(result) == (
        f"task POLARIS/{missing} is gone: it was completed (or discarded); nothing to do"
    )
    # A task id that is not a number is refused before anything is read.
    bad = polaris_task_job.execute_in_process(
        run_config={"ops": {"run_polaris_task": {"config": {"realm_id": "P", "task_id": "1e3"}}}},
        instance=sqlite_instance,
        resources={"metastore": resource, "storage": PolarisStorageResource()},
        raise_on_error=False,
    )
    assert not bad.success and "is not a decimal task id" in failure_text(bad)


def test_a_run_retry_adopts_the_lease_of_its_dead_parent(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    """A run whose worker died held the lease; the daemon's retry continues the same attempt."""
    task, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore)
    parent = str(uuid.uuid4())
    # What the dead parent left: the task leased under the lineage's executor id.
    held = metastore.lease_task("POLARIS", task.id, resource.run_executor_id(parent))
    assert held is not None and held.attempt == 1

    # Another sweeper-launched run (not of the lineage) finds it held: skipped.
    other = launch(sqlite_instance, resource, task.id, tags={"polaris/launched_by": "sweeper"})
    assert other.success
    assert other.output_for_node("run_polaris_task", "outcome")["status"] == "skipped"

    tags = reexecution_tags(
        parent, **{"dagster/retry_number": "1", "polaris/launched_by": "sweeper"}
    )
    result = launch(sqlite_instance, resource, task.id, tags=tags)

    assert result.success
    assert not any(f.exists() for f in files)
    assert metastore.get_task("POLARIS", task.id) is None
    tags_after = run_tags(sqlite_instance, result)
    assert tags_after["polaris/attempt"] == "1"  # the same attempt, not a new one
    assert tags_after["polaris/executor"] == resource.run_executor_id(parent)
    assert tags_after["polaris/start"] == f"adopted the lease of run lineage {parent}"
    # The take-over is said in the log, with who did it.
    adopted = [m for m in messages(sqlite_instance, result.run_id) if "adopted this lineage" in m]
    assert len(adopted) == 1 and f"automatic run retry 1 of run {parent}" in adopted[0]


def test_a_storage_config_error_in_a_run_is_recorded_not_retried(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    task, files = local_batch(metastore, tmp_path)
    resource = metastore_resource(metastore)
    [request] = sweep(resource, sqlite_instance)
    broken = PolarisStorageResource(config_path=str(tmp_path / "missing-storage.yaml"))
    job = build_polaris_task_job("polaris_task_job_fast_retries", retry_policy=FAST_RETRIES)

    result = execute(request, sqlite_instance, resource, broken, job=job)

    assert not result.success
    assert not [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert failure_text(result).startswith("storage configuration: ")
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None and row.attempt_count == 1 and row.status == "failed"
    assert (row.last_error or "").startswith("storage configuration: ")
    assert row.properties[Prop.RUN_ID] == result.run_id
    assert all(f.exists() for f in files)


# -- the deployed shape: multiprocess executor, PostgreSQL instance ----------------


def deployed_task_job() -> JobDefinition:
    """The job as the code location builds it with the multiprocess executor chosen."""
    from polaris_pipeline.dagster.definitions import build_defs_from_env

    env = {**os.environ, "POLARIS_PIPELINE_TASK_EXECUTOR": "multiprocess"}
    job = build_defs_from_env(env).get_job_def("polaris_task_job")
    assert job.executor_def.name == MULTIPROCESS_EXECUTOR.name
    return job


@pytest.mark.slow
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_multiprocess_run_on_a_postgres_instance(
    metastore: Metastore,
    local_warehouse: Warehouse,
    dagster_pg_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step in its own process, Dagster storage in PostgreSQL, resources from the env."""
    # One snapshot: one manifest child and one batch child, so few processes to start.
    neighbour = local_warehouse.build("neighbour", appends=1)
    neighbour_files = sorted(table_files(neighbour))
    victim = local_warehouse.catalog.create_table(
        ("ns", "victim"), schema=built_tables.TABLE_SCHEMA
    )
    victim.append(
        pa.table(
            {"id": [1, 2], "category": ["a", "b"], "value": [1.0, 2.0]}, built_tables.ARROW_SCHEMA
        )
    )
    victim = local_warehouse.catalog.load_table(("ns", "victim"))
    victim_files = table_files(victim)
    drop(metastore, victim)
    monkeypatch.setenv("POLARIS_METASTORE_URL", metastore.url.render_as_string(False))
    monkeypatch.delenv("POLARIS_PIPELINE_STORAGE_CONFIG", raising=False)
    import definitions

    with temp_instance(tmp_path / "dagster_home", postgres_url=dagster_pg_url) as instance:
        resources = dict(definitions.defs.resources or {})
        with build_sensor_context(instance=instance, resources=resources) as context:
            result = definitions.defs.resolve_sensor_def(SENSOR_NAME)(context)
        assert isinstance(result, SensorResult)
        [request] = result.run_requests or []
        started = time.monotonic()
        with execute_job(
            reconstructable(deployed_task_job),
            instance=instance,
            run_config=request.run_config,
            tags=request.tags,
        ) as run:
            print(f"\nmultiprocess run: {time.monotonic() - started:.1f} s")
            assert run.success
            processes = {
                entry.dagster_event.pid
                for entry in instance.all_logs(run.run_id)
                if entry.dagster_event is not None
                and entry.dagster_event.event_type == DagsterEventType.STEP_START
            }
            assert len(processes) > 1  # really one process per step
            assert run.output_for_node("run_polaris_task", "outcome")["status"] == "done"
            # The mapped stage, across processes.
            assert run.output_for_node("run_manifest_children")

    assert_table_purged(local_warehouse, victim_files, neighbour_files)
    assert metastore.list_tasks() == []


@pytest.mark.slow
def test_the_code_location_imports_no_heavy_module() -> None:
    """The code server and each run start without pyiceberg, pyarrow or s3fs; a task imports
    them only when its handler runs."""
    import subprocess
    import sys

    heavy = ("pyiceberg", "pyarrow", "s3fs")
    probe = f"import sys, definitions\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "POLARIS_METASTORE_URL": "sqlite:///unused.db"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_orphaned_children_of_one_purge_run_as_one_run_each_leased_and_recorded(
    metastore: Metastore, tmp_path: Path, sqlite_instance: DagsterInstance
) -> None:
    root = tmp_path / "wh" / "ns" / "t"
    root.mkdir(parents=True)
    old = metastore.now_ms() - OLD_MS
    files = []
    children = []
    for i in range(5):
        f = root / f"snap-{i}.avro"
        f.write_bytes(b"x")
        files.append(f)
        child = purge_child(
            "POLARIS", "entityCleanup_5", ("ns", "t"), [f"file://{f}"], create_timestamp=old
        )
        children.append(
            NewTask(
                child.realm_id,
                child.id,
                child.name,
                child.properties,
                {"storageLocation": f"file://{root}"},
                old,
            )
        )
    metastore.insert_tasks(children)
    # One of them was taken by another holder meanwhile: its step skips it, the rest run.
    taken = children[0]
    resource = metastore_resource(metastore)

    [request] = sweep(resource, sqlite_instance)
    assert request.tags["polaris/tasks"] == "5"
    assert metastore.lease_task("POLARIS", taken.id, "polaris-server-2") is not None
    job = build_polaris_task_job("polaris_task_job_small_steps")
    config = request.run_config["ops"]["run_polaris_task"]["config"]
    run_config = {"ops": {"run_polaris_task": {"config": {**config, "children_per_step": 2}}}}
    result = job.execute_in_process(
        run_config=run_config,
        tags=request.tags,
        instance=sqlite_instance,
        resources={"metastore": resource, "storage": PolarisStorageResource()},
        raise_on_error=False,
    )

    assert result.success
    assert files[0].exists() and not any(f.exists() for f in files[1:])
    left = metastore.list_tasks()
    assert [t.id for t in left] == [taken.id] and left[0].executor_id == "polaris-server-2"
    summaries = child_summaries(result, "run_metadata_children")
    by_id = {s["task_id"]: s for s in summaries}
    assert set(by_id) == {str(c.id) for c in children}
    assert by_id[str(taken.id)]["status"] == "skipped"
    assert all(by_id[str(c.id)]["status"] == "done" for c in children[1:])
    assert all(by_id[str(c.id)]["attempt"] == 1 for c in children[1:])
    # Visible as step groups of children_per_step.
    assert len(result.output_for_node("run_metadata_children")) == 3
    root_outcome = result.output_for_node("run_polaris_task", "outcome")
    assert root_outcome["status"] == "orphans" and root_outcome["children"] == 5


def test_a_batch_task_purges_without_importing_pyiceberg(tmp_path: Path) -> None:
    """A run whose task only deletes listed files (BATCH) never pays pyiceberg's import (the
    resolver imports it only to read metadata or manifests), nor botocore's on local storage."""
    import subprocess
    import sys

    victim = tmp_path / "wh" / "ns" / "t" / "data" / "f.parquet"
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"PAR1")
    probe = f"""
import sys
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from tests.support.tasks import batch_task
store = Metastore("sqlite:///{tmp_path / "m.db"}")
store.init_schema()
task = batch_task("R", [{victim.as_uri()!r}],
                  internal={{"storageLocation": {(tmp_path / "wh" / "ns" / "t").as_uri()!r}}},
                  create_timestamp=1)
store.insert_tasks([task])
with Runner(store) as runner:
    outcomes = sweep_tasks(runner)
print([o.status.value for o in outcomes])
print(",".join(m for m in ("pyiceberg", "pyarrow", "botocore") if m in sys.modules) or "none")
"""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True
    )
    statuses, heavy = out.stdout.strip().splitlines()[-2:]
    assert statuses == "['done']"
    assert not victim.exists()
    assert heavy == "none"


def test_a_table_purge_imports_no_pyiceberg_catalog_nor_pyarrow(tmp_path: Path) -> None:
    """A dropped table's run reads its metadata and manifests with pyiceberg's readers only:
    not its fsspec FileIO, which imports the REST catalog, nor pyarrow (each run's start)."""
    import subprocess
    import sys

    catalog = built_tables.open_catalog(
        built_tables.local_warehouse_uri(tmp_path / "wh"), tmp_path / "catalog.db"
    )
    table = built_tables.build_table(catalog, ("ns", "dropped"), appends=2)
    content = content_files(table)
    store = Metastore(f"sqlite:///{tmp_path / 'm.db'}")
    store.init_schema()
    drop(store, table)
    store.dispose()
    probe = f"""
import sys
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
with Runner(Metastore("sqlite:///{tmp_path / "m.db"}")) as runner:
    outcomes = sweep_tasks(runner)
print(sorted({{o.status.value for o in outcomes}}), sum(len(o.children) for o in outcomes))
heavy = ("pyiceberg.catalog.rest", "pyiceberg.io.fsspec", "pyarrow")
print(",".join(m for m in heavy if m in sys.modules) or "none")
print("pyiceberg.manifest" in sys.modules)
"""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True
    )
    statuses, heavy, read_manifests = out.stdout.strip().splitlines()[-3:]
    assert statuses.startswith("['done']")
    assert int(statuses.split()[-1]) > 0  # the table's children were created and run
    assert not any(Path(uri.removeprefix("file://")).exists() for uri in content)
    assert heavy == "none"
    assert read_manifests == "True"  # pyiceberg did read them
