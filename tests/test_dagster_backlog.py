"""The backlog asset and its checks against real metastores: reported by the sweeper's
ticks, and materialized by Dagster on demand."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    FloatMetadataValue,
    IntMetadataValue,
    SensorResult,
    build_sensor_context,
    materialize,
)

from builders.tasks import batch_task
from polaris_pipeline.dagster.backlog import (
    BACKLOG_CHECKS,
    WATCH_NAME,
    BacklogSettings,
    polaris_task_backlog,
)
from polaris_pipeline.dagster.backlog.checks import (
    DEAD_CHECK,
    FAILING_CHECK,
    FRESHNESS_CHECK,
    ORPHAN_CHECK,
)
from polaris_pipeline.dagster.backlog.report import (
    ASSET_NAME,
    OLDEST_ORPHAN_KEY,
    TOTAL_KEY,
    realm_key,
)
from polaris_pipeline.dagster.definitions import build_defs_from_env
from polaris_pipeline.dagster.leaks import LEAKS_ASSET, LEAKS_SCHEDULE
from polaris_pipeline.dagster.resources import SweeperSettings
from polaris_pipeline.dagster.retention import RETENTION_JOB_NAME, RETENTION_SCHEDULE_NAME
from polaris_pipeline.dagster.sweeper import SENSOR_NAME, SweepCursor
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskRow, TaskState
from polaris_pipeline.tasks.summary import orphaned_since_ms
from tests.support.dagster import (
    dagster_home,
    deployed_sensor,
    metastore_resource,
    sweeper_resources,
)
from tests.support.tasks import seed

ROOT = Path(__file__).resolve().parent.parent
DAGSTER = str(Path(sys.executable).parent / "dagster")
GRACE_MS = 30_000
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
ASSET_KEY = AssetKey(ASSET_NAME)


# A real grace period, so that pending tasks exist.
pytestmark = pytest.mark.lease_policy(grace_ms=GRACE_MS)


def refresh(
    store: Metastore,
    instance: DagsterInstance,
    realm: str | None,
    settings: BacklogSettings | None = None,
) -> Any:
    """Materialize the backlog with its checks, as the schedule's run does.

    ``realm``: a deployment restricted to that realm; None: every realm with tasks.
    """
    result = materialize(
        [polaris_task_backlog, *BACKLOG_CHECKS],
        instance=instance,
        resources={
            "metastore": metastore_resource(store, realms=[realm] if realm else None),
            "backlog": settings or BacklogSettings(),
            "sweeper": SweeperSettings(interval_seconds=60, jitter=0.5),
        },
    )
    assert result.success
    return result


def check_results(result: Any) -> dict[str, Any]:
    evaluations = result.get_asset_check_evaluations()
    return {e.check_name: e for e in evaluations}


def stored_status(instance: DagsterInstance, check_name: str) -> str:
    """The latest stored evaluation of a check (what the UI shows)."""
    key = AssetCheckKey(ASSET_KEY, check_name)
    [record] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    return record.status.value


def values(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v.value for k, v in metadata.items()}


# -- seeding the states ------------------------------------------------------------


def orphan(store: Metastore, realm: str, age_ms: int) -> NewTask:
    """Never leased, created ``age_ms`` ago: orphaned once the grace period is over."""
    [task] = seed(store, realm, 1, create_timestamp=store.now_ms() - age_ms)
    return task


def leased(store: Metastore, realm: str) -> NewTask:
    now = store.now_ms()
    task = batch_task(
        realm,
        create_timestamp=now - HOUR_MS,
        extra={
            Prop.EXECUTOR: "polaris-server-1",
            Prop.START_TIME: str(now),
            Prop.ATTEMPT_COUNT: "1",
        },
    )
    store.insert_tasks([task])
    return task


def backing_off(store: Metastore, realm: str) -> int:
    task = orphan(store, realm, HOUR_MS)
    lease = store.lease_task(realm, task.id, "test-executor")
    assert lease is not None
    store.fail(lease, "storage said no")
    return task.id


def dead(store: Metastore, realm: str, error: str) -> int:
    """Dead-lettered the way the engine does it: the last allowed attempt failed."""
    task = orphan(store, realm, HOUR_MS)
    strict = Metastore(store.url.render_as_string(False), policy=TaskPolicy(max_attempts=1))
    try:
        lease = strict.lease_task(realm, task.id, "test-executor")
        assert lease is not None
        assert strict.fail(lease, error).outcome.value == "dead"
    finally:
        strict.dispose()
    return task.id


# -- the asset ---------------------------------------------------------------------


def test_backlog_metadata_equals_the_metastore_counts(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    seed(metastore, "A", 2)  # fresh: pending within grace
    orphans = [orphan(metastore, "A", 10 * MINUTE_MS) for _ in range(3)]
    leased(metastore, "A")
    backing_off(metastore, "A")
    dead(metastore, "A", "refused: outside the table location")
    seed(metastore, "B", 4, create_timestamp=metastore.now_ms() - HOUR_MS)  # another realm

    result = refresh(metastore, instance, "A")

    counts = metastore.count_by_state(["A"])["A"]
    expected = {
        TaskState.PENDING: 2,
        TaskState.ORPHANED: 3,
        TaskState.LEASED: 1,
        TaskState.BACKING_OFF: 1,
        TaskState.DEAD: 1,
    }
    assert dict(counts) == expected
    [materialization] = result.asset_materializations_for_node(ASSET_NAME)
    assert materialization.partition is None
    meta = values(dict(materialization.metadata))
    for state in TaskState:
        assert meta[state.value] == counts[state], state
    assert meta[TOTAL_KEY] == 8
    # The orphans were created 10 min ago; each became available when its grace ended.
    waited = (10 * MINUTE_MS - GRACE_MS) / 1000
    assert waited - 1 <= meta[OLDEST_ORPHAN_KEY] <= waited + 30
    assert len(orphans) == 3

    # What the UI plots: the stored event, with numeric values.
    [record] = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=ASSET_KEY), limit=1
    ).records
    stored = record.asset_materialization
    assert stored is not None
    assert all(isinstance(stored.metadata[s.value], IntMetadataValue) for s in TaskState)
    assert isinstance(stored.metadata[OLDEST_ORPHAN_KEY], FloatMetadataValue)
    assert stored.metadata[TaskState.ORPHANED.value].value == 3

    assert stored.metadata[realm_key("A", TaskState.ORPHANED.value)].value == 3
    assert realm_key("B", TOTAL_KEY) not in stored.metadata  # a deployment of realm A

    # Every realm in one materialization: the sums, and each realm's own numbers.
    result_all = refresh(metastore, instance, None)
    [mat_all] = result_all.asset_materializations_for_node(ASSET_NAME)
    meta_all = values(dict(mat_all.metadata))
    assert meta_all[TaskState.ORPHANED.value] == 7 and meta_all[TOTAL_KEY] == 12
    assert meta_all[realm_key("B", TaskState.ORPHANED.value)] == 4
    assert meta_all[realm_key("B", TOTAL_KEY)] == 4
    assert meta_all[realm_key("A", TOTAL_KEY)] == 8
    assert meta_all[realm_key("B", OLDEST_ORPHAN_KEY)] >= (HOUR_MS - GRACE_MS) / 1000 - 1
    assert meta_all[OLDEST_ORPHAN_KEY] == meta_all[realm_key("B", OLDEST_ORPHAN_KEY)]


def test_checks_pass_on_a_clean_realm(metastore: Metastore, instance: DagsterInstance) -> None:
    seed(metastore, "CLEAN", 2)  # pending
    leased(metastore, "CLEAN")
    orphan(metastore, "CLEAN", 5 * MINUTE_MS)  # an orphan, but a young one
    dead(metastore, "OTHER", "not this realm's problem")

    result = refresh(metastore, instance, "CLEAN")

    checks = check_results(result)
    assert set(checks) == {DEAD_CHECK, ORPHAN_CHECK, FAILING_CHECK, FRESHNESS_CHECK}
    assert checks[DEAD_CHECK].passed and checks[ORPHAN_CHECK].passed
    assert checks[FAILING_CHECK].passed
    assert checks[DEAD_CHECK].partition is None
    assert stored_status(instance, DEAD_CHECK) == "SUCCEEDED"
    assert values(dict(checks[DEAD_CHECK].metadata)) == {
        "dead tasks": 0,
        realm_key("CLEAN", "dead tasks"): 0,
    }
    orphan_meta = values(dict(checks[ORPHAN_CHECK].metadata))
    assert orphan_meta["orphaned"] == 1 and orphan_meta["stale orphans"] == 0
    assert orphan_meta["threshold (s)"] == 3600.0

    # An empty realm passes too.
    empty = check_results(refresh(metastore, instance, "EMPTY"))
    assert empty[DEAD_CHECK].passed and empty[ORPHAN_CHECK].passed


def test_dead_check_fails_with_the_ids_and_last_errors(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    first = dead(metastore, "A", "refused: s3://other-bucket/x is outside the table location")
    second = dead(metastore, "A", "payload is not JSON")
    orphan(metastore, "A", 5 * MINUTE_MS)

    result = refresh(metastore, instance, "A")

    check = check_results(result)[DEAD_CHECK]
    assert not check.passed
    assert check.severity == AssetCheckSeverity.ERROR
    assert check.partition is None
    meta = values(dict(check.metadata))
    assert meta["dead tasks"] == 2 and meta[realm_key("A", "dead tasks")] == 2
    sample = {entry["task_id"]: entry for entry in meta["sample"]}
    assert set(sample) == {str(first), str(second)}
    assert sample[str(first)]["last_error"].startswith("refused: s3://other-bucket/x")
    assert sample[str(second)]["last_error"] == "payload is not JSON"
    assert sample[str(first)]["attempts"] == 1
    # A real id to paste, not a placeholder: one of the two dead tasks'.
    revive = meta["revive with"]
    assert revive in {f"polaris-pipeline tasks requeue {t} --realm A" for t in (first, second)}
    assert "2 dead-lettered task(s) in realm A" in (check.description or "")
    # The failed check is stored on the instance, as the UI shows it.
    assert stored_status(instance, DEAD_CHECK) == "FAILED"
    assert stored_status(instance, ORPHAN_CHECK) == "SUCCEEDED"

    # Requeued, the task is no longer dead: the check passes again.
    for task_id in (first, second):
        metastore.requeue("A", task_id)
    assert check_results(refresh(metastore, instance, "A"))[DEAD_CHECK].passed
    assert stored_status(instance, DEAD_CHECK) == "SUCCEEDED"


def test_orphan_check_fails_on_an_old_orphan(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    stale = orphan(metastore, "A", 2 * HOUR_MS)
    # Leased 90 minutes ago by a server that died: orphaned since the lease expired.
    now = metastore.now_ms()
    expired = batch_task(
        "A",
        create_timestamp=now - 2 * HOUR_MS,
        extra={
            Prop.EXECUTOR: "polaris-server-gone",
            Prop.START_TIME: str(now - 90 * MINUTE_MS),
            Prop.ATTEMPT_COUNT: "1",
        },
    )
    metastore.insert_tasks([expired])
    young = orphan(metastore, "A", 10 * MINUTE_MS)

    check = check_results(refresh(metastore, instance, "A"))[ORPHAN_CHECK]

    assert not check.passed
    assert check.severity == AssetCheckSeverity.ERROR
    meta = values(dict(check.metadata))
    assert meta["orphaned"] == 3 and meta["stale orphans"] == 2
    oldest = (2 * HOUR_MS - GRACE_MS) / 1000
    assert oldest - 1 <= meta[OLDEST_ORPHAN_KEY] <= oldest + 30
    ids = [entry["task_id"] for entry in meta["sample"]]
    assert ids == [str(stale.id), str(expired.id)]  # longest-waiting first
    expired_wait = meta["sample"][1]["waiting_s"]
    assert (90 * MINUTE_MS - 60_000) / 1000 - 1 <= expired_wait <= (90 * MINUTE_MS) / 1000
    assert str(young.id) not in ids

    # The threshold is configurable: at 5 minutes the young orphan is stale too.
    strict = BacklogSettings(max_orphan_age_seconds=300)
    check = check_results(refresh(metastore, instance, "A", strict))[ORPHAN_CHECK]
    meta = values(dict(check.metadata))
    assert not check.passed and meta["stale orphans"] == 3 and meta["threshold (s)"] == 300.0


def test_settings_from_env() -> None:
    def backlog_of(env: dict[str, str]) -> BacklogSettings:
        return (build_defs_from_env(env).resources or {})["backlog"]

    assert backlog_of({}).max_orphan_age_seconds == 3600
    assert (
        backlog_of(
            {"POLARIS_PIPELINE_BACKLOG_MAX_ORPHAN_AGE_SECONDS": "900"}
        ).max_orphan_age_seconds
        == 900
    )
    with pytest.raises(ValueError, match="POLARIS_PIPELINE_BACKLOG_MAX_ORPHAN_AGE_SECONDS"):
        backlog_of({"POLARIS_PIPELINE_BACKLOG_MAX_ORPHAN_AGE_SECONDS": "soon"})


def _row(
    create: int, last_update: int | None = None, props: dict[str, str] | None = None
) -> TaskRow:
    return TaskRow(
        realm_id="A",
        id=1,
        name="t",
        entity_version=1,
        grant_records_version=1,
        create_timestamp=create,
        last_update_timestamp=create if last_update is None else last_update,
        properties=dict(props or {}),
    )


def test_orphaned_since_follows_each_way_a_task_becomes_available() -> None:
    policy = TaskPolicy(lease_timeout_ms=60_000, grace_ms=30_000)
    t0 = 1_000_000_000_000
    # Polaris's own task, never leased: after the grace period.
    assert orphaned_since_ms(_row(t0), policy) == t0 + 30_000
    # Our child task: no grace.
    assert orphaned_since_ms(_row(t0, props={Prop.CREATED_BY: "polaris-pipeline"}), policy) == t0
    # A lease that expired: at start + timeout.
    lapsed = _row(t0, t0 + 5_000, {Prop.EXECUTOR: "x", Prop.START_TIME: str(t0 + 5_000)})
    assert orphaned_since_ms(lapsed, policy) == t0 + 65_000
    # A failed attempt: at the end of its backoff.
    failed = _row(
        t0,
        t0 + 9_000,
        {
            Prop.EXECUTOR: "x",
            Prop.START_TIME: str(t0 + 5_000),
            Prop.END_TIME: str(t0 + 9_000),
            Prop.NEXT_ATTEMPT: str(t0 + 40_000),
        },
    )
    assert orphaned_since_ms(failed, policy) == t0 + 40_000
    # A requeued dead task: at the requeue (its last update).
    requeued = _row(
        t0,
        t0 + 500_000,
        {Prop.EXECUTOR: "x", Prop.START_TIME: str(t0 + 5_000), Prop.END_TIME: str(t0 + 9_000)},
    )
    assert orphaned_since_ms(requeued, policy) == t0 + 500_000


# -- reported by the sweeper's ticks -----------------------------------------------


def sweep(store: Metastore, instance: DagsterInstance, cursor: str | None = None) -> SensorResult:
    """One tick of the sweeper, its asset events stored as the daemon stores them."""
    with build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources=sweeper_resources(
            metastore_resource(store),
            SweeperSettings(interval_seconds=60),
            backlog=BacklogSettings(max_orphan_age_seconds=1800),
        ),
    ) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(result, SensorResult)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    return result


def test_a_sweep_reports_the_backlog_and_its_checks_without_a_run(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    seed(metastore, "A", 2)  # pending within grace
    stale = orphan(metastore, "A", 2 * HOUR_MS)
    leased(metastore, "A")
    exhausted = dead(metastore, "A", "storage said no")
    backing_off(metastore, "B")

    result = sweep(metastore, instance)

    # The orphan gets its run, and the tick carries the numbers with it.
    assert [r.tags["polaris/task_id"] for r in result.run_requests or []] == [str(stale.id)]
    [mat] = [e for e in result.asset_events if isinstance(e, AssetMaterialization)]
    counts = metastore.count_by_state(None)
    meta = values(dict(mat.metadata))
    for realm in ("A", "B"):
        for state in TaskState:
            assert meta[realm_key(realm, state.value)] == counts[realm][state], (realm, state)
    assert meta[TaskState.PENDING.value] == 2 and meta[TaskState.BACKING_OFF.value] == 1
    assert meta[TOTAL_KEY] == 6 and meta[realm_key("A", TOTAL_KEY)] == 5
    waited = (2 * HOUR_MS - GRACE_MS) / 1000
    assert waited - 1 <= meta[realm_key("A", OLDEST_ORPHAN_KEY)] <= waited + 30
    assert meta[realm_key("B", OLDEST_ORPHAN_KEY)] == 0.0

    checks = {e.check_name: e for e in result.asset_events if isinstance(e, AssetCheckEvaluation)}
    assert set(checks) == {DEAD_CHECK, FAILING_CHECK, ORPHAN_CHECK}
    assert not checks[DEAD_CHECK].passed
    assert [e["task_id"] for e in values(dict(checks[DEAD_CHECK].metadata))["sample"]] == [
        str(exhausted)
    ]
    # The threshold of the backlog resource (30 min), not the default hour.
    orphan_meta = values(dict(checks[ORPHAN_CHECK].metadata))
    assert not checks[ORPHAN_CHECK].passed and orphan_meta["threshold (s)"] == 1800.0
    assert checks[FAILING_CHECK].passed  # one attempt is not many

    # On the instance, with no run: what the UI plots and the check statuses it shows.
    [record] = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=ASSET_KEY), limit=1
    ).records
    assert record.run_id == "" and record.asset_materialization is not None
    assert record.asset_materialization.metadata[realm_key("A", "dead")].value == 1
    assert stored_status(instance, DEAD_CHECK) == "FAILED"
    assert stored_status(instance, FAILING_CHECK) == "SUCCEEDED"
    assert instance.get_runs() == []

    # The next sweep within the report interval reports nothing (a backlog sweeps
    # at every evaluation; the report need not) ...
    cursor = SweepCursor.parse(result.cursor)
    assert cursor.reported_ms is not None
    due_now = SweepCursor(next_sweep_ms=0, reported_ms=cursor.reported_ms).dump()
    assert sweep(metastore, instance, due_now).asset_events == []
    # ... and once it is over, reports the change: the dead task requeued.
    metastore.requeue("A", exhausted)
    late = SweepCursor(next_sweep_ms=0, reported_ms=cursor.reported_ms - 61_000).dump()
    again = sweep(metastore, instance, late)
    assert again.asset_events and SweepCursor.parse(again.cursor).reported_ms is not None
    assert stored_status(instance, DEAD_CHECK) == "SUCCEEDED"


def test_the_watch_reports_the_sweepers_freshness(instance: DagsterInstance) -> None:
    """The sweeper cannot report that it stopped: the watch does, from the instance alone."""
    with build_sensor_context(
        instance=instance,
        resources={"sweeper": SweeperSettings(), "backlog": BacklogSettings()},
    ) as context:
        result = deployed_sensor(WATCH_NAME)(context)
    assert isinstance(result, SensorResult) and not result.run_requests
    [evaluation] = result.asset_events
    assert isinstance(evaluation, AssetCheckEvaluation)
    assert evaluation.check_name == FRESHNESS_CHECK and not evaluation.passed
    assert "never started on this instance" in (evaluation.description or "")
    instance.report_runless_asset_event(evaluation)
    assert stored_status(instance, FRESHNESS_CHECK) == "FAILED"


def test_nothing_is_partitioned_and_no_schedule_refreshes_the_backlog() -> None:
    assert polaris_task_backlog.partitions_def is None
    assert all(check.partitions_def is None for check in BACKLOG_CHECKS)
    # The run retention's schedule (only with an age set), whose job materializes nothing,
    # and the leak report's, which materializes only its own asset (stopped by default).
    repo = build_defs_from_env(
        {"POLARIS_PIPELINE_RETENTION_FAILURE_DAYS": "9"}
    ).get_repository_def()
    schedules = {s.name: s for s in repo.schedule_defs}
    assert set(schedules) == {RETENTION_SCHEDULE_NAME, LEAKS_SCHEDULE}
    assert schedules[RETENTION_SCHEDULE_NAME].job_name == RETENTION_JOB_NAME
    leak_keys = repo.get_job(schedules[LEAKS_SCHEDULE].job_name).asset_layer.executable_asset_keys
    assert leak_keys == {AssetKey(LEAKS_ASSET)}
    assert not repo.get_job(RETENTION_JOB_NAME).asset_layer.executable_asset_keys
    sweeper = repo.get_sensor_def("polaris_task_sweeper")
    assert "backlog" in sweeper.required_resource_keys


# -- the command line ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_cli_materializes_the_backlog_with_its_checks(metastore: Metastore, tmp_path: Path) -> None:
    """``dagster asset materialize --partition``, as docs/operations.md shows it."""
    orphan(metastore, "A", 2 * HOUR_MS)
    dead(metastore, "A", "boom")
    seed(metastore, "B", 1)
    home = dagster_home(tmp_path / "dagster_home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    env.update(DAGSTER_HOME=str(home), POLARIS_METASTORE_URL=metastore.url.render_as_string(False))
    proc = subprocess.run(
        [
            DAGSTER,
            "asset",
            "materialize",
            "-m",
            "definitions",
            "--select",
            ASSET_NAME,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # The run fails nothing: failed checks are results, not errors.
    assert proc.returncode == 0, proc.stderr[-3000:]

    with DagsterInstance.from_config(str(home)) as inst:
        [record] = inst.fetch_materializations(
            AssetRecordsFilter(asset_key=ASSET_KEY), limit=1
        ).records
        mat = record.asset_materialization
        assert mat is not None
        assert mat.metadata[realm_key("A", TaskState.ORPHANED.value)].value == 1
        assert mat.metadata[realm_key("A", TaskState.DEAD.value)].value == 1
        assert mat.metadata[realm_key("B", TOTAL_KEY)].value == 1
        # Every check ran with the asset.
        assert stored_status(inst, DEAD_CHECK) == "FAILED"
        assert stored_status(inst, ORPHAN_CHECK) == "FAILED"
        # No sweeper sensor ever ran on this instance.
        assert stored_status(inst, FRESHNESS_CHECK) == "FAILED"


@pytest.mark.slow
def test_the_code_location_loads_without_preview_or_beta_warnings(tmp_path: Path) -> None:
    """What a code server does at start, with Dagster's preview/beta warnings as errors."""
    script = (
        "import warnings\n"
        "from dagster._utils.warnings import BetaWarning, PreviewWarning\n"
        "warnings.simplefilter('error', PreviewWarning)\n"
        "warnings.simplefilter('error', BetaWarning)\n"
        "from dagster._core.remote_representation.external_data import RepositorySnap\n"
        "import definitions\n"
        "repo = definitions.defs.get_repository_def()\n"
        "snap = RepositorySnap.from_def(repo)\n"
        "print(sorted(s.name for s in snap.sensors), len(snap.asset_check_nodes or []))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    env["POLARIS_METASTORE_URL"] = f"sqlite:///{tmp_path}/unused.db"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sensors, checks = proc.stdout.split("] ")
    # No alert destination configured: no alert sensor (alerts are opt-in).
    assert "polaris_task_sweeper" in sensors and "polaris_run_failure_alert" not in sensors
    # The backlog's four, held_tables_restorable and the leak report's one.
    assert int(checks) == 6


# -- permanent failures and long backoffs -------------------------------------------


def permanently_failed(store: Metastore, realm: str, error: str) -> int:
    """Dead-lettered at once, as the engine records a failure retrying cannot heal."""
    task = orphan(store, realm, HOUR_MS)
    lease = store.lease_task(realm, task.id, "test-executor")
    assert lease is not None
    assert store.fail(lease, error, run_id="run-of-a", permanent=True).outcome.value == "dead"
    return task.id


def failed_times(store: Metastore, realm: str, attempts: int) -> int:
    """A task whose ``attempts``-th attempt failed, backing off for another ten minutes."""
    now = store.now_ms()
    task = batch_task(
        realm,
        create_timestamp=now - HOUR_MS,
        extra={
            Prop.EXECUTOR: "polaris-pipeline:run:earlier",
            Prop.START_TIME: str(now - MINUTE_MS),
            Prop.END_TIME: str(now - MINUTE_MS + 1_000),
            Prop.ATTEMPT_COUNT: str(attempts),
            Prop.NEXT_ATTEMPT: str(now + 10 * MINUTE_MS),
            Prop.STATUS: "failed",
            Prop.ERROR: "storage said no",
        },
    )
    store.insert_tasks([task])
    row = store.get_task(realm, task.id)
    assert row is not None and row.state(store.now_ms(), store.policy) is TaskState.BACKING_OFF
    return task.id


def test_failing_check_names_permanent_failures_apart_from_dead_ones(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    exhausted = dead(metastore, "A", "storage said no, three times")
    permanent = permanently_failed(metastore, "A", "payload is not JSON")
    backing_off(metastore, "A")  # one attempt: not many

    checks = check_results(refresh(metastore, instance, "A"))

    # The dead check counts only the exhausted one; the permanent one is the other check's.
    dead_meta = values(dict(checks[DEAD_CHECK].metadata))
    assert dead_meta["dead tasks"] == 1
    assert [e["task_id"] for e in dead_meta["sample"]] == [str(exhausted)]
    failing = checks[FAILING_CHECK]
    assert not failing.passed and failing.severity == AssetCheckSeverity.ERROR
    meta = values(dict(failing.metadata))
    assert meta["permanent failures"] == 1 and meta["backing off after many attempts"] == 0
    assert [e["task_id"] for e in meta["permanent (sample)"]] == [str(permanent)]
    assert meta["permanent (sample)"][0]["last_error"] == "payload is not JSON"
    # The run of the last attempt, as a link to it.
    assert meta[f"last run of A/{permanent}"] == "run-of-a"
    assert (
        type(failing.metadata[f"last run of A/{permanent}"]).__name__ == "DagsterRunMetadataValue"
    )
    assert "1 task(s) failed permanently" in (failing.description or "")


def test_failing_check_warns_on_a_task_backing_off_after_many_attempts(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    backing_off(metastore, "A")
    settings = BacklogSettings(many_attempts=2)
    assert check_results(refresh(metastore, instance, "A", settings))[FAILING_CHECK].passed

    task_id = failed_times(metastore, "B", 2)
    failing = check_results(refresh(metastore, instance, None, settings))[FAILING_CHECK]
    assert not failing.passed and failing.severity == AssetCheckSeverity.WARN
    meta = values(dict(failing.metadata))
    assert meta["backing off after many attempts"] == 1 and meta["permanent failures"] == 0
    assert meta[realm_key("B", "backing off after many attempts")] == 1
    assert meta[realm_key("A", "backing off after many attempts")] == 0
    [entry] = meta["backing off (sample)"]
    assert (entry["task_id"], entry["attempts"], entry["realm"]) == (str(task_id), 2, "B")


# -- the sweeper's freshness ---------------------------------------------------------


def sweeper_origin(instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The remote origin of the code location's sweeper sensor, as the daemon knows it."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

    monkeypatch.setenv("POLARIS_METASTORE_URL", "sqlite:///unused.db")
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(
            executable_path=sys.executable, module_name="definitions", working_directory=str(ROOT)
        ),
        location_name="definitions",
    )
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as context:
        location = context.create_request_context().get_code_location("definitions")
        [repo] = location.get_repositories().values()
        return repo.get_sensor("polaris_task_sweeper").get_remote_origin()


def store_sweeper_state(
    instance: DagsterInstance,
    origin: Any,
    status: Any,
    *,
    next_sweep_ago_s: float | None,
    last_tick_ago_s: float = 5,
) -> None:
    from dagster._core.definitions.sensor_definition import SensorType
    from dagster._core.scheduler.instigation import (
        InstigatorState,
        InstigatorType,
        SensorInstigatorData,
    )

    from polaris_pipeline.dagster.sweeper import SweepCursor

    now = time.time()
    cursor = (
        SweepCursor(next_sweep_ms=int((now - next_sweep_ago_s) * 1000)).dump()
        if next_sweep_ago_s is not None
        else None
    )
    state = InstigatorState(
        origin,
        InstigatorType.SENSOR,
        status,
        SensorInstigatorData(
            last_tick_timestamp=now - last_tick_ago_s,
            cursor=cursor,
            last_sensor_start_timestamp=now - 3600,
            sensor_type=SensorType.STANDARD,
        ),
    )
    if instance.get_instigator_state(origin.get_id(), state.selector_id) is None:
        instance.add_instigator_state(state)
    else:
        instance.update_instigator_state(state)


@pytest.mark.slow
def test_freshness_check_follows_the_sweeper_sensor(
    metastore: Metastore, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster._core.scheduler.instigation import InstigatorStatus

    def freshness() -> Any:
        return check_results(refresh(metastore, instance, None))[FRESHNESS_CHECK]

    # Never started on this instance (as after `dagster dev` with the sweeper stopped).
    never = freshness()
    assert not never.passed and "never started" in (never.description or "")

    origin = sweeper_origin(instance, monkeypatch)
    # Interval 60 s, jitter 0.5 (refresh's settings), 3 intervals: 270 s allowed.
    store_sweeper_state(instance, origin, InstigatorStatus.RUNNING, next_sweep_ago_s=-30)
    fresh = freshness()
    assert fresh.passed, fresh.description
    assert values(dict(fresh.metadata))["allowed delay (s)"] == 270.0

    # Due for longer than three of its longest intervals: the daemon is down.
    store_sweeper_state(
        instance, origin, InstigatorStatus.RUNNING, next_sweep_ago_s=300, last_tick_ago_s=300
    )
    late = freshness()
    assert not late.passed and late.severity == AssetCheckSeverity.ERROR
    assert "has not swept" in (late.description or "")
    assert 299 <= values(dict(late.metadata))["overdue (s)"] <= 330

    # Stopped in the UI.
    store_sweeper_state(instance, origin, InstigatorStatus.STOPPED, next_sweep_ago_s=-30)
    stopped = freshness()
    assert not stopped.passed and "is stopped" in (stopped.description or "")
    assert stored_status(instance, FRESHNESS_CHECK) == "FAILED"


def test_the_sweeper_starts_by_itself_only_outside_dagster_dev(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `dagster dev` against a production URL must not purge by surprise."""
    from dagster import DefaultSensorStatus

    def status(env: dict[str, str]) -> DefaultSensorStatus:
        repo = build_defs_from_env(env).get_repository_def()
        return repo.get_sensor_def("polaris_task_sweeper").default_status

    monkeypatch.delenv("DAGSTER_IS_DEV_CLI", raising=False)
    assert status({}) is DefaultSensorStatus.RUNNING
    assert status({"POLARIS_PIPELINE_SWEEPER_AUTOSTART": "false"}) is DefaultSensorStatus.STOPPED
    monkeypatch.setenv("DAGSTER_IS_DEV_CLI", "1")  # what `dagster dev` and `dg dev` set
    assert status({}) is DefaultSensorStatus.STOPPED
    assert status({"POLARIS_PIPELINE_SWEEPER_AUTOSTART": "true"}) is DefaultSensorStatus.RUNNING


def test_orphaned_since_uses_the_tasks_realm_policy() -> None:
    """Realm A has its own grace and lease timeout; the global ones are not used for it."""
    policy = TaskPolicy(
        lease_timeout_ms=60_000,
        grace_ms=30_000,
        realm_overrides={"A": RealmOverride(lease_timeout_ms=10_000, grace_ms=1_000)},
    )
    t0 = 1_000_000_000_000
    assert orphaned_since_ms(_row(t0), policy) == t0 + 1_000
    lapsed = _row(t0, t0 + 5_000, {Prop.EXECUTOR: "x", Prop.START_TIME: str(t0 + 5_000)})
    assert orphaned_since_ms(lapsed, policy) == t0 + 15_000
