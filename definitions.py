"""The polaris-pipeline code location: what ``workspace.yaml`` loads.

Configuration comes from the environment of the code server and of the runs:

- ``POLARIS_METASTORE_URL`` (required when the sensor or a run starts, not at
  import): SQLAlchemy URL of the Polaris metastore. Read through ``EnvVar``, so
  the UI shows the variable's name, never the URL.
- ``POLARIS_PIPELINE_STORAGE_CONFIG``: storage config file (locations, options,
  allowed prefixes); unset means no rules.
- ``POLARIS_PIPELINE_REALMS``: comma-separated realms to sweep; unset sweeps all.
- ``POLARIS_PIPELINE_LEASE_TIMEOUT_MS``, ``POLARIS_PIPELINE_GRACE_MS``,
  ``POLARIS_PIPELINE_MAX_ATTEMPTS``: the lease policy.
- ``POLARIS_PIPELINE_SWEEP_INTERVAL_S``, ``POLARIS_PIPELINE_SWEEP_JITTER``,
  ``POLARIS_PIPELINE_SWEEP_MAX_RUNS``, ``POLARIS_PIPELINE_SWEEP_MAX_PENDING_RUNS``:
  the sweeper's cadence and bounds.
- ``POLARIS_PIPELINE_MAX_ORPHAN_AGE_S``: threshold of the ``no_stale_orphans``
  backlog check (default 3600).

See docs/dagster.md and docs/operations.md.
"""

from __future__ import annotations

import os
from typing import Any

from dagster import Definitions, EnvVar, in_process_executor

from assets.backlog import (
    BacklogSettings,
    no_dead_tasks,
    no_stale_orphans,
    polaris_backlog_job,
    polaris_backlog_schedule,
    polaris_task_backlog,
)
from jobs.realm_backfill import polaris_realm_backfill_job
from jobs.task_job import polaris_task_job
from polaris_pipeline.metastore import URL_ENV
from resources.metastore import PolarisMetastoreResource
from resources.storage import PolarisStorageResource
from resources.sweeper import SweeperSettings
from sensors.sweeper import polaris_task_sweeper

REALMS_ENV = "POLARIS_PIPELINE_REALMS"
LEASE_TIMEOUT_ENV = "POLARIS_PIPELINE_LEASE_TIMEOUT_MS"
GRACE_ENV = "POLARIS_PIPELINE_GRACE_MS"
MAX_ATTEMPTS_ENV = "POLARIS_PIPELINE_MAX_ATTEMPTS"


def _int_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def metastore_resource_from_env() -> PolarisMetastoreResource:
    """The metastore resource: URL through EnvVar, lease policy from plain variables."""
    realms = [r.strip() for r in os.environ.get(REALMS_ENV, "").split(",") if r.strip()]
    policy: dict[str, Any] = {}
    for env, field in (
        (LEASE_TIMEOUT_ENV, "lease_timeout_ms"),
        (GRACE_ENV, "grace_ms"),
        (MAX_ATTEMPTS_ENV, "max_attempts"),
    ):
        value = _int_env(env)
        if value is not None:
            policy[field] = value
    return PolarisMetastoreResource(
        url=EnvVar(URL_ENV),  # resolved when the resource is built, not at import
        realms=realms or None,
        **policy,
    )


defs = Definitions(
    assets=[polaris_task_backlog],
    asset_checks=[no_dead_tasks, no_stale_orphans],
    jobs=[polaris_task_job, polaris_realm_backfill_job, polaris_backlog_job],
    sensors=[polaris_task_sweeper],
    schedules=[polaris_backlog_schedule],
    # For jobs without an executor of their own, such as the one behind
    # `dagster asset materialize` and the UI's Materialize button: the backlog
    # steps are a few small queries, not worth a process each. The task job
    # keeps its multiprocess executor.
    executor=in_process_executor,
    resources={
        "metastore": metastore_resource_from_env(),
        # config_path unset: $POLARIS_PIPELINE_STORAGE_CONFIG, read when a run starts.
        "storage": PolarisStorageResource(),
        "sweeper": SweeperSettings.from_env(),
        "backlog": BacklogSettings.from_env(),
    },
)
