"""This code location's jobs: ``jobs.location`` builds them (the task job, the realm
backfill, the leak report and reclaim, retention when configured) and their schedules
for ``definitions.py``.

The library names this package re-exported in earlier releases still import from here,
with a ``DeprecationWarning`` naming the library module to import them from.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "JOB_NAME": "polaris_pipeline.dagster.contract",
        "TaskRunConfig": "polaris_pipeline.dagster.contract",
        "run_config_for": "polaris_pipeline.dagster.contract",
        "polaris_leak_report_job": "polaris_pipeline.dagster.leaks",
        "build_polaris_task_job": "polaris_pipeline.dagster.task_job",
        "polaris_task_job": "polaris_pipeline.dagster.task_job",
    },
)
