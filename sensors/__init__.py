"""This code location's sensors: ``sensors.location`` builds them (the sweeper that
launches the task job, its watch, the run report and the alerts) for ``definitions.py``.

Its re-exports of earlier releases still import, with a ``DeprecationWarning``.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "polaris_pipeline.dagster.sweeper": (
            "SENSOR_NAME",
            "SweepCursor",
            "build_polaris_task_sweeper",
            "polaris_task_sweeper",
            "sweep_tick",
        ),
        "polaris_pipeline.dagster.alerts": (
            "build_polaris_check_alert",
            "build_polaris_failure_alert",
        ),
        "polaris_pipeline.dagster.reporting": ("build_run_report_sensor",),
        "polaris_pipeline.dagster.backlog": ("build_sweeper_watch", "polaris_sweeper_watch"),
    },
)
