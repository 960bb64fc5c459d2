"""``deploy/dagster.yaml`` exactly as shipped, on a fresh PostgreSQL database.

The test copies the file into a temporary DAGSTER_HOME, points its environment
variables at a database created here (and dropped afterwards), queues a realm
realm sweep with the documented command, lets the run queue start it through the
file's run launcher, and reads the outcome back from PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.remote_representation.grpc_server_registry import GrpcServerRegistry
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)
from dagster._grpc.constants import GrpcServerCommand
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from tests.support.deploy import dagster_home_from_deploy
from tests.support.metastore import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parent.parent
DAGSTER = str(Path(sys.executable).parent / "dagster")
OLD_MS = 60 * 60_000
BACKFILL_JOB = "polaris_realm_backfill_job"
# As docs/operations.md shows it.
BACKFILL_COMMAND = [DAGSTER, "job", "launch", "-w", "workspace.yaml", "-j", BACKFILL_JOB]
_ENDED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def dagster_pg_url(env: dict[str, str]) -> str:
    return make_url(PG_ADMIN_URL).set(database=env["DAGSTER_PG_DB"]).render_as_string(False)


# -- tests -------------------------------------------------------------------------


def test_the_shipped_file_configures_the_instance_as_documented(
    dagster_pg_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in dagster_pg_env.items():
        monkeypatch.setenv(name, value)
    home = dagster_home_from_deploy(tmp_path)
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        # The driver is pinned: dagster-postgres on psycopg2, whatever SQLAlchemy's default.
        url = make_url(instance.run_storage.postgres_url)  # type: ignore[attr-defined]
        assert url.drivername == "postgresql+psycopg2"
        assert url.database == dagster_pg_env["DAGSTER_PG_DB"]
        assert url.port == int(dagster_pg_env["DAGSTER_PG_PORT"])
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None
        [limit] = queue.tag_concurrency_limits
        assert limit["key"] == "polaris/realm"
        assert limit["value"] == {"applyLimitPerUniqueValue": True}
        assert 1 <= limit["limit"] < queue.max_concurrent_runs
        assert instance.run_retries_enabled
        assert instance.run_retries_max_retries == 0  # only jobs that ask are retried
        assert instance.run_monitoring_enabled
        assert not instance.telemetry_enabled
        # Tick retention: no tick of any status is kept for ever (Dagster's default),
        # the sweeper's many skipped ticks a day only.
        sensor_ticks = instance.get_tick_retention_settings(InstigatorType.SENSOR)
        assert sensor_ticks[TickStatus.SKIPPED] == 1
        assert set(sensor_ticks) == set(TickStatus)
        assert all(days > 0 for days in sensor_ticks.values()), sensor_ticks
        schedule_ticks = instance.get_tick_retention_settings(InstigatorType.SCHEDULE)
        assert all(days > 0 for days in schedule_ticks.values()), schedule_ticks
    # Dagster created its tables in the test's database, not anywhere else.
    engine = create_engine(dagster_pg_url(dagster_pg_env), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            tables = set(
                conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                ).scalars()
            )
    finally:
        engine.dispose()
    assert {"runs", "event_logs", "jobs", "job_ticks"} <= tables


@pytest.mark.slow
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_backfill_through_the_run_queue_on_the_shipped_instance(
    metastore: Metastore,
    dagster_pg_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    table.mkdir(parents=True)
    files = {realm: [table / f"{realm}-{i}.avro" for i in range(2)] for realm in ("A", "B")}
    for path in files["A"] + files["B"]:
        path.write_bytes(b"x" * 10)
    location = {"storageLocation": f"file://{table}"}
    old = metastore.now_ms() - OLD_MS
    tasks = {
        realm: batch_task(
            realm, [str(p) for p in files[realm]], internal=location, create_timestamp=old
        )
        for realm in ("A", "B")
    }
    metastore.insert_tasks(list(tasks.values()))

    home = dagster_home_from_deploy(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLARIS_", "DAGSTER_"))}
    env.update(dagster_pg_env)
    env.update(
        DAGSTER_HOME=str(home),
        POLARIS_METASTORE_URL=metastore.url.render_as_string(hide_password=False),
    )
    # The code server and run worker the workspace starts below inherit this environment.
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    # The documented command. With the QueuedRunCoordinator it only queues the run.
    proc = subprocess.run(
        [
            *BACKFILL_COMMAND,
            "--tags",
            '{"polaris/realm": "A"}',
            "--config-json",
            '{"ops": {"sweep_realm": {"config": {"realm": "A"}}}}',
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    with DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs(RunsFilter(job_name=BACKFILL_JOB))
        assert run.status == DagsterRunStatus.QUEUED
        assert run.tags["polaris/realm"] == "A" and "dagster/partition" not in run.tags
        # The daemon's run queue, one iteration: starts it through DefaultRunLauncher,
        # in a run worker of the code server that the workspace starts.
        workspace = WorkspaceFileTarget(paths=[str(ROOT / "workspace.yaml")])
        # Like the daemon's own registry, but one that waits for its code server to
        # exit, so that no process outlives the test (and its database).
        registry = GrpcServerRegistry(
            instance_ref=instance.get_ref(),
            server_command=GrpcServerCommand.API_GRPC,
            heartbeat_ttl=30,
            startup_timeout=180,
            wait_for_processes_on_shutdown=True,
        )
        with (
            registry,
            WorkspaceProcessContext(instance, workspace, grpc_server_registry=registry) as context,
        ):
            with QueuedRunCoordinatorDaemon(interval_seconds=1) as daemon:
                list(daemon.run_iteration(context))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                status = instance.get_run_by_id(run.run_id).status  # type: ignore[union-attr]
                if status in _ENDED:
                    break
                time.sleep(0.5)
        run_id = run.run_id

    # A fresh instance from the same file reads it all back from PostgreSQL.
    with DagsterInstance.from_config(str(home)) as instance:
        finished = instance.get_run_by_id(run_id)
        assert finished is not None
        assert finished.status == DagsterRunStatus.SUCCESS, [
            e.user_message for e in instance.all_logs(run_id)
        ][-10:]
    engine = create_engine(dagster_pg_url(dagster_pg_env), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            events = set(
                conn.execute(
                    text("SELECT dagster_event_type FROM event_logs WHERE run_id = :r"),
                    {"r": run_id},
                ).scalars()
            )
    finally:
        engine.dispose()
    assert {"PIPELINE_ENQUEUED", "PIPELINE_STARTING", "PIPELINE_START"} <= events
    assert {"STEP_SUCCESS", "PIPELINE_SUCCESS"} <= events

    # Realm A is clean; realm B is untouched.
    assert metastore.get_task("A", tasks["A"].id) is None
    assert not any(p.exists() for p in files["A"])
    row_b = metastore.get_task("B", tasks["B"].id)
    assert row_b is not None and row_b.executor_id is None
    assert all(p.exists() for p in files["B"])
