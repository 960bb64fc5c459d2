"""This deployment's jobs (the task job on the executor the environment names, the realm
backfill, the run retention, the leak report and its reclaim) and the schedules of the
retention and the leak report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import JobDefinition, ScheduleDefinition

from polaris_pipeline.dagster.definitions import build_schedules, build_task_jobs
from polaris_pipeline.dagster.leaks import polaris_leak_reclaim_job, polaris_leak_report_job
from polaris_pipeline.dagster.realm_backfill import polaris_realm_backfill_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from resources.location import DEPLOYMENT, resources

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

task_job, retention_job = build_task_jobs(DEPLOYMENT.executor, DEFAULT_TRANSLATOR)

jobs: list[JobDefinition | UnresolvedAssetJobDefinition] = [
    task_job,
    polaris_realm_backfill_job,
    retention_job,
    polaris_leak_report_job,
    polaris_leak_reclaim_job,
]

# The schedules read their settings (the retention age, the leak report's cron) from the
# resources, so the environment sets them in one place.
schedules: list[ScheduleDefinition] = build_schedules(retention_job, resources)
