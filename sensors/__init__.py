"""This code location's sensors: the sweeper, its watch, the run report and the alerts."""

from polaris_pipeline.dagster.alerts import build_polaris_check_alert, build_polaris_failure_alert
from polaris_pipeline.dagster.backlog import build_sweeper_watch, polaris_sweeper_watch
from polaris_pipeline.dagster.reporting import build_run_report_sensor
from polaris_pipeline.dagster.sweeper import (
    SENSOR_NAME,
    SweepCursor,
    build_polaris_task_sweeper,
    polaris_task_sweeper,
    sweep_tick,
)

__all__ = [
    "SENSOR_NAME",
    "SweepCursor",
    "build_polaris_check_alert",
    "build_polaris_failure_alert",
    "build_polaris_task_sweeper",
    "build_run_report_sensor",
    "build_sweeper_watch",
    "polaris_sweeper_watch",
    "polaris_task_sweeper",
    "sweep_tick",
]
