"""Run retention on real Dagster instances: SQLite and dagster-postgres.

Runs are made by executing jobs on the instance: a stand-in job under the task
job's name (the retention selects runs by job name; the stand-in's one op ends
as told, names a table by the run tags the task job gives, and can record an
in-run materialization), the retention job itself, and a job of another name.
One run is the real task job's (a task that is gone fails it at once).
Unfinished runs are created in their status with ``create_run_for_job``. Ages
are given by setting ``runs.update_timestamp`` in the run storage's own table
(Dagster has no API to backdate a run); the retention filters on that column.
"""

# No ``from __future__ import annotations``: Dagster reads an op's config
# annotation as a class, not a string.
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    Config,
    DagsterInstance,
    DagsterRunStatus,
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
    OpExecutionContext,
    Output,
    RunRequest,
    build_schedule_context,
    job,
    op,
)
from dagster._core.remote_origin import (
    InProcessCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.local_compute_log_manager import LocalComputeLogManager
from dagster._core.storage.noop_compute_log_manager import NoOpComputeLogManager
from dagster._core.storage.runs.schema import RunTagsTable
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster.components.testing import create_defs_folder_sandbox
from sqlalchemy import func, select

from builders.runs import set_run_updated
from polaris_pipeline.dagster import (
    PolarisSweeper,
    RetentionSettings,
    build_defs,
    build_defs_from_env,
)
from polaris_pipeline.dagster.contract import (
    JOB_NAME,
    PRIORITY_TAG,
    TAG_REALM,
    TAG_TABLE,
    TAG_TOTAL,
    run_config_for,
)
from polaris_pipeline.dagster.reporting import report_run
from polaris_pipeline.dagster.resources import PolarisStorageResource
from polaris_pipeline.dagster.retention import (
    RETENTION_JOB_NAME,
    RETENTION_OP_NAME,
    RETENTION_SCHEDULE_NAME,
    apply_retention,
    build_run_retention_job,
    build_run_retention_schedule,
)
from polaris_pipeline.dagster.tables import TableRef
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.step_record import STEP_RECORD_KEY, StepRecord
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.settings import PipelineSettings, SettingsError
from tests.support.dagster import dagster_postgres_url, metastore_resource, temp_instance

RETENTION = RetentionSettings(success_days=7, failure_days=30, batch_size=100)
TABLE_KEY = AssetKey(["polaris", "POLARIS", "catalog_unknown", "ns", "orders"])


class StandInConfig(Config):
    fail: bool = False
    # An asset key (parts joined by "/") to materialize inside the run.
    in_run_asset: str | None = None


@op
def stand_in_step(context: OpExecutionContext, config: StandInConfig) -> Output[int]:
    if config.in_run_asset:
        context.log_event(
            AssetMaterialization(config.in_run_asset.split("/"), metadata={"files deleted": 1})
        )
    # The table, recorded in each step as the task job records it (here: from the tag
    # the test gave the run).
    label = context.dagster_run.tags.get(TAG_TABLE)
    *namespace, name = label.split(".") if label else [""]
    ref = TableRef("POLARIS", tuple(namespace), name) if label else None
    table = DEFAULT_TRANSLATOR.table_metadata(ref)
    if config.fail:
        raise Failure("told to fail", metadata=table, allow_retries=False)
    # The task job's step record, as the run report reads it back.
    totals = OutcomeTotals(files_deleted=2, bytes_freed=20, tasks=Counter(done=1))
    return Output(1, metadata={**table, STEP_RECORD_KEY: StepRecord(totals).to_json()})


@job(name=JOB_NAME)
def task_job_stand_in() -> None:
    stand_in_step()


@job(name="some_other_job")
def other_job() -> None:
    stand_in_step()


RETENTION_JOB = build_run_retention_job()


# -- instances ---------------------------------------------------------------------


def _captures(request: pytest.FixtureRequest) -> bool:
    """Whether the test reads its runs' captured logs (``@pytest.mark.captured_logs``):
    Dagster's local compute-log manager starts a tail and a watcher process per step,
    which the tests that never look at the logs need not pay."""
    return request.node.get_closest_marker("captured_logs") is not None


@pytest.fixture
def pg_instance(
    dagster_pg_env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[DagsterInstance]:
    """A dagster-postgres instance on a database made for this test."""
    url = dagster_postgres_url(dagster_pg_env["DAGSTER_PG_DB"])
    home = tmp_path / "pg_home"
    with temp_instance(home, postgres_url=url, capture_logs=_captures(request)) as instance:
        yield instance


@pytest.fixture
def instance(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DagsterInstance]:
    """A SQLite instance; with ``captured_logs``, it captures its steps' logs, which
    retention deletes."""
    with temp_instance(tmp_path / "dagster_home", capture_logs=_captures(request)) as inst:
        yield inst


@pytest.fixture(params=["sqlite", "postgres"])
def any_instance(request: pytest.FixtureRequest) -> DagsterInstance:
    name = "instance" if request.param == "sqlite" else "pg_instance"
    instance = request.getfixturevalue(name)
    assert isinstance(instance, DagsterInstance)
    return instance


# -- making runs of every kind and age ----------------------------------------------


def backdate(instance: DagsterInstance, run_id: str, days: float) -> None:
    """Set the run's last update ``days`` ago (naive UTC, as Dagster stores it)."""
    set_run_updated(instance, run_id, datetime.now(UTC) - timedelta(days=days))


def finished(
    instance: DagsterInstance,
    days: float,
    *,
    of: JobDefinition = task_job_stand_in,
    fail: bool = False,
    tags: dict[str, str] | None = None,
    in_run_asset: str | None = None,
) -> str:
    config: dict[str, Any] = {"fail": fail, "in_run_asset": in_run_asset}
    result = of.execute_in_process(
        run_config={"ops": {"stand_in_step": {"config": config}}},
        instance=instance,
        tags={TAG_REALM: "POLARIS", **(tags or {})},
        raise_on_error=False,
    )
    assert result.success is not fail
    backdate(instance, result.run_id, days)
    return result.run_id


def _origin(job_name: str) -> RemoteJobOrigin:
    """Where a queued run's job would be loaded from (Dagster requires one)."""
    location = InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__))
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), job_name)


