"""This deployment's jobs (the task job on the executor the environment names, the realm
backfill, the run retention, the leak report and its reclaim) and the schedules of the
retention and the leak report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import JobDefinition, ScheduleDefinition

from polaris_pipeline.dagster.definitions import build_jobs_and_schedules, build_task_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from resources.location import DEPLOYMENT, resources

if TYPE_CHECKING:
    # An asset job (the leak report) before resolution: Dagster 1.13 exports no public name.
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

task_job = build_task_job(DEPLOYMENT.executor, DEFAULT_TRANSLATOR)

# The schedules read their settings (the retention age, the leak report's cron) from the
# resources, so the environment sets them in one place; run retention only when set.
jobs: list[JobDefinition | UnresolvedAssetJobDefinition]
schedules: list[ScheduleDefinition]
jobs, schedules = build_jobs_and_schedules(task_job, resources, DEFAULT_TRANSLATOR)
