"""Realm partitions and the realm backfill job, against real metastores and Dagster.

Here: the partitions the sweeper keeps, what one realm's run does, and the
realm config checked against the metastore (the job is not partitioned).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DagsterInvalidConfigError,
    SensorResult,
    build_sensor_context,
)
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

from polaris_pipeline.dagster.partitions import REALM_PARTITIONS_NAME
from polaris_pipeline.dagster.realm_backfill import (
    JOB_NAME,
    OP_NAME,
    polaris_realm_backfill_job,
    realm_run_config,
)
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)
from polaris_pipeline.dagster.sweeper import (
    REALM_REFRESH_SECONDS,
    SweepCursor,
    polaris_task_sweeper,
)
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import LeasePolicy, NewTask, Prop
from tests.support.dagster import metastore_resource
from tests.support.tasks import batch_task, seed

ROOT = Path(__file__).resolve().parent.parent
GRACE_MS = 30_000
OLD_MS = 60 * 60_000


@pytest.fixture
def policy() -> LeasePolicy:
    # A real grace period, so that pending tasks exist; overrides tests/support/metastore.py.
    return LeasePolicy(lease_timeout_ms=60_000, grace_ms=GRACE_MS)


def tick(
    metastore: PolarisMetastoreResource, instance: DagsterInstance, cursor: str | None = None
) -> SensorResult:
    with build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"metastore": metastore, "sweeper": SweeperSettings(interval_seconds=60)},
    ) as context:
        result = polaris_task_sweeper(context)
    assert isinstance(result, SensorResult)
    return result


def apply(result: SensorResult, instance: DagsterInstance) -> list[str]:
    """What the sensor daemon does with the tick's partition requests; the keys added."""
    added: list[str] = []
    for request in result.dynamic_partitions_requests or []:
        assert isinstance(request, AddDynamicPartitionsRequest)
        assert request.partitions_def_name == REALM_PARTITIONS_NAME
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        added += request.partition_keys
    return added


def due(cursor: str | None, *, synced_ago_s: float) -> str:
    """The cursor of a sweep that is due now, with the realms synced ``synced_ago_s`` ago."""
    now = int(time.time() * 1000)
    synced = SweepCursor.parse(cursor).realms_synced_ms
    assert synced is not None
    return SweepCursor(
        next_sweep_ms=now - 1, realms_synced_ms=now - int(synced_ago_s * 1000)
    ).dump()


def old(store: Metastore, realm: str, n: int) -> list[NewTask]:
    return seed(store, realm, n, create_timestamp=store.now_ms() - OLD_MS)


# -- the realm partitions the sweeper keeps ----------------------------------------


def test_sweeper_keeps_the_realm_partitions(metastore: Metastore, instance: DagsterInstance):
    old(metastore, "A", 2)
    seed(metastore, "B", 1)  # only a task within grace: not leased, but a realm
    resource = metastore_resource(metastore)

    first = tick(resource, instance)
    assert len(first.run_requests or []) == 2
    # First sweep: the metastore's realms, all of them.
    assert apply(first, instance) == ["A", "B"]
    assert sorted(instance.get_dynamic_partitions(REALM_PARTITIONS_NAME)) == ["A", "B"]

    # A realm whose task is leased by this tick is added at once; one whose tasks are
    # all within grace waits for the next refresh of the list.
    old(metastore, "C", 1)
    seed(metastore, "D", 1)
    recent = due(first.cursor, synced_ago_s=5)
    second = tick(resource, instance, recent)
    # (A's tasks are selected again: the first tick's runs were never launched, and a
    # run, not the tick, leases its task.)
    assert sorted({r.tags["polaris/realm"] for r in second.run_requests or []}) == ["A", "C"]
    assert apply(second, instance) == ["C"]
    # The list was not read: the sync time stays that of the earlier sweep.
    synced = SweepCursor.parse(second.cursor).realms_synced_ms
    assert synced == SweepCursor.parse(recent).realms_synced_ms

    third = tick(resource, instance, due(second.cursor, synced_ago_s=REALM_REFRESH_SECONDS + 1))
    assert {r.tags["polaris/realm"] for r in third.run_requests or []} <= {"A", "C"}
    assert apply(third, instance) == ["D"]
    synced = SweepCursor.parse(third.cursor).realms_synced_ms
    assert synced is not None and synced >= int(time.time() * 1000) - 10_000

    # Known realms are not requested again.
    fourth = tick(resource, instance, due(third.cursor, synced_ago_s=REALM_REFRESH_SECONDS + 1))
    assert not fourth.dynamic_partitions_requests
    assert sorted(instance.get_dynamic_partitions(REALM_PARTITIONS_NAME)) == ["A", "B", "C", "D"]