def unfinished(instance: DagsterInstance, status: DagsterRunStatus, days: float) -> str:
    run = instance.create_run_for_job(
        job_def=task_job_stand_in,
        run_config={"ops": {"stand_in_step": {"config": {}}}},
        status=status,
        tags={TAG_REALM: "POLARIS"},
        remote_job_origin=_origin(JOB_NAME),
    )
    backdate(instance, run.run_id, days)
    return run.run_id


def canceled(instance: DagsterInstance, days: float) -> str:
    run = instance.create_run_for_job(
        job_def=task_job_stand_in,
        run_config={"ops": {"stand_in_step": {"config": {}}}},
        status=DagsterRunStatus.CANCELED,
    )
    instance.report_run_canceled(run)
    backdate(instance, run.run_id, days)
    return run.run_id


def run_ids(instance: DagsterInstance) -> set[str]:
    return {r.run_id for r in instance.get_runs()}


def captured_logs(instance: DagsterInstance, run_id: str) -> list[Path]:
    """The run's files under the local compute log manager's directory (DAGSTER_HOME/storage)."""
    assert isinstance(instance.compute_log_manager, LocalComputeLogManager)
    run_dir = Path(instance.root_directory, "storage", run_id)
    return sorted(f for f in run_dir.rglob("*") if f.is_file())


def event_log_file(instance: DagsterInstance, run_id: str) -> Path | None:
    """The run's own event-log file on SQLite; None on an instance without one."""
    storage = instance.event_log_storage
    if not isinstance(storage, SqliteEventLogStorage):
        return None
    return Path(storage.path_for_shard(run_id))


def tag_rows(instance: DagsterInstance, run_id: str) -> int:
    with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
        query = select(func.count()).select_from(RunTagsTable)
        return int(conn.execute(query.where(RunTagsTable.c.run_id == run_id)).scalar_one())


