"""The sweeper sensor, evaluated by Dagster against a real metastore (PostgreSQL and SQLite)."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time
import uuid
from typing import Any

import pytest
from dagster import (
    AssetMaterialization,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    SkipReason,
    build_sensor_context,
)

from builders.runs import set_run_started
from builders.tasks import batch_task
from polaris_pipeline.dagster.contract import JOB_NAME, TaskRunConfig, run_config_for, task_number
from polaris_pipeline.dagster.definitions import build_defs_from_env
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)
from polaris_pipeline.dagster.sweeper import SENSOR_NAME, SweepCursor
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.config import UNBOUNDED_WARNING
from polaris_pipeline.tasks.model import NewTask, Prop, TaskState
from tests.support.dagster import deployed_sensor, metastore_resource, sweeper_resources
from tests.support.tasks import purge_child, seed

GRACE_MS = 30_000
OLD_MS = 10 * 60_000


# A real grace period, so "fresh" tasks exist.
pytestmark = pytest.mark.lease_policy(grace_ms=GRACE_MS)


def evaluate(
    metastore: PolarisMetastoreResource,
    instance: DagsterInstance,
    *,
    cursor: str | None = None,
    sweeper: SweeperSettings | None = None,
    storage: PolarisStorageResource | None = None,
) -> SensorResult | SkipReason:
    with build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources=sweeper_resources(metastore, sweeper, storage=storage),
    ) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(result, SensorResult | SkipReason)
    return result


def old_tasks(store: Metastore, realm: str, n: int) -> list[NewTask]:
    """Never-leased tasks created long ago: orphaned."""
    return seed(store, realm, n, create_timestamp=store.now_ms() - OLD_MS)


def live_leased_task(store: Metastore, realm: str, executor: str = "polaris-server-1") -> NewTask:
    """A task a live Polaris leased a moment ago."""
    now = store.now_ms()
    task = batch_task(
        realm,
        create_timestamp=now - OLD_MS,
        extra={Prop.EXECUTOR: executor, Prop.START_TIME: str(now), Prop.ATTEMPT_COUNT: "1"},
    )
    store.insert_tasks([task])
    return task


def test_run_requests_match_available_tasks(metastore: Metastore, instance: DagsterInstance):
    orphans = old_tasks(metastore, "A", 3) + old_tasks(metastore, "B", 2)
    live = live_leased_task(metastore, "A")
    fresh = seed(metastore, "A", 1)  # created now: Polaris may be running it in-process

    result = evaluate(metastore_resource(metastore), instance)

    assert isinstance(result, SensorResult)
    requests = result.run_requests or []
    by_id = {int(r.tags["polaris/task_id"]): r for r in requests}
    assert set(by_id) == {t.id for t in orphans}
    assert live.id not in by_id and fresh[0].id not in by_id
    keys = [r.run_key for r in requests]
    assert len(set(keys)) == len(keys)
    for task in orphans:
        request = by_id[task.id]
        row = metastore.get_task(task.realm_id, task.id)
        # Selected, not leased: the run leases its task when it starts.
        assert row is not None and row.executor_id is None and row.attempt_count == 0
        assert request.run_key == f"{task.realm_id}:{task.id}:{row.entity_version}"
        assert request.tags == {
            "polaris/realm": task.realm_id,
            "polaris/task_id": str(task.id),
            "polaris/task_type": "batch_file_cleanup",
            "polaris/launched_by": "sweeper",
        }
        config = request.run_config["ops"]["run_polaris_task"]["config"]
        # Only what names the task: no lease fields for the launchpad to ask for.
        assert config == {
            "realm_id": task.realm_id,
            "task_id": str(task.id),
            "entity_version": row.entity_version,
        }
        parsed = TaskRunConfig(**config)
        assert task_number(parsed.task_id) == task.id
        # Polaris ids use 63 bits: passed as text so the UI cannot round them.
        assert isinstance(config["task_id"], str)
    # The live lease and the fresh task are untouched.
    live_row = metastore.get_task("A", live.id)
    assert live_row is not None and live_row.executor_id == "polaris-server-1"
    fresh_row = metastore.get_task("A", fresh[0].id)
    assert fresh_row is not None and fresh_row.executor_id is None


def test_run_key_changes_with_every_write_to_the_row(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    """A requeued (or failed, or re-leased) task gets a new key: Dagster never drops its run."""
    [task] = old_tasks(metastore, "A", 1)
    resource = metastore_resource(metastore)
    [first] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]
    # Unchanged while it waits: the same key, which Dagster drops as a repeat.
    [again] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]
    assert again.run_key == first.run_key
    lease = metastore.lease_task("A", task.id, "someone")
    assert lease is not None
    metastore.fail(lease, "boom")
    metastore.requeue("A", task.id)
    [after] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]
    assert after.run_key != first.run_key
    row = metastore.get_task("A", task.id)
    assert row is not None and after.run_key == f"A:{task.id}:{row.entity_version}"


def test_realms_limit_what_is_leased(metastore: Metastore, instance: DagsterInstance):
    in_a = old_tasks(metastore, "A", 2)
    in_b = old_tasks(metastore, "B", 2)

    result = evaluate(metastore_resource(metastore, realms=["A"]), instance)

    assert isinstance(result, SensorResult)
    assert {int(r.tags["polaris/task_id"]) for r in result.run_requests or []} == {
        t.id for t in in_a
    }
    for task in in_b:
        row = metastore.get_task("B", task.id)
        assert row is not None and row.executor_id is None


def test_cursor_holds_jittered_next_sweep_and_early_ticks_skip(
    metastore: Metastore, instance: DagsterInstance
):
    old_tasks(metastore, "A", 1)
    settings = SweeperSettings(interval_seconds=60, jitter=0.2)
    resource = metastore_resource(metastore)

    before = int(time.time() * 1000)
    first = evaluate(resource, instance, sweeper=settings)
    after = int(time.time() * 1000)

    assert isinstance(first, SensorResult) and len(first.run_requests or []) == 1
    assert first.cursor is not None
    cursor = json.loads(first.cursor)
    assert before + 60_000 <= cursor["next_sweep_ms"] <= after + 72_000
    assert cursor["backlog"] is False

    # A task becomes available, but the next sweep is not due: no database access.
    late = old_tasks(metastore, "A", 1)[0]
    second = evaluate(resource, instance, cursor=first.cursor, sweeper=settings)
    assert isinstance(second, SkipReason)
    assert second.skip_message is not None
    assert second.skip_message.startswith("next sweep in ")
    assert second.skip_message.endswith(" s (jittered)")
    wait_s = int(second.skip_message.split()[3])
    assert 55 <= wait_s <= 72
    row = metastore.get_task("A", late.id)
    assert row is not None and row.executor_id is None

    # Once the time has come, the sweep acts again.
    due = SweepCursor(next_sweep_ms=int(time.time() * 1000) - 1).dump()
    third = evaluate(resource, instance, cursor=due, sweeper=settings)
    assert isinstance(third, SensorResult)
    # The first task is selected again too: no run of it was ever queued here.
    assert late.id in {int(r.tags["polaris/task_id"]) for r in third.run_requests or []}


def test_jitter_spreads_the_next_sweep(metastore: Metastore, instance: DagsterInstance):
    settings = SweeperSettings(interval_seconds=10, jitter=0.5)
    resource = metastore_resource(metastore)
    delays = []
    for _ in range(20):
        now = int(time.time() * 1000)
        result = evaluate(resource, instance, sweeper=settings)
        assert isinstance(result, SensorResult) and result.cursor is not None
        delay = json.loads(result.cursor)["next_sweep_ms"] - now
        assert 10_000 <= delay <= 15_000 + 1_000
        delays.append(delay)
    assert len(set(delays)) > 1


def test_skip_reason_says_why_nothing_is_available(metastore: Metastore, instance: DagsterInstance):
    seed(metastore, "A", 2)  # fresh, within grace
    live_leased_task(metastore, "A")
    failed = old_tasks(metastore, "A", 1)[0]
    [lease] = metastore.lease_available("someone-else", 1, ["A"])
    assert lease.task_id == failed.id
    metastore.fail(lease, "boom")  # backing off now
    old = metastore.now_ms() - OLD_MS
    dead = batch_task("A", create_timestamp=old, extra={Prop.STATUS: "dead"})
    metastore.insert_tasks([dead])

    result = evaluate(metastore_resource(metastore), instance)

    assert isinstance(result, SensorResult)
    assert not result.run_requests
    assert result.skip_reason is not None
    message = result.skip_reason.skip_message
    assert message is not None
    assert message.startswith(
        "no orphaned tasks in realms [A]; 2 pending within grace, 1 leased, 1 backing off, 1 dead"
    ), message
    assert result.cursor is not None and json.loads(result.cursor)["next_sweep_ms"] > 0


def test_an_idle_sweep_reports_the_backlog_from_the_count_its_skip_reason_made(
    metastore: Metastore, instance: DagsterInstance
):
    """The backlog report costs no second count; with no orphan, no dead or backing-off
    task, no row is read for it either (PostgreSQL: the count is one statement)."""
    from sqlalchemy import event

    seed(metastore, "A", 2)  # fresh, within grace
    live_leased_task(metastore, "A")
    resource = metastore_resource(metastore)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = resource.get_metastore().engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        result = evaluate(resource, instance)
    finally:
        event.remove(engine, "before_cursor_execute", record)

    assert isinstance(result, SensorResult) and result.skip_reason is not None
    assert "2 pending within grace, 1 leased" in (result.skip_reason.skip_message or "")
    [mat] = [e for e in result.asset_events if isinstance(e, AssetMaterialization)]
    assert mat.metadata["A/pending"].value == 2 and mat.metadata["A/leased"].value == 1
    if metastore.dialect == "postgresql":
        counts = [s for s in statements if "count(*)" in s and "entities" in s]
        assert len(counts) == 1, counts
    # A configuration error reports nothing, and keeps when the last report was.
    cursor = SweepCursor(next_sweep_ms=0, reported_ms=12_345).dump()
    missing = PolarisStorageResource(config_path="/nonexistent/storage.yaml")
    failed = evaluate(resource, instance, cursor=cursor, storage=missing)
    assert isinstance(failed, SensorResult) and failed.asset_events == []
    assert SweepCursor.parse(failed.cursor).reported_ms == 12_345


def test_skip_reason_on_an_empty_metastore(metastore: Metastore, instance: DagsterInstance):
    result = evaluate(metastore_resource(metastore), instance)
    assert isinstance(result, SensorResult) and result.skip_reason is not None
    assert result.skip_reason.skip_message is not None
    assert result.skip_reason.skip_message.startswith("no orphaned tasks in any realm; 0 pending")


def test_waiting_runs_hold_back_leasing(metastore: Metastore, instance: DagsterInstance):
    old_tasks(metastore, "A", 5)
    # Runs created but not started yet (queued runs need a code location origin).
    for status in (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING):
        instance.add_run(DagsterRun(job_name=JOB_NAME, run_id=str(uuid.uuid4()), status=status))
    resource = metastore_resource(metastore)

    full = evaluate(resource, instance, sweeper=SweeperSettings(max_pending_runs=2))
    assert isinstance(full, SensorResult) and not full.run_requests
    assert full.skip_reason is not None and full.skip_reason.skip_message is not None
    message = full.skip_reason.skip_message
    assert "2 run(s) of polaris_task_job still waiting to start" in message
    assert "no run of it started in the last 10 min" in message
    assert "the run queue, not the metastore, is the bottleneck" in message
    counts = metastore.count_by_state(["A"])["A"]
    assert counts[TaskState.ORPHANED] == 5
    # A full queue still reports the backlog, and the cursor records when.
    [mat] = [e for e in full.asset_events if isinstance(e, AssetMaterialization)]
    assert mat.metadata["A/orphaned"].value == 5
    assert SweepCursor.parse(full.cursor).reported_ms is not None

    # Runs that started lately give the queue's drain time.
    for _ in range(3):
        started = DagsterRun(job_name=JOB_NAME, run_id=str(uuid.uuid4()))
        instance.add_run(started)
        instance.report_dagster_event(
            DagsterEvent(event_type_value=DagsterEventType.RUN_START.value, job_name=JOB_NAME),
            run_id=started.run_id,
        )
    timed = evaluate(resource, instance, sweeper=SweeperSettings(max_pending_runs=2))
    assert isinstance(timed, SensorResult) and timed.skip_reason is not None
    # 3 starts in 10 min: 0.3 a minute, 2 waiting runs take about 7 min.
    assert "at the observed 0.3 starts/min that is 7 min" in (timed.skip_reason.skip_message or "")

    room = evaluate(resource, instance, sweeper=SweeperSettings(max_pending_runs=5))
    assert isinstance(room, SensorResult) and len(room.run_requests or []) == 3


def test_a_task_with_a_waiting_run_gets_no_second_one(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    tasks = old_tasks(metastore, "A", 3)
    resource = metastore_resource(metastore)
    first = evaluate(resource, instance)
    assert isinstance(first, SensorResult)
    waiting = [r for r in first.run_requests or [] if r.tags["polaris/task_id"] == str(tasks[0].id)]
    instance.add_run(
        DagsterRun(
            job_name=JOB_NAME,
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.NOT_STARTED,
            tags=waiting[0].tags,
        )
    )
    # The same id in another realm is another task: not held back.
    instance.add_run(
        DagsterRun(
            job_name=JOB_NAME,
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.NOT_STARTED,
            tags={"polaris/realm": "B", "polaris/task_id": str(tasks[1].id)},
        )
    )

    second = evaluate(resource, instance)
    assert isinstance(second, SensorResult)
    assert {int(r.tags["polaris/task_id"]) for r in second.run_requests or []} == {
        tasks[1].id,
        tasks[2].id,
    }


def test_a_task_of_a_run_started_within_a_lease_is_not_selected_again(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    """A started run may not have leased its task yet; after a lease timeout it counts no more
    (its worker may have died without run monitoring noticing)."""
    [task] = old_tasks(metastore, "A", 1)
    run = DagsterRun(
        job_name=JOB_NAME,
        run_id=str(uuid.uuid4()),
        tags={"polaris/realm": "A", "polaris/task_id": str(task.id)},
    )
    instance.add_run(run)
    # Started 10 s ago, by the run storage's clock: no sleep, whatever the host's load.
    instance.report_dagster_event(
        DagsterEvent(event_type_value=DagsterEventType.RUN_START.value, job_name=JOB_NAME),
        run_id=run.run_id,
        timestamp=time.time() - 10,
    )

    within = evaluate(metastore_resource(metastore, lease_timeout_ms=60_000), instance)
    assert isinstance(within, SensorResult) and not within.run_requests
    past = evaluate(metastore_resource(metastore, lease_timeout_ms=5_000), instance)
    assert isinstance(past, SensorResult)
    assert [int(r.tags["polaris/task_id"]) for r in past.run_requests or []] == [task.id]


def test_configuration_errors_select_nothing_and_say_why(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Any
) -> None:
    [task] = old_tasks(metastore, "A", 1)
    typo = tmp_path / "storage.yaml"
    typo.write_text("locations: [{prefix: s3://b, options: {key: secret-value}\n")

    def skip(result: Any) -> str:
        assert isinstance(result, SensorResult | SkipReason)
        reason = result.skip_reason if isinstance(result, SensorResult) else result
        assert reason is not None and reason.skip_message is not None
        if isinstance(result, SensorResult):
            assert not result.run_requests
        return reason.skip_message

    resources = sweeper_resources(
        metastore_resource(metastore), storage=PolarisStorageResource(config_path=str(typo))
    )
    with build_sensor_context(instance=instance, resources=resources) as context:
        message = skip(deployed_sensor(SENSOR_NAME)(context))
    assert message.startswith("configuration error, nothing selected (every run would fail): ")
    assert "StorageConfigError" in message and "secret-value" not in message

    missing = {**resources, "storage": PolarisStorageResource(config_path=str(tmp_path / "no"))}
    with build_sensor_context(instance=instance, resources=missing) as context:
        assert "StorageConfigError" in skip(deployed_sensor(SENSOR_NAME)(context))

    # A bad policy or cadence is refused where the resource is built, before any tick.
    with pytest.raises(ValueError, match="lease timeout must be positive"):
        metastore_resource(metastore, lease_timeout_ms=0)
    with pytest.raises(ValueError, match="the jitter is a fraction of the interval"):
        SweeperSettings(jitter=-1)

    # Nothing was touched, and a good config selects the task.
    row = metastore.get_task("A", task.id)
    assert row is not None and row.executor_id is None
    good = {**resources, "storage": PolarisStorageResource()}
    with build_sensor_context(instance=instance, resources=good) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(result, SensorResult) and len(result.run_requests or []) == 1


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_an_unreachable_metastore_is_not_a_configuration_error(
    instance: DagsterInstance, tmp_path: Any
) -> None:
    def skip_message(metastore: PolarisMetastoreResource) -> str:
        resources = sweeper_resources(metastore)
        with build_sensor_context(instance=instance, resources=resources) as context:
            result = deployed_sensor(SENSOR_NAME)(context)
        assert isinstance(result, SensorResult) and not result.run_requests
        assert result.skip_reason is not None and result.skip_reason.skip_message is not None
        return result.skip_reason.skip_message

    # Nothing listens there: the driver's connection is refused.
    url = f"postgresql+psycopg://u:hunter2@127.0.0.1:{_closed_port()}/polaris"
    down = skip_message(PolarisMetastoreResource(url=url))
    assert down.startswith("metastore unreachable, nothing selected: MetastoreError: "), down
    assert "Connection refused" in down and "next check in" in down
    assert "configuration error" not in down and "hunter2" not in down

    # Reachable, but not Polaris's database: that is configuration.
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
    wrong = skip_message(PolarisMetastoreResource(url=f"sqlite:///{other}"))
    assert wrong.startswith(
        "configuration error, nothing selected (every run would fail): MetastoreError: "
    ), wrong
    assert "no Polaris entities table" in wrong and "metastore unreachable" not in wrong


def test_the_deployed_sensor_requires_the_storage_resource() -> None:
    from polaris_pipeline.dagster.definitions import build_defs

    defs = build_defs(metastore=PolarisMetastoreResource(url="sqlite:///unused.db"))
    [sensor_def] = [s for s in defs.sensors or [] if s.name == SENSOR_NAME]
    assert "storage" in sensor_def.required_resource_keys


# 10,000 rows and 400 run requests (5 s of CPU): the cap is held in the edit loop by
# test_the_tick_cap_counts_runs_so_one_tables_orphans_are_one_run, its scale here.
@pytest.mark.slow
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_per_tick_cap_with_a_large_backlog(metastore: Metastore, instance: DagsterInstance):
    old = metastore.now_ms() - OLD_MS
    started = time.monotonic()
    for _ in range(10):
        metastore.insert_tasks([batch_task("A", create_timestamp=old) for _ in range(1_000)])
    print(f"\ninserted 10,000 tasks in {time.monotonic() - started:.2f} s")
    resource = metastore_resource(metastore)
    settings = SweeperSettings(max_runs_per_tick=200)

    started = time.monotonic()
    first = evaluate(resource, instance, sweeper=settings)
    print(f"tick over a 10,000-task backlog: {time.monotonic() - started:.3f} s")

    assert isinstance(first, SensorResult)
    assert len(first.run_requests or []) == 200
    assert first.cursor is not None
    cursor = json.loads(first.cursor)
    # A full batch: the next evaluation sweeps again instead of waiting a minute.
    assert cursor["backlog"] is True
    assert cursor["next_sweep_ms"] <= int(time.time() * 1000)

    # The runs requested wait in the queue: their tasks are not selected again.
    for request in first.run_requests or []:
        instance.add_run(
            DagsterRun(
                job_name=JOB_NAME,
                run_id=str(uuid.uuid4()),
                status=DagsterRunStatus.NOT_STARTED,
                tags=request.tags,
            )
        )
    started = time.monotonic()
    second = evaluate(resource, instance, cursor=first.cursor, sweeper=settings)
    print(f"second tick: {time.monotonic() - started:.3f} s")
    assert isinstance(second, SensorResult)
    assert len(second.run_requests or []) == 200
    first_keys = {r.run_key for r in first.run_requests or []}
    second_keys = {r.run_key for r in second.run_requests or []}
    assert not first_keys & second_keys
    # Selecting writes nothing.
    counts = metastore.count_by_state(["A"])["A"]
    assert counts[TaskState.ORPHANED] == 10_000


def test_definitions_sensor_reads_the_url_from_the_environment(
    metastore: Metastore, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
):
    """The code location as deployed: EnvVar resolved when the sensor is evaluated."""
    import definitions

    task = old_tasks(metastore, "A", 1)[0]
    monkeypatch.setenv("POLARIS_METASTORE_URL", metastore.url.render_as_string(False))

    defs = definitions.defs
    assert defs.sensors is not None
    [sweeper] = [s for s in defs.sensors if s.name == SENSOR_NAME]
    # The resources exactly as the code location binds them (EnvVar unresolved until now).
    with build_sensor_context(instance=instance, resources=dict(defs.resources or {})) as context:
        result = sweeper(context)
    assert isinstance(result, SensorResult)
    assert [int(r.tags["polaris/task_id"]) for r in result.run_requests or []] == [task.id]


# -- the resources the sensor and the runs share -----------------------------------


def test_metastore_resource_never_shows_the_password(metastore: Metastore) -> None:
    resource = PolarisMetastoreResource(url="postgresql+psycopg://polaris:s3cret@db/polaris")
    assert "s3cret" not in repr(resource)
    assert resource.display_url == "postgresql+psycopg://polaris:***@db/polaris"
    # A password in the query, as libpq takes it, is one too.
    query = PolarisMetastoreResource(
        url="postgresql+psycopg://polaris@db/polaris?password=s3cret&sslpassword=k3y"
    )
    assert "s3cret" not in repr(query) and "k3y" not in repr(query)
    assert query.display_url == (
        "postgresql+psycopg://polaris@db/polaris?password=***&sslpassword=***"
    )


def test_metastore_resource_reuses_one_metastore_per_process(metastore: Metastore) -> None:
    resource = metastore_resource(metastore)
    again = metastore_resource(metastore)  # Dagster rebuilds resources on every tick
    assert resource.get_metastore() is again.get_metastore()
    other_policy = metastore_resource(metastore, max_attempts=3)
    assert other_policy.get_metastore() is not resource.get_metastore()
    assert other_policy.get_metastore().policy.max_attempts == 3


def test_executor_ids() -> None:
    resource = PolarisMetastoreResource(url="sqlite:///x.db", executor_prefix="pp-eu")
    sensor_id = resource.executor_id("sensor")
    assert sensor_id.startswith("pp-eu:sensor:") and sensor_id != resource.executor_id("sensor")
    assert resource.run_executor_id("abc") == "pp-eu:run:abc"


def test_storage_resource_inline_or_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WH_SECRET", "hunter2")
    inline = PolarisStorageResource(
        locations=[{"prefix": "s3://bucket/wh", "options": {"secret": {"env": "WH_SECRET"}}}],
        allowed_prefixes=["s3://bucket/wh"],
    )
    config = inline.get_config()
    assert config.options_for("s3://bucket/wh/t/x") == {"secret": "hunter2"}
    assert "hunter2" not in repr(config)
    assert inline.get_resolver() is inline.get_resolver()

    path = tmp_path / "storage.yaml"
    path.write_text("allowed_prefixes: [file:///data/wh]\n")
    monkeypatch.setenv("POLARIS_PIPELINE_STORAGE_CONFIG", str(path))
    assert PolarisStorageResource().get_config().allowed_prefixes == ("file:///data/wh",)

    # Refused where it is built: the two sources would disagree.
    with pytest.raises(ValueError, match="either config_path or locations"):
        PolarisStorageResource(config_path=str(path), allowed_prefixes=["s3://b"])


def test_sweeper_settings_from_env() -> None:
    defs = build_defs_from_env(
        {
            "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS": "30",
            "POLARIS_PIPELINE_SWEEPER_MAX_RUNS_PER_TICK": "50",
        }
    )
    settings = (defs.resources or {})["sweeper"]
    assert (settings.interval_seconds, settings.max_runs_per_tick, settings.jitter) == (30, 50, 0.2)
    with pytest.raises(ValueError, match="POLARIS_PIPELINE_SWEEPER_JITTER"):
        build_defs_from_env({"POLARIS_PIPELINE_SWEEPER_JITTER": "lots"})


# -- orphaned children of one purge: one run ------------------------------------------


def test_orphaned_children_of_one_purge_share_a_run(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    old = metastore.now_ms() - OLD_MS
    one = [
        purge_child(
            "A", "entityCleanup_7", ("ns", "t"), [f"file:///wh/ns/t/m{i}"], create_timestamp=old
        )
        for i in range(3)
    ]
    # Hostile neighbours: a parent name that extends the first one, another table under
    # the same parent name, a lone orphan, a child whose parent row still exists, the
    # same parent name in another realm.
    longer = purge_child(
        "A", "entityCleanup_71", ("ns", "t"), ["file:///wh/x"], create_timestamp=old
    )
    longer2 = purge_child(
        "A", "entityCleanup_71", ("ns", "u"), ["file:///wh/y"], create_timestamp=old
    )
    lone = purge_child("A", "entityCleanup_8", ("ns", "t"), ["file:///wh/z"], create_timestamp=old)
    alive = [
        purge_child("A", "entityCleanup_9", ("ns", "v"), [f"file:///wh/v{i}"], create_timestamp=old)
        for i in range(2)
    ]
    parent = batch_task("A", name="entityCleanup_9", extra={Prop.STATUS: "dead"})
    other_realm = [
        purge_child("B", "entityCleanup_7", ("ns", "t"), [f"file:///wh/b{i}"], create_timestamp=old)
        for i in range(2)
    ]
    plain = old_tasks(metastore, "A", 2)  # the fixtures' own names: not a purge's children
    metastore.insert_tasks([*one, longer, longer2, lone, *alive, parent, *other_realm])

    result = evaluate(metastore_resource(metastore), instance)

    assert isinstance(result, SensorResult)
    requests = result.run_requests or []
    groups = {r.tags.get("polaris/orphans_of"): r for r in requests if "polaris/tasks" in r.tags}
    singles = {int(r.tags["polaris/task_id"]) for r in requests if "polaris/tasks" not in r.tags}
    assert (
        set(groups) == {"entityCleanup_7"}
        and len([r for r in requests if "polaris/tasks" in r.tags]) == 2
    )
    by_realm = {r.tags["polaris/realm"]: r for r in requests if "polaris/tasks" in r.tags}
    config = by_realm["A"].run_config["ops"]["run_polaris_task"]["config"]
    assert sorted(config["task_ids"]) == sorted(str(t.id) for t in one)
    assert by_realm["A"].tags["polaris/tasks"] == "3"
    assert (by_realm["A"].run_key or "").startswith("A:orphans:entityCleanup_7:")
    assert sorted(
        by_realm["B"].run_config["ops"]["run_polaris_task"]["config"]["task_ids"]
    ) == sorted(str(t.id) for t in other_realm)
    assert singles == {
        longer.id,
        longer2.id,
        lone.id,
        *(t.id for t in alive),
        *(t.id for t in plain),
    }

    # A waiting group run holds back every member of the group, not only the first.
    for request in requests:
        if "polaris/tasks" in request.tags:
            instance.add_run(
                DagsterRun(
                    job_name=JOB_NAME,
                    run_id=str(uuid.uuid4()),
                    status=DagsterRunStatus.NOT_STARTED,
                    tags=request.tags,
                    run_config=request.run_config,
                )
            )
    again = evaluate(metastore_resource(metastore), instance)
    assert isinstance(again, SensorResult)
    ids = {int(r.tags["polaris/task_id"]) for r in again.run_requests or []}
    assert not ids & {t.id for t in [*one, *other_realm]}
    assert all("polaris/tasks" not in r.tags for r in again.run_requests or [])


def test_the_tick_cap_counts_runs_so_one_tables_orphans_are_one_run(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    """A table's orphaned children far beyond the run cap still become one run."""
    old = metastore.now_ms() - OLD_MS
    orphans = [
        purge_child(
            "A", "entityCleanup_7", ("ns", "t"), [f"file:///wh/ns/t/m{i}"], create_timestamp=old
        )
        for i in range(25)
    ]
    metastore.insert_tasks(orphans)
    singles = old_tasks(metastore, "A", 4)

    result = evaluate(
        metastore_resource(metastore), instance, sweeper=SweeperSettings(max_runs_per_tick=3)
    )

    assert isinstance(result, SensorResult)
    requests = result.run_requests or []
    assert len(requests) == 3  # the cap: runs, not tasks
    [group] = [r for r in requests if "polaris/tasks" in r.tags]
    config = group.run_config["ops"]["run_polaris_task"]["config"]
    assert sorted(config["task_ids"]) == sorted(str(t.id) for t in orphans)
    # Two single tasks of four fit under the cap; the tick says more is waiting.
    assert len({r.tags["polaris/task_id"] for r in requests} & {str(t.id) for t in singles}) == 2
    assert SweepCursor.parse(result.cursor).backlog