def test_configured_realms_are_the_partitions(metastore: Metastore, instance: DagsterInstance):
    old(metastore, "A", 1)
    old(metastore, "B", 1)  # another deployment's realm

    result = tick(metastore_resource(metastore, realms=["A", "Z"]), instance)

    assert [r.tags["polaris/realm"] for r in result.run_requests or []] == ["A"]
    assert apply(result, instance) == ["A", "Z"]


def test_a_failed_partition_sync_never_fails_the_tick(
    metastore: Metastore, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
):
    tasks = old(metastore, "A", 2)

    def unreachable(partitions_def_name: str) -> list[str]:
        raise ConnectionError("Dagster's storage went away")

    # Dagster's own storage fails after the leases were granted.
    monkeypatch.setattr(instance, "get_dynamic_partitions", unreachable)
    result = tick(metastore_resource(metastore), instance)

    # The leases of the tick still become runs; the list is read again next sweep.
    assert {int(r.tags["polaris/task_id"]) for r in result.run_requests or []} == {
        t.id for t in tasks
    }
    assert not result.dynamic_partitions_requests
    assert SweepCursor.parse(result.cursor).realms_synced_ms is None


# -- one realm's backfill run ------------------------------------------------------


def files_task(
    store: Metastore,
    realm: str,
    table: Path,
    names: list[str],
    *,
    extra_paths: tuple[str, ...] = (),
) -> tuple[NewTask, list[Path]]:
    """An orphaned batch task over real files of a table."""
    table.mkdir(parents=True, exist_ok=True)
    paths = [table / name for name in names]
    for path in paths:
        path.write_bytes(b"x" * 10)
    task = batch_task(
        realm,
        [str(p) for p in paths] + list(extra_paths),
        internal={"storageLocation": f"file://{table}"},
        create_timestamp=store.now_ms() - OLD_MS,
    )
    store.insert_tasks([task])
    return task, paths


def run_backfill(
    store: Metastore,
    instance: DagsterInstance,
    realm: str,
    warehouse: Path,
    **resource_kwargs: Any,
) -> Any:
    return polaris_realm_backfill_job.execute_in_process(
        run_config=realm_run_config(realm),
        instance=instance,
        resources={
            "metastore": metastore_resource(store, **resource_kwargs),
            "storage": PolarisStorageResource(allowed_prefixes=[f"file://{warehouse}"]),
        },
        raise_on_error=False,
    )


def step_metadata(result: Any) -> dict[str, Any]:
    for event in result.all_events:
        if event.is_successful_output:
            return {k: v.value for k, v in event.step_output_data.metadata.items()}
        if event.is_step_failure:
            data = event.step_failure_data.user_failure_data
            return {k: v.value for k, v in data.metadata.items()}
    raise AssertionError("no output and no failure")