def retain(instance: DagsterInstance, **run_config: Any) -> dict[str, Any]:
    """One run of the retention job; its op's metadata as plain values."""
    config = {"ops": {RETENTION_OP_NAME: {"config": run_config}}} if run_config else None
    result = RETENTION_JOB.execute_in_process(
        instance=instance, resources={"retention": RETENTION}, run_config=config
    )
    assert result.success
    [output] = [e for e in result.events_for_node(RETENTION_OP_NAME) if e.is_successful_output]
    metadata = output.step_output_data.metadata
    return {k: v.value for k, v in metadata.items()}


# -- what goes, what stays ------------------------------------------------------------


@pytest.mark.captured_logs
def test_only_old_finished_runs_of_the_task_job_and_their_events_go(
    any_instance: DagsterInstance,
) -> None:
    instance = any_instance
    own_old = RETENTION_JOB.execute_in_process(
        instance=instance, resources={"retention": RetentionSettings()}
    ).run_id  # retention off: it keeps everything
    backdate(instance, own_old, 10)
    go = {
        "success 10 d": finished(instance, 10),
        "failure 40 d": finished(instance, 40, fail=True),
        "canceled 40 d": canceled(instance, 40),
        "own success 10 d": own_old,
    }
    stay = {
        "success 3 d": finished(instance, 3),
        "failure 10 d": finished(instance, 10, fail=True),  # failures are kept 30 d
        "canceled 10 d": canceled(instance, 10),
        "other job success 100 d": finished(instance, 100, of=other_job),
        "other job failure 100 d": finished(instance, 100, of=other_job, fail=True),
        "queued 100 d": unfinished(instance, DagsterRunStatus.QUEUED, 100),
        "not started 100 d": unfinished(instance, DagsterRunStatus.NOT_STARTED, 100),
        "starting 100 d": unfinished(instance, DagsterRunStatus.STARTING, 100),
        "started 100 d": unfinished(instance, DagsterRunStatus.STARTED, 100),
        "canceling 100 d": unfinished(instance, DagsterRunStatus.CANCELING, 100),
    }
    assert all(instance.all_logs(run_id) for run_id in go.values())
    assert tag_rows(instance, go["success 10 d"]) > 0
    executed = [k for k in go if not k.startswith("canceled")]  # these captured their steps
    assert all(captured_logs(instance, go[k]) for k in executed), executed
    sqlite = isinstance(instance.event_log_storage, SqliteEventLogStorage)
    shards = [event_log_file(instance, run_id) for run_id in go.values()]
    assert all(path is not None and path.is_file() for path in shards) is sqlite

    metadata = retain(instance)

    remaining = run_ids(instance)
    assert not set(go.values()) & remaining, [k for k, v in go.items() if v in remaining]
    assert set(stay.values()) <= remaining
    # What delete_run leaves went too (checked before any read, which on SQLite makes
    # a run's event-log file again), and only that of the deleted runs.
    for name, run_id in go.items():
        assert captured_logs(instance, run_id) == [], name
        path = event_log_file(instance, run_id)
        assert path is None or not path.exists(), name
    for name in ("success 3 d", "failure 10 d", "other job success 100 d"):
        assert captured_logs(instance, stay[name]), name
        path = event_log_file(instance, stay[name])
        assert path is None or path.is_file(), name
    assert metadata["captured logs deleted"] == 4 and metadata["captured logs kept"] == 0
    assert metadata["event-log files removed"] == (4 if sqlite else 0)
    assert "captured logs error" not in metadata
    for run_id in go.values():
        assert instance.get_run_by_id(run_id) is None
        assert instance.all_logs(run_id) == []  # its event log went with it
        assert tag_rows(instance, run_id) == 0
    for name, run_id in stay.items():
        if not name.startswith(("queued", "not", "starting", "started", "canceling", "canceled")):
            assert instance.all_logs(run_id), name
    assert metadata["dry run"] is False
    assert metadata["runs"] == 4
    assert metadata[f"runs {JOB_NAME} success > 7 d"] == 1
    assert metadata[f"runs {JOB_NAME} failure > 30 d"] == 2
    assert metadata[f"runs {RETENTION_JOB_NAME} success > 7 d"] == 1
    assert metadata["older runs left"] == 0
    assert {r["run_id"] for r in metadata["first 100 runs"]} == set(go.values())

    # A second pass finds nothing more.
    again = retain(instance)
    assert again["runs"] == 0 and set(stay.values()) <= run_ids(instance)


