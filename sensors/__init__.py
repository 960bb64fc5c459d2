"""Dagster sensors of the polaris-pipeline code location."""

from polaris_pipeline.dagster.sweeper import (
    REALM_REFRESH_SECONDS,
    SENSOR_NAME,
    SweepCursor,
    build_polaris_task_sweeper,
    polaris_task_sweeper,
    realm_partition_requests,
    sweep_tick,
)

__all__ = [
    "REALM_REFRESH_SECONDS",
    "SENSOR_NAME",
    "SweepCursor",
    "build_polaris_task_sweeper",
    "polaris_task_sweeper",
    "realm_partition_requests",
    "sweep_tick",
]
