"""The backlog asset and its checks, materialized by Dagster against real metastores."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    FloatMetadataValue,
    IntMetadataValue,
    RunRequest,
    SkipReason,
    build_schedule_context,
    materialize,
)

from polaris_pipeline.dagster.backlog import (
    ASSET_NAME,
    DEAD_CHECK,
    OLDEST_ORPHAN_KEY,
    ORPHAN_CHECK,
    TOTAL_KEY,
    BacklogSettings,
    no_dead_tasks,
    no_stale_orphans,
    orphaned_since_ms,
    polaris_backlog_schedule,
    polaris_task_backlog,
)
from polaris_pipeline.dagster.partitions import REALM_PARTITIONS_NAME
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import LeasePolicy, NewTask, Prop, TaskRow, TaskState
from tests.support.dagster import metastore_resource
from tests.support.tasks import batch_task, seed

ROOT = Path(__file__).resolve().parent.parent
DAGSTER = str(Path(sys.executable).parent / "dagster")
GRACE_MS = 30_000
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
ASSET_KEY = AssetKey(ASSET_NAME)


@pytest.fixture
def policy() -> LeasePolicy:
    # A real grace period, so that pending tasks exist; overrides tests/support/metastore.py.
    return LeasePolicy(lease_timeout_ms=60_000, grace_ms=GRACE_MS)


def refresh(
    store: Metastore,
    instance: DagsterInstance,
    realm: str,
    settings: BacklogSettings | None = None,
) -> Any:
    """Materialize one realm's backlog partition with its checks, as the schedule's run does."""
    if not instance.has_dynamic_partition(REALM_PARTITIONS_NAME, realm):
        instance.add_dynamic_partitions(REALM_PARTITIONS_NAME, [realm])
    result = materialize(
        [polaris_task_backlog, no_dead_tasks, no_stale_orphans],
        partition_key=realm,
        instance=instance,
        resources={
            "metastore": metastore_resource(store),
            "backlog": settings or BacklogSettings(),
        },
    )
    assert result.success
    return result


def check_results(result: Any) -> dict[str, Any]:
    evaluations = result.get_asset_check_evaluations()
    return {e.check_name: e for e in evaluations}


def stored_status(instance: DagsterInstance, check_name: str) -> dict[str | None, str]:
    """The latest stored evaluation of a check, per partition (what the UI shows)."""
    key = AssetCheckKey(ASSET_KEY, check_name)
    infos = instance.event_log_storage.get_asset_check_partition_info([key])
    return {info.partition_key: info.latest_execution_status.value for info in infos}


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
    strict = Metastore(store.url.render_as_string(False), policy=LeasePolicy(max_attempts=1))
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
    assert materialization.partition == "A"
    meta = values(dict(materialization.metadata))
    for state in TaskState:
        assert meta[state.value] == counts[state], state
    assert meta[TOTAL_KEY] == 8
    # The orphans were created 10 min ago; each became available when its grace ended.
    waited = (10 * MINUTE_MS - GRACE_MS) / 1000
    assert waited - 1 <= meta[OLDEST_ORPHAN_KEY] <= waited + 30
    assert len(orphans) == 3

    # What the UI plots: the stored event of partition A, with numeric values.
    [record] = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=ASSET_KEY, asset_partitions=["A"]), limit=1
    ).records
    stored = record.asset_materialization
    assert stored is not None
    assert all(isinstance(stored.metadata[s.value], IntMetadataValue) for s in TaskState)
    assert isinstance(stored.metadata[OLDEST_ORPHAN_KEY], FloatMetadataValue)
    assert stored.metadata[TaskState.ORPHANED.value].value == 3

    # Realm B has its own partition and numbers.
    result_b = refresh(metastore, instance, "B")
    [mat_b] = result_b.asset_materializations_for_node(ASSET_NAME)
    meta_b = values(dict(mat_b.metadata))
    assert meta_b[TaskState.ORPHANED.value] == 4 and meta_b[TOTAL_KEY] == 4
    assert meta_b[OLDEST_ORPHAN_KEY] >= (HOUR_MS - GRACE_MS) / 1000 - 1


def test_checks_pass_on_a_clean_realm(metastore: Metastore, instance: DagsterInstance) -> None:
    seed(metastore, "CLEAN", 2)  # pending
    leased(metastore, "CLEAN")
    orphan(metastore, "CLEAN", 5 * MINUTE_MS)  # an orphan, but a young one
    dead(metastore, "OTHER", "not this realm's problem")

    result = refresh(metastore, instance, "CLEAN")

    checks = check_results(result)
    assert set(checks) == {DEAD_CHECK, ORPHAN_CHECK}
    assert checks[DEAD_CHECK].passed and checks[ORPHAN_CHECK].passed
    assert checks[DEAD_CHECK].partition == "CLEAN"
    assert stored_status(instance, DEAD_CHECK) == {"CLEAN": "SUCCEEDED"}
    assert values(dict(checks[DEAD_CHECK].metadata)) == {"dead tasks": 0}
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
    assert check.partition == "A"
    meta = values(dict(check.metadata))
    assert meta["dead tasks"] == 2
    sample = {entry["task_id"]: entry for entry in meta["sample"]}
    assert set(sample) == {str(first), str(second)}
    assert sample[str(first)]["last_error"].startswith("refused: s3://other-bucket/x")
    assert sample[str(second)]["last_error"] == "payload is not JSON"
    assert sample[str(first)]["attempts"] == 1
    assert "--realm A" in meta["revive with"]
    assert "2 dead-lettered task(s) in realm A" in (check.description or "")
    # The failed check is stored on the instance, per partition, as the UI shows it.
    assert stored_status(instance, DEAD_CHECK) == {"A": "FAILED"}
    assert stored_status(instance, ORPHAN_CHECK) == {"A": "SUCCEEDED"}

    # Requeued, the task is no longer dead: the check passes again.
    for task_id in (first, second):
        metastore.requeue("A", task_id)
    assert check_results(refresh(metastore, instance, "A"))[DEAD_CHECK].passed
    assert stored_status(instance, DEAD_CHECK) == {"A": "SUCCEEDED"}


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
    assert BacklogSettings.from_env({}).max_orphan_age_seconds == 3600
    settings = BacklogSettings.from_env({"POLARIS_PIPELINE_MAX_ORPHAN_AGE_S": "900"})
    assert settings.max_orphan_age_seconds == 900
    with pytest.raises(ValueError, match="POLARIS_PIPELINE_MAX_ORPHAN_AGE_S"):
        BacklogSettings.from_env({"POLARIS_PIPELINE_MAX_ORPHAN_AGE_S": "soon"})


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
    policy = LeasePolicy(lease_timeout_ms=60_000, grace_ms=30_000)
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


# -- the schedule and the command line ----------------------------------------------


def test_schedule_requests_one_run_per_realm_partition(instance: DagsterInstance) -> None:
    tick = datetime(2026, 1, 2, 3, 5, tzinfo=UTC)
    with build_schedule_context(instance=instance, scheduled_execution_time=tick) as context:
        empty = polaris_backlog_schedule(context)
    assert isinstance(empty, SkipReason)
    assert "no realm" in (empty.skip_message or "")

    instance.add_dynamic_partitions(REALM_PARTITIONS_NAME, ["A", "B"])
    with build_schedule_context(instance=instance, scheduled_execution_time=tick) as context:
        requests = polaris_backlog_schedule(context)
    assert isinstance(requests, list)
    assert all(isinstance(r, RunRequest) for r in requests)
    assert [(r.partition_key, r.run_key) for r in requests] == [
        ("A", "A:20260102T030500Z"),
        ("B", "B:20260102T030500Z"),
    ]
    assert polaris_backlog_schedule.cron_schedule == "*/5 * * * *"
    assert polaris_backlog_schedule.job_name == "polaris_backlog_job"


@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_cli_materializes_one_realm_with_its_checks(metastore: Metastore, tmp_path: Path) -> None:
    """``dagster asset materialize --partition``, as docs/operations.md shows it."""
    orphan(metastore, "A", 2 * HOUR_MS)
    dead(metastore, "A", "boom")
    seed(metastore, "B", 1)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with DagsterInstance.from_config(str(home)) as inst:
        inst.add_dynamic_partitions(REALM_PARTITIONS_NAME, ["A", "B"])
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
            "--partition",
            "A",
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
            AssetRecordsFilter(asset_key=ASSET_KEY, asset_partitions=["A"]), limit=1
        ).records
        mat = record.asset_materialization
        assert mat is not None
        assert mat.metadata[TaskState.ORPHANED.value].value == 1
        assert mat.metadata[TaskState.DEAD.value].value == 1
        # Both checks ran with the asset, for partition A only.
        assert stored_status(inst, DEAD_CHECK) == {"A": "FAILED"}
        assert stored_status(inst, ORPHAN_CHECK) == {"A": "FAILED"}