def test_each_tick_deletes_one_bounded_batch_oldest_first(any_instance: DagsterInstance) -> None:
    instance = any_instance
    old = [finished(instance, 20 - i) for i in range(5)]  # created oldest first
    settings = RetentionSettings(success_days=7, batch_size=2)
    passes = []
    while True:
        result = apply_retention(instance, settings)
        passes.append([r.dagster_run.run_id for r in result.runs])
        assert len(result.runs) <= 2
        assert result.left == len(old) - sum(len(p) for p in passes)
        if not result.runs:
            break
    assert passes == [old[0:2], old[2:4], old[4:5], []]
    assert not set(old) & run_ids(instance)


@pytest.mark.captured_logs
def test_a_dry_run_records_the_same_runs_and_deletes_nothing(
    any_instance: DagsterInstance,
) -> None:
    instance = any_instance
    unreported = finished(instance, 10, tags={TAG_REALM: "POLARIS", TAG_TABLE: "ns.orders"})
    failed = finished(instance, 40, fail=True)
    before = run_ids(instance)
    logs = {run_id: len(instance.all_logs(run_id)) for run_id in before}
    files = {run_id: captured_logs(instance, run_id) for run_id in (unreported, failed)}
    assert all(files.values())
    shards = [event_log_file(instance, run_id) for run_id in (unreported, failed)]

    # By the settings, and by the launch's own config whatever the settings.
    by_settings = apply_retention(instance, RETENTION.model_copy(update={"dry_run": True}))
    by_launch = retain(instance, dry_run=True)

    assert by_settings.dry_run and by_launch["dry run"] is True
    assert {r.dagster_run.run_id for r in by_settings.runs} == {unreported, failed}
    assert {r["run_id"] for r in by_launch["first 100 runs"]} == {unreported, failed}
    assert "would delete 2 run(s)" in by_settings.line()
    # Nothing deleted, nothing reported: no run, event, tag or table event changed.
    assert before <= run_ids(instance)
    assert all(len(instance.all_logs(run_id)) == n for run_id, n in logs.items())
    run = instance.get_run_by_id(unreported)
    assert run is not None and TAG_TOTAL not in run.tags
    assert by_settings.reported == 0 and by_launch["reported first"] == 0
    assert TABLE_KEY not in instance.get_asset_keys()
    # No file either: captured logs and event-log files stay.
    assert all(captured_logs(instance, run_id) == f for run_id, f in files.items())
    assert all(path is None or path.is_file() for path in shards)
    assert by_settings.logs_deleted == by_settings.event_log_files_removed == 0
    assert by_launch["captured logs deleted"] == by_launch["event-log files removed"] == 0
    assert "captured logs" not in by_settings.line()

    # The real pass then deletes exactly those.
    assert {r["run_id"] for r in retain(instance)["first 100 runs"]} == {unreported, failed}


class UndeletableComputeLogs(NoOpComputeLogManager):
    """A compute log manager without deletion, as a third-party one may be."""

    def delete_logs(
        self, log_key: Sequence[str] | None = None, prefix: Sequence[str] | None = None
    ) -> None:
        raise NotImplementedError("this manager keeps every log")


def test_captured_logs_that_cannot_be_deleted_are_counted_not_fatal(tmp_path: Path) -> None:
    logs = {"module": __name__, "class": UndeletableComputeLogs.__name__, "config": {}}
    with temp_instance(tmp_path / "home", overrides={"compute_logs": logs}) as instance:
        assert isinstance(instance.compute_log_manager, UndeletableComputeLogs)
        old = [finished(instance, 10), finished(instance, 12)]

        result = apply_retention(instance, RETENTION)

        assert {r.dagster_run.run_id for r in result.runs} == set(old)
        assert not set(old) & run_ids(instance)  # the runs went all the same
        assert (result.logs_deleted, result.logs_kept) == (0, 2)
        assert result.logs_error == "NotImplementedError: this manager keeps every log"
        assert "captured logs kept for 2 run(s): NotImplementedError" in result.line()
        assert result.event_log_files_removed == 2
        assert result.metadata()["captured logs error"].value == result.logs_error


# -- the tables' history --------------------------------------------------------------


