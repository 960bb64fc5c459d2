"""``build_defs``: everything the integration offers, as one ``Definitions``.

The one place that assembles the sensor, the jobs, the backlog asset, its checks
and schedule, and the resources. ``definitions.py`` (this repository's code
location), the Celery location and the ``dg`` Component all call it, so a new
piece is added here once and reaches every deployment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from dagster import (
    Definitions,
    EnvVar,
    ExecutorDefinition,
    FilesystemIOManager,
    in_process_executor,
)

from polaris_pipeline.dagster.backlog import (
    BacklogSettings,
    no_dead_tasks,
    no_stale_orphans,
    polaris_backlog_job,
    polaris_backlog_schedule,
    polaris_task_backlog,
)
from polaris_pipeline.dagster.realm_backfill import polaris_realm_backfill_job
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweeper import build_polaris_task_sweeper
from polaris_pipeline.dagster.task_job import MULTIPROCESS_EXECUTOR, build_polaris_task_job
from polaris_pipeline.metastore import URL_ENV

# How the task job's steps execute: all in the run's own process (the default: a
# run is one task's worth of work), one process per step, or on Celery workers
# (dagster-celery, an extra).
TaskExecutor = Literal["multiprocess", "in_process", "celery"]

REALMS_ENV = "POLARIS_PIPELINE_REALMS"
LEASE_TIMEOUT_ENV = "POLARIS_PIPELINE_LEASE_TIMEOUT_MS"
GRACE_ENV = "POLARIS_PIPELINE_GRACE_MS"
MAX_ATTEMPTS_ENV = "POLARIS_PIPELINE_MAX_ATTEMPTS"
TASK_EXECUTOR_ENV = "POLARIS_PIPELINE_TASK_EXECUTOR"


def _task_executor(executor: TaskExecutor | ExecutorDefinition | None) -> ExecutorDefinition | None:
    if executor is None or executor == "in_process":
        return None  # the task job's own default: every step in the run's process
    if isinstance(executor, ExecutorDefinition):
        return executor
    if executor == "multiprocess":
        return MULTIPROCESS_EXECUTOR
    if executor == "celery":
        # Imported here: dagster-celery is an extra, only the Celery location needs it.
        from polaris_pipeline.dagster.celery import build_celery_executor

        return build_celery_executor()
    raise ValueError(f"unknown task executor {executor!r}: multiprocess, in_process or celery")


def build_defs(
    *,
    metastore_url: str | EnvVar | None = None,
    realms: Sequence[str] | None = None,
    lease_timeout_ms: int | None = None,
    grace_ms: int | None = None,
    max_attempts: int | None = None,
    storage: PolarisStorageResource | None = None,
    sweeper: SweeperSettings | None = None,
    backlog: BacklogSettings | None = None,
    executor: TaskExecutor | ExecutorDefinition | None = None,
    io_manager: FilesystemIOManager | None = None,
) -> Definitions:
    """The sweeper sensor, the task and backfill jobs, the backlog and its checks.

    ``metastore_url`` should be an ``EnvVar`` so the UI shows the variable's
    name, never the URL; None means ``EnvVar("POLARIS_METASTORE_URL")``.
    Unset lease settings keep the library's defaults.
    ``executor`` chooses how the task job's steps run.
    """
    policy: dict[str, Any] = {
        field: value
        for field, value in (
            ("lease_timeout_ms", lease_timeout_ms),
            ("grace_ms", grace_ms),
            ("max_attempts", max_attempts),
        )
        if value is not None
    }
    task_job = build_polaris_task_job(executor_def=_task_executor(executor))
    resources: dict[str, Any] = {
        "metastore": PolarisMetastoreResource(
            url=EnvVar(URL_ENV) if metastore_url is None else metastore_url,
            realms=list(realms) if realms else None,
            **policy,
        ),
        # config_path unset: $POLARIS_PIPELINE_STORAGE_CONFIG, read when a run starts.
        "storage": storage or PolarisStorageResource(),
        "sweeper": sweeper or SweeperSettings(),
        "backlog": backlog or BacklogSettings(),
    }
    if io_manager is not None:
        resources["io_manager"] = io_manager
    return Definitions(
        assets=[polaris_task_backlog],
        asset_checks=[no_dead_tasks, no_stale_orphans],
        jobs=[task_job, polaris_realm_backfill_job, polaris_backlog_job],
        sensors=[build_polaris_task_sweeper(task_job)],
        schedules=[polaris_backlog_schedule],
        # For jobs without an executor of their own (the backlog's, and the one
        # behind the UI's Materialize button): a few small queries, not worth a
        # process each.
        executor=in_process_executor,
        resources=resources,
    )


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def build_defs_from_env(environ: Mapping[str, str] | None = None) -> Definitions:
    """``build_defs`` configured from the ``POLARIS_*`` environment (docs/dagster.md)."""
    env = os.environ if environ is None else environ
    realms = [r.strip() for r in env.get(REALMS_ENV, "").split(",") if r.strip()]
    executor = env.get(TASK_EXECUTOR_ENV, "").strip() or None
    io_manager = None
    if executor == "celery":
        from polaris_pipeline.dagster.celery import io_manager_from_env

        io_manager = io_manager_from_env(env)
    return build_defs(
        realms=realms or None,
        lease_timeout_ms=_int_env(env, LEASE_TIMEOUT_ENV),
        grace_ms=_int_env(env, GRACE_ENV),
        max_attempts=_int_env(env, MAX_ATTEMPTS_ENV),
        sweeper=SweeperSettings.from_env(env),
        backlog=BacklogSettings.from_env(env),
        executor=executor,  # type: ignore[arg-type]  # checked by _task_executor
        io_manager=io_manager,
    )


__all__ = ["TASK_EXECUTOR_ENV", "TaskExecutor", "build_defs", "build_defs_from_env"]
