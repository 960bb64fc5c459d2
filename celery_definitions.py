"""The polaris-pipeline code location with the task job's steps on Celery workers.

Everything ``definitions.py`` defines (assets, checks, jobs, schedules, sensors,
resources), except that ``polaris_task_job`` runs on dagster-celery's executor
(``jobs/celery.py``) and the sweeper targets that job. Load this module instead
of ``definitions`` (``deploy/celery/workspace.yaml``): in the code server, in
the run workers and in the Celery workers, which import it to run the steps.

Environment: everything ``definitions.py`` reads (``POLARIS_METASTORE_URL``, …),
plus ``POLARIS_PIPELINE_CELERY_BROKER`` and optionally
``POLARIS_PIPELINE_CELERY_BACKEND`` and ``POLARIS_PIPELINE_CELERY_QUEUE`` (read
when a run starts), and ``POLARIS_PIPELINE_IO_BASE_DIR`` (read at import: where
step outputs live, shared by every worker). See docs/scale-out.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dagster import Definitions, JobDefinition

import definitions
from jobs.celery import build_polaris_celery_task_job, io_manager_from_env
from jobs.task_job import JOB_NAME
from sensors.sweeper import SENSOR_NAME, build_polaris_task_sweeper


def _task_job(base: Definitions) -> JobDefinition:
    """The task job exactly as ``definitions.py`` declares it (its ops, retries, tags)."""
    for job in base.jobs or []:
        if job.name == JOB_NAME and isinstance(job, JobDefinition):
            return job
    raise LookupError(f"definitions.py declares no job {JOB_NAME}")


def _resources(base: Definitions, environ: Mapping[str, str]) -> dict[str, Any]:
    resources = dict(base.resources or {})
    io_manager = io_manager_from_env(environ)
    if io_manager is not None:
        resources["io_manager"] = io_manager
    return resources


def build_celery_defs(base: Definitions, environ: Mapping[str, str] | None = None) -> Definitions:
    """``base`` with its task job on Celery and its sweeper targeting that job."""
    job = build_polaris_celery_task_job(_task_job(base))
    sweeper = build_polaris_task_sweeper(job)
    return Definitions(
        assets=base.assets,
        asset_checks=base.asset_checks,
        jobs=[job if j.name == JOB_NAME else j for j in base.jobs or []],
        sensors=[sweeper if s.name == SENSOR_NAME else s for s in base.sensors or []],
        schedules=base.schedules,
        resources=_resources(base, os.environ if environ is None else environ),
        executor=base.executor,
        loggers=base.loggers,
        metadata=base.metadata,
    )


# The only Definitions object at module scope: the code location.
defs = build_celery_defs(definitions.defs)