def _materializations(instance: DagsterInstance, key: AssetKey) -> list[AssetMaterialization]:
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=10).records
    return [r.asset_materialization for r in records if r.asset_materialization is not None]


def test_each_table_keeps_its_purges_and_every_asset_its_latest_state(
    any_instance: DagsterInstance,
) -> None:
    instance = any_instance
    table_tags = {TAG_REALM: "POLARIS", TAG_TABLE: "ns.orders"}
    # Reported by the run report (a runless event: delete_run does not touch it).
    reported = finished(instance, 10, tags=table_tags)
    record = instance.get_run_by_id(reported)
    assert record is not None
    report_run(instance, record)  # tags the run: its last update is now
    backdate(instance, reported, 10)
    # Not yet reported (the report sensor was stopped): reported before it goes.
    unreported = finished(instance, 40, fail=True, tags=table_tags)
    # In-run materializations: of "a", an older and the latest run go; of "b", the
    # latest run is recent and stays.
    a_older = finished(instance, 20, in_run_asset="retention/a")
    a_latest = finished(instance, 15, in_run_asset="retention/a")
    b_old = finished(instance, 20, in_run_asset="retention/b")
    b_recent = finished(instance, 1, in_run_asset="retention/b")

    metadata = retain(instance)

    assert metadata["runs"] == 5 and {reported, unreported, a_older, a_latest, b_old}.isdisjoint(
        run_ids(instance)
    )
    # The table: both purges stay, each naming its (now deleted) run and how it ended.
    # Every run without the report's polaris/total tag: the table's and the in-run ones.
    assert metadata["reported first"] == 4
    table = _materializations(instance, TABLE_KEY)
    assert {(m.metadata["run"].value, m.metadata["run status"].value) for m in table} == {
        (reported, "success"),
        (unreported, "failure"),
    }
    deleted = {m.metadata["run"].value: m.metadata["files deleted"].value for m in table}
    assert deleted == {reported: 2, unreported: 0}  # the failed step deleted nothing
    # "a": its latest state carried as a runless event; the older one is gone with its run.
    assert metadata["materializations carried"] == 1
    [carried] = _materializations(instance, AssetKey(["retention", "a"]))
    assert carried.metadata["materialized by run"].value == a_latest
    assert carried.metadata["files deleted"].value == 1
    latest = instance.get_latest_materialization_event(AssetKey(["retention", "a"]))
    assert latest is not None and latest.run_id == ""  # runless: no run to delete
    # "b": its latest run stays, so nothing was carried.
    [b] = _materializations(instance, AssetKey(["retention", "b"]))
    assert "materialized by run" not in b.metadata
    latest_b = instance.get_latest_materialization_event(AssetKey(["retention", "b"]))
    assert latest_b is not None and latest_b.run_id == b_recent


# -- the schedule and the settings ---------------------------------------------------


def _schedule_status(defs: Any) -> DefaultScheduleStatus | None:
    """The retention schedule's default status; None: the deployment has no such schedule."""
    names = {s.name for s in defs.get_repository_def().schedule_defs}
    if RETENTION_SCHEDULE_NAME not in names:
        return None
    return defs.resolve_schedule_def(RETENTION_SCHEDULE_NAME).default_status


def test_no_retention_job_or_schedule_until_an_age_is_configured() -> None:
    """Run retention is opt-in: a deployment without an age carries neither its job nor its
    schedule; with one, the schedule runs by itself."""
    defs = build_defs()
    assert RETENTION_JOB_NAME not in {j.name for j in defs.resolve_all_job_defs()}
    assert _schedule_status(defs) is None
    assert dict(defs.resources or {})["retention"] == RetentionSettings()

    configured = build_defs(retention=RetentionSettings(failure_days=90, cron="*/5 * * * *"))
    assert _schedule_status(configured) is DefaultScheduleStatus.RUNNING
    assert configured.resolve_schedule_def(RETENTION_SCHEDULE_NAME).cron_schedule == "*/5 * * * *"

    from_env = build_defs_from_env(
        {
            "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "14",
            "POLARIS_PIPELINE_RETENTION_FAILURE_DAYS": "60",
            "POLARIS_PIPELINE_RETENTION_BATCH_SIZE": "50",
            "POLARIS_PIPELINE_RETENTION_DRY_RUN": "true",
        }
    )
    assert _schedule_status(from_env) is DefaultScheduleStatus.RUNNING
    assert dict(from_env.resources or {})["retention"] == RetentionSettings(
        success_days=14, failure_days=60, batch_size=50, dry_run=True
    )
    assert _schedule_status(build_defs_from_env({})) is None


