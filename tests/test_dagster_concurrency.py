"""The per-realm cap on concurrent cleanup runs, under a burst from the real sweeper.

The instance is ``deploy/dagster.yaml`` on a fresh PostgreSQL database, with its
run coordinator and its ``polaris/realm`` limit as shipped; only the run
launcher is replaced by one that starts nothing (it marks each run started, as
a run worker's first event would), so that the test decides when runs finish.
The burst comes from one tick of Dagster's own sensor daemon over the code
location; the queue is drained by Dagster's own run queue daemon, one
iteration at a time.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunsFilter,
)
from dagster._core.launcher import LaunchRunContext, RunLauncher
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)
from dagster._daemon.sensor import execute_sensor_iteration
from dagster._serdes import ConfigurableClass, ConfigurableClassData

from polaris_pipeline.dagster.contract import JOB_NAME, TAG_REALM
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import TaskState
from tests.support.deploy import dagster_home_from_deploy, deploy_config
from tests.support.tasks import seed

ROOT = Path(__file__).resolve().parent.parent
OLD_MS = 60 * 60_000
IN_PROGRESS = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


class StartOnlyRunLauncher(RunLauncher, ConfigurableClass):
    """Starts nothing: reports the run started, as its worker's first event would."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> StartOnlyRunLauncher:
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        assert run.status == DagsterRunStatus.STARTING  # the queue daemon set it
        self._instance.report_dagster_event(
            DagsterEvent(event_type_value=DagsterEventType.RUN_START.value, job_name=run.job_name),
            run_id=run.run_id,
        )

    def terminate(self, run_id: str) -> bool:
        return False


def realm_limit() -> int:
    """The documented cap, read from deploy/dagster.yaml."""
    limits = deploy_config()["run_coordinator"]["config"]["tag_concurrency_limits"]
    [limit] = [entry for entry in limits if entry["key"] == TAG_REALM]
    assert limit["value"] == {"applyLimitPerUniqueValue": True}
    return int(limit["limit"])


def in_progress_by_realm(instance: DagsterInstance) -> Counter[str]:
    runs = instance.get_runs(RunsFilter(job_name=JOB_NAME, statuses=IN_PROGRESS))
    return Counter(run.tags[TAG_REALM] for run in runs)


def finish(instance: DagsterInstance, run: DagsterRun) -> None:
    """The run's worker reports success (each task run ends like this)."""
    instance.report_dagster_event(
        DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name),
        run_id=run.run_id,
    )


@pytest.mark.slow
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_per_realm_cap_holds_under_a_burst(
    metastore: Metastore,
    dagster_pg_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cap = realm_limit()
    burst = 2 * cap  # per realm: twice what may run at once
    old = metastore.now_ms() - OLD_MS
    seed(metastore, "A", burst, create_timestamp=old)
    seed(metastore, "B", burst, create_timestamp=old)
    for name, value in dagster_pg_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POLARIS_METASTORE_URL", metastore.url.render_as_string(False))
    for name in ("POLARIS_PIPELINE_REALMS", "POLARIS_PIPELINE_SWEEPER_MAX_PENDING_RUNS"):
        monkeypatch.delenv(name, raising=False)
    home = dagster_home_from_deploy(
        tmp_path,
        replace={"run_launcher": {"module": __name__, "class": StartOnlyRunLauncher.__name__}},
    )
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(
            executable_path=sys.executable,
            module_name="definitions",
            working_directory=str(ROOT),
        ),
        location_name="definitions",
    )
    logger = logging.getLogger("test_dagster_concurrency")

    with (
        DagsterInstance.from_config(str(home)) as instance,
        WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as context,
    ):
        # The burst: one tick of the sensor daemon evaluates the sweeper as deployed.
        list(execute_sensor_iteration(context, logger, None, None))
        queued = instance.get_runs(RunsFilter(job_name=JOB_NAME))
        assert len(queued) == 2 * burst
        assert {run.status for run in queued} == {DagsterRunStatus.QUEUED}
        assert Counter(run.tags[TAG_REALM] for run in queued) == {"A": burst, "B": burst}
        counts = metastore.count_by_state()
        # Selected, not leased: each run leases its task when it starts, so no lease
        # lapses while a run waits its turn in the queue.
        assert counts["A"][TaskState.ORPHANED] == burst
        assert counts["B"][TaskState.ORPHANED] == burst

        # Drain the queue; runs finish two per realm per round, the oldest first.
        highest: Counter[str] = Counter()
        launched: set[str] = set()
        with QueuedRunCoordinatorDaemon(interval_seconds=1) as daemon:
            for round_no in range(4 * burst):
                list(daemon.run_iteration(context))
                active = in_progress_by_realm(instance)
                assert all(n <= cap for n in active.values()), (round_no, active)
                if round_no == 0:
                    # Both realms at the cap at once: one realm does not starve the other.
                    assert active == {"A": cap, "B": cap}
                highest |= active
                running = instance.get_runs(
                    RunsFilter(job_name=JOB_NAME, statuses=IN_PROGRESS), ascending=True
                )
                launched |= {run.run_id for run in running}
                for realm in ("A", "B"):
                    for run in [r for r in running if r.tags[TAG_REALM] == realm][:2]:
                        finish(instance, run)
                if not instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus.QUEUED])):
                    break

        assert highest == {"A": cap, "B": cap}
        assert len(launched) == 2 * burst  # every run of the burst started, in the end
        left = instance.get_runs(RunsFilter(job_name=JOB_NAME, statuses=IN_PROGRESS))
        for run in left:
            finish(instance, run)
        statuses = Counter(run.status for run in instance.get_runs(RunsFilter(job_name=JOB_NAME)))
        assert statuses == {DagsterRunStatus.SUCCESS: 2 * burst}