def test_backfill_run_sweeps_its_realm_only(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
):
    wh = tmp_path / "wh"
    a1, a1_files = files_task(metastore, "A", wh / "a1", ["1.avro", "2.avro"])
    a2, a2_files = files_task(metastore, "A", wh / "a2", ["3.avro"])
    [fresh] = seed(metastore, "A", 1)  # within grace: Polaris may be running it
    b1, b1_files = files_task(metastore, "B", wh / "b1", ["4.avro"])

    result = run_backfill(metastore, instance, "A", wh)

    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    # Tagged at start (no tag was given at launch); never a partition.
    assert run.tags["polaris/realm"] == "A" and "dagster/partition" not in run.tags
    assert metastore.get_task("A", a1.id) is None and metastore.get_task("A", a2.id) is None
    assert not any(p.exists() for p in a1_files + a2_files)
    fresh_row = metastore.get_task("A", fresh.id)
    assert fresh_row is not None and fresh_row.executor_id is None
    b_row = metastore.get_task("B", b1.id)
    assert b_row is not None and b_row.executor_id is None
    assert all(p.exists() for p in b1_files)

    meta = step_metadata(result)
    assert meta["realm"] == "A"
    assert meta["executor"] == f"polaris-pipeline:run:{result.run_id}"
    assert (meta["tasks run"], meta["done"], meta["failed"], meta["dead"]) == (2, 2, 0, 0)
    assert meta["files deleted"] == 3 and meta["bytes freed"] == 30
    assert meta["left pending"] == 1 and meta["left orphaned"] == 0
    assert result.output_for_node(OP_NAME) == {"realm": "A", "tasks": 2, "done": 2}

    # Nothing left to take: a second run is a no-op that says what is left.
    again = run_backfill(metastore, instance, "A", wh)
    assert again.success
    meta = step_metadata(again)
    assert meta["tasks run"] == 0 and meta["left pending"] == 1


def test_failed_tasks_fail_the_run_and_are_recorded(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
):
    wh = tmp_path / "wh"
    (tmp_path / "precious.txt").write_text("keep")
    good, good_files = files_task(metastore, "A", wh / "good", ["1.avro"])
    bad, _ = files_task(
        metastore, "A", wh / "bad", ["2.avro"], extra_paths=(str(tmp_path / "precious.txt"),)
    )

    result = run_backfill(metastore, instance, "A", wh)

    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    description = failure.step_failure_data.user_failure_data.description
    assert description.startswith("1 of 2 task(s) in realm A failed")
    assert "guard refused" in description
    meta = step_metadata(result)
    # A guard refusal is permanent: dead-lettered at once, not backing off.
    assert (meta["done"], meta["failed"], meta["dead"]) == (1, 0, 1)
    [sample] = meta["failures (sample)"]
    assert sample["task_id"] == str(bad.id) and "guard refused" in sample["error"]
    assert metastore.get_task("A", good.id) is None and not good_files[0].exists()
    row = metastore.get_task("A", bad.id)
    assert row is not None
    assert row.properties[Prop.RUN_ID] == result.run_id
    assert "guard refused" in (row.last_error or "")
    assert (tmp_path / "precious.txt").read_text() == "keep"


def test_a_realm_outside_the_deployment_is_refused(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
):
    [task] = old(metastore, "A", 1)

    result = run_backfill(metastore, instance, "A", tmp_path, realms=["B"])

    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "not swept by this deployment" in failure.step_failure_data.user_failure_data.description
    row = metastore.get_task("A", task.id)
    assert row is not None and row.executor_id is None


def test_a_mistyped_realm_fails_naming_the_real_ones(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
):
    [task] = old(metastore, "POLARIS", 1)
    old(metastore, "OTHER", 1)

    for typo in ("POLARS", "", "POLARIS_", "polaris"):
        result = run_backfill(metastore, instance, typo, tmp_path)
        assert not result.success
        [failure] = [e for e in result.all_events if e.is_step_failure]
        description = failure.step_failure_data.user_failure_data.description
        assert f"realm {typo!r} has no tasks in the metastore" in description
        assert "'OTHER', 'POLARIS'" in description
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None and row.executor_id is None  # nothing was leased


def test_the_realm_is_required_config(metastore: Metastore, instance: DagsterInstance) -> None:
    with pytest.raises(DagsterInvalidConfigError, match="realm"):
        polaris_realm_backfill_job.execute_in_process(
            instance=instance,
            resources={
                "metastore": metastore_resource(metastore),
                "storage": PolarisStorageResource(),
            },
        )


def test_the_backfill_job_is_not_partitioned(
    instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The code location offers no partition set for it: no Missing/Completed realm."""
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
        assert not [p for p in repo.get_partition_sets() if p.job_name == JOB_NAME]
    assert polaris_realm_backfill_job.partitions_def is None