def test_the_component_configures_the_retention() -> None:
    defs_yaml = {
        "type": "polaris_pipeline.dagster.PolarisSweeper",
        "attributes": {
            "metastore": {"url": "sqlite:////tmp/never-opened.db"},
            "retention": {"success_days": 3, "failure_days": 21, "batch_size": 10},
        },
    }
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(
            component_cls=PolarisSweeper, defs_yaml_contents=defs_yaml
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
            assert _schedule_status(defs) is DefaultScheduleStatus.RUNNING
            retention = dict(defs.resources or {})["retention"]
            assert (retention.success_days, retention.failure_days) == (3, 21)
            assert (retention.batch_size, retention.dry_run) == (10, False)


def test_a_tick_is_skipped_while_a_retention_run_is_unfinished(instance: DagsterInstance) -> None:
    schedule = build_run_retention_schedule(RETENTION_JOB, RETENTION)
    with build_schedule_context(instance=instance) as context:
        assert isinstance(schedule.evaluate_tick(context).run_requests[0], RunRequest)  # type: ignore[index]
    instance.create_run_for_job(job_def=RETENTION_JOB, status=DagsterRunStatus.STARTING)
    with build_schedule_context(instance=instance) as context:
        data = schedule.evaluate_tick(context)
    assert not data.run_requests and "not finished yet" in (data.skip_message or "")


def test_a_retention_run_is_queued_ahead_of_the_task_runs() -> None:
    # Dagster's run queue starts the highest dagster/priority first (unset is 0). The
    # job's tags are its runs' (the soak reads them on the runs its daemon started);
    # the sweeper's run requests add no priority to the task job's.
    def priority(job_def: JobDefinition) -> int:
        return int(job_def.tags.get(PRIORITY_TAG, "0"))

    assert priority(RETENTION_JOB) > priority(polaris_task_job) == 0


def test_bad_retention_values_are_refused_by_name() -> None:
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS='0'"):
        PipelineSettings.from_env({"POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "0"})
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_RETENTION_BATCH_SIZE='x'"):
        PipelineSettings.from_env({"POLARIS_PIPELINE_RETENTION_BATCH_SIZE": "x"})
    with pytest.raises(ValueError, match="batch_size"):
        build_defs(retention=RetentionSettings(success_days=1, batch_size=0))


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
def test_a_real_task_job_run_goes_with_its_events(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    # An operator's run of a task that is gone: the real task job fails it at once.
    result = polaris_task_job.execute_in_process(
        run_config=run_config_for("POLARIS", 999, entity_version=1),
        instance=instance,
        resources={"metastore": metastore_resource(metastore), "storage": PolarisStorageResource()},
        raise_on_error=False,
    )
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE
    assert run.job_name == JOB_NAME and instance.all_logs(result.run_id)
    backdate(instance, result.run_id, 31)

    metadata = retain(instance)

    assert metadata["runs"] == 1 and metadata["reported first"] == 1
    assert instance.get_run_by_id(result.run_id) is None
    assert instance.all_logs(result.run_id) == []


class _OwnKeys(PolarisTranslator):
    def table_asset_key(self, ref: TableRef) -> AssetKey:
        return AssetKey(["mine", ref.name])


def test_an_unreported_run_is_reported_by_the_task_job_s_translator(
    instance: DagsterInstance,
) -> None:
    run_id = finished(instance, 10, tags={TAG_REALM: "POLARIS", TAG_TABLE: "ns.orders"})
    retention_job = build_run_retention_job(translator=_OwnKeys())
    result = retention_job.execute_in_process(instance=instance, resources={"retention": RETENTION})
    assert result.success and instance.get_run_by_id(run_id) is None
    [event] = _materializations(instance, AssetKey(["mine", "orders"]))
    assert event.metadata["run"].value == run_id
    assert TABLE_KEY not in instance.get_asset_keys()
