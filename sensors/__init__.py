"""This code location's sensors: ``sensors.location`` builds them (the sweeper that
launches the task job, its watch, the run report and the alerts) for ``definitions.py``.

The library names this package re-exported in earlier releases still import from here,
with a ``DeprecationWarning`` naming the library module to import them from.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "SENSOR_NAME": "polaris_pipeline.dagster.sweeper",
        "SweepCursor": "polaris_pipeline.dagster.sweeper",
        "build_polaris_task_sweeper": "polaris_pipeline.dagster.sweeper",
        "polaris_task_sweeper": "polaris_pipeline.dagster.sweeper",
        "sweep_tick": "polaris_pipeline.dagster.sweeper",
        "build_polaris_check_alert": "polaris_pipeline.dagster.alerts",
        "build_polaris_failure_alert": "polaris_pipeline.dagster.alerts",
        "build_run_report_sensor": "polaris_pipeline.dagster.reporting",
        "build_sweeper_watch": "polaris_pipeline.dagster.backlog",
        "polaris_sweeper_watch": "polaris_pipeline.dagster.backlog",
    },
)
