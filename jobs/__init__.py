"""Dagster jobs of the polaris-pipeline code location."""

from polaris_pipeline.dagster.contract import JOB_NAME, TaskRunConfig, run_config_for
from polaris_pipeline.dagster.leaks import polaris_leak_report_job
from polaris_pipeline.dagster.task_job import build_polaris_task_job, polaris_task_job

__all__ = [
    "JOB_NAME",
    "TaskRunConfig",
    "build_polaris_task_job",
    "polaris_leak_report_job",
    "polaris_task_job",
    "run_config_for",
]