def test_the_sensor_page_states_the_real_cadence() -> None:
    defs = build_defs_from_env(
        {
            "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS": "120",
            "POLARIS_PIPELINE_SWEEPER_JITTER": "0.25",
        }
    )
    description = defs.resolve_sensor_def(SENSOR_NAME).description or ""
    assert "every 120 s plus up to 30 s of random jitter (25%)" in description
    assert "(every 10 s)" in description  # the evaluation interval, named as such


def test_why_each_selected_task_is_available(metastore: Metastore) -> None:
    from polaris_pipeline.tasks.summary import why_available

    now = metastore.now_ms()
    fresh = batch_task("A", create_timestamp=now - OLD_MS)
    expired = batch_task(
        "A", extra={Prop.EXECUTOR: "gone-host", Prop.START_TIME: "1", Prop.ATTEMPT_COUNT: "1"}
    )
    backoff = batch_task(
        "A",
        extra={
            Prop.EXECUTOR: "x",
            Prop.START_TIME: "1",
            Prop.ATTEMPT_COUNT: "2",
            Prop.STATUS: "failed",
            Prop.NEXT_ATTEMPT: "2",
        },
    )
    requeued = batch_task("A", extra={Prop.STATUS: "requeued", Prop.ATTEMPT_COUNT: "0"})
    metastore.insert_tasks([fresh, expired, backoff, requeued])
    reasons = {t.id: why_available(t) for t in metastore.list_tasks()}
    assert reasons[fresh.id] == "never leased, past the grace period"
    assert reasons[expired.id] == "lease expired"
    assert reasons[backoff.id] == "backoff over"
    assert reasons[requeued.id] == "requeued by an operator"


