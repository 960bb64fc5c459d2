"""Dagster jobs of the polaris-pipeline code location."""

from polaris_pipeline.dagster.task_job import (
    JOB_NAME,
    TaskLeaseConfig,
    build_polaris_task_job,
    lease_tags,
    polaris_task_job,
    run_config_for,
)

__all__ = [
    "JOB_NAME",
    "TaskLeaseConfig",
    "build_polaris_task_job",
    "lease_tags",
    "polaris_task_job",
    "run_config_for",
]
