"""Dagster sensors of the polaris-pipeline code location."""

from sensors.sweeper import (
    SENSOR_NAME,
    SweepCursor,
    build_polaris_task_sweeper,
    polaris_task_sweeper,
    sweep_tick,
)

__all__ = [
    "SENSOR_NAME",
    "SweepCursor",
    "build_polaris_task_sweeper",
    "polaris_task_sweeper",
    "sweep_tick",
]