def test_a_key_of_a_run_started_past_the_lease_that_holds_nothing_is_asked_for_again(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    """A run whose worker died after it started but before it leased stays "started"
    (the default run launcher cannot tell run monitoring it died) and keeps its key:
    once its start is older than the lease timeout, the sweeper asks again under a new
    key, and not before."""
    [task] = old_tasks(metastore, "A", 1)
    resource = metastore_resource(metastore)
    [first] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]
    zombie = instance.create_run_for_job(
        job_def=polaris_task_job,
        run_config=run_config_for("A", task.id),
        status=DagsterRunStatus.STARTED,
        tags={**first.tags, "dagster/run_key": first.run_key or ""},
    )
    set_run_started(instance, zombie.run_id, time.time())
    recent = evaluate(resource, instance)
    # Still its run: nothing asked, or the same key, which Dagster drops.
    assert isinstance(recent, SkipReason) or all(
        r.run_key == first.run_key for r in recent.run_requests or []
    )

    set_run_started(instance, zombie.run_id, time.time() - resource.lease_timeout_ms / 1000 - 5)
    [again] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]
    assert (again.run_key or "").startswith(f"{first.run_key}:again:")
    assert again.tags["polaris/task_id"] == str(task.id)
    row = metastore.get_task("A", task.id)
    assert row is not None and row.attempt_count == 0 and row.executor_id is None


