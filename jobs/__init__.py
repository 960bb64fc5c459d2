"""This code location's jobs: ``jobs.location`` builds them (the task job, the realm
backfill, the leak report and reclaim, retention when configured) and their schedules
for ``definitions.py``.

Its re-exports of earlier releases still import, with a ``DeprecationWarning``.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "polaris_pipeline.dagster.contract": ("JOB_NAME", "TaskRunConfig", "run_config_for"),
        "polaris_pipeline.dagster.leaks": ("polaris_leak_report_job",),
        "polaris_pipeline.dagster.task_job": ("build_polaris_task_job", "polaris_task_job"),
    },
)
