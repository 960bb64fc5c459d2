"""The realm backfill job, against real metastores and Dagster.

Here: what one realm's run does, the realm config checked against the
metastore (the job is not partitioned), and that the sweeper keeps no partitions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    DagsterInstance,
    DagsterInvalidConfigError,
    SensorResult,
    build_sensor_context,
)
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

from builders.tasks import batch_task
from polaris_pipeline.dagster.realm_backfill import (
    JOB_NAME,
    OP_NAME,
    polaris_realm_backfill_job,
)
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)
from polaris_pipeline.dagster.sweeper import SENSOR_NAME, SweepCursor
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.formatting import iso_utc
from polaris_pipeline.tasks.model import NewTask, Prop
from tests.support.dagster import (
    deployed_sensor,
    metastore_resource,
    realm_run_config,
    sweeper_resources,
)
from tests.support.tasks import seed

ROOT = Path(__file__).resolve().parent.parent
GRACE_MS = 30_000
OLD_MS = 60 * 60_000


# A real grace period, so that pending tasks exist.
pytestmark = pytest.mark.lease_policy(grace_ms=GRACE_MS)


def tick(
    metastore: PolarisMetastoreResource, instance: DagsterInstance, cursor: str | None = None
) -> SensorResult:
    with build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources=sweeper_resources(metastore, SweeperSettings(interval_seconds=60)),
    ) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(result, SensorResult)
    return result


def old(store: Metastore, realm: str, n: int) -> list[NewTask]:
    return seed(store, realm, n, create_timestamp=store.now_ms() - OLD_MS)


# -- no realm partitions any more --------------------------------------------------


def test_the_sweeper_keeps_no_realm_partitions(metastore: Metastore, instance: DagsterInstance):
    """The backfill takes its realm as config and the backlog is not partitioned: the
    sweeper registers no partitions, and a cursor of an older version still parses."""
    old(metastore, "A", 2)
    seed(metastore, "B", 1)
    legacy = '{"next_sweep_ms": 1, "backlog": false, "realms_synced_ms": 5}'

    result = tick(metastore_resource(metastore), instance, legacy)

    assert len(result.run_requests or []) == 2
    assert not result.dynamic_partitions_requests
    assert instance.get_dynamic_partitions("polaris_realms") == []
    cursor = json.loads(result.cursor or "{}")
    assert "realms_synced_ms" not in cursor
    # The next sweep, for people reading the sensor page, beside the epoch ms.
    assert cursor["next_sweep"] == iso_utc(cursor["next_sweep_ms"])
    assert SweepCursor.parse(result.cursor).next_sweep_ms == cursor["next_sweep_ms"]


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