def test_a_key_a_finished_run_used_without_writing_the_task_is_asked_for_again(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    """A run that died before leasing (its retries used up) leaves the row, and so its
    run key, unchanged: Dagster would drop the next request for ever. The sweeper
    asks again under a new key instead."""
    from dagster import job, op

    [task] = old_tasks(metastore, "A", 1)
    resource = metastore_resource(metastore)
    [first] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]

    @op
    def died_before_leasing() -> None:
        raise RuntimeError("the run worker died")

    @job
    def stand_in() -> None:
        died_before_leasing()

    stand_in.execute_in_process(
        instance=instance, tags={"dagster/run_key": first.run_key or ""}, raise_on_error=False
    )
    row = metastore.get_task("A", task.id)
    assert row is not None and row.attempt_count == 0  # untouched: same version, same key

    [again] = evaluate(resource, instance).run_requests or []  # type: ignore[union-attr]
    assert again.run_key != first.run_key
    assert (again.run_key or "").startswith(f"{first.run_key}:again:")
    assert again.tags["polaris/task_id"] == str(task.id)


def test_the_sensor_warns_once_when_no_allowed_prefixes_bound_the_deletes(
    metastore: Metastore,
    instance: DagsterInstance,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    old_tasks(metastore, "A", 1)
    resource = metastore_resource(metastore)
    unbounded = PolarisStorageResource(locations=[{"prefix": f"file://{tmp_path}", "options": {}}])
    bounded = PolarisStorageResource(allowed_prefixes=[f"file://{tmp_path}/wh"])
    for storage in (unbounded, unbounded, bounded):
        evaluate(resource, instance, storage=storage)
    err = capfd.readouterr().err
    [line] = [line for line in err.splitlines() if UNBOUNDED_WARNING in line]  # once
    assert "WARNING" in line, line
