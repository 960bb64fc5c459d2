"""Dagster's floor for the daemon benchmark: a trivial one-op job, launched like ours.

A sensor requests ``$BENCH_FLOOR_RUNS`` runs in its first tick (the way the
sweeper requests one run per task), and nothing after; the daemon, the run
queue and the default run launcher then treat them exactly as they treat ours.
The job keeps Dagster's default executor, as a new Dagster project would, or
with ``$BENCH_FLOOR_EXECUTOR=in_process`` runs its op in the run's own process,
as the task job does: then a run is one process and nothing else, Dagster's
least cost for a run launched this way.
"""

import os

from bench.run_profile import profile_if_asked

profile_if_asked()

from dagster import (  # noqa: E402  # imported under the profiler, when asked
    DefaultSensorStatus,
    Definitions,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)

JOB_NAME = "trivial_job"
SENSOR_NAME = "floor_sensor"
RUNS_ENV = "BENCH_FLOOR_RUNS"
EXECUTOR_ENV = "BENCH_FLOOR_EXECUTOR"
IN_PROCESS = "in_process"


@op
def noop() -> None:
    """Does nothing: what is left of a run is Dagster's own cost."""


@job(
    name=JOB_NAME,
    executor_def=in_process_executor if os.environ.get(EXECUTOR_ENV) == IN_PROCESS else None,
)
def trivial_job() -> None:
    noop()


@sensor(
    name=SENSOR_NAME,
    job=trivial_job,
    minimum_interval_seconds=10,
    default_status=DefaultSensorStatus.RUNNING,
)
def floor_sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
    if context.cursor == "done":
        return SkipReason("every run was requested")
    n = int(os.environ.get(RUNS_ENV, "10"))
    return SensorResult(
        run_requests=[RunRequest(run_key=f"floor-{i}") for i in range(n)], cursor="done"
    )


defs = Definitions(jobs=[trivial_job], sensors=[floor_sensor])
