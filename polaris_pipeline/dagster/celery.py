"""``polaris_task_job`` on dagster-celery's executor: every step is a Celery task.

The graph, its ops, their retry policies and the run tags are those of
``task_job.py``; only the executor differs. The run worker (the process the
run launcher starts) orchestrates; each step (the root task, every mapped child)
is sent through the broker to whichever Celery worker takes it, so a table with
thousands of manifests fans out over a pool of workers instead of one pod.

The executor reads its broker from the environment of the run worker, never
from the code: ``POLARIS_PIPELINE_CELERY_BROKER`` (e.g.
``pyamqp://user:pass@rabbitmq:5672//`` or ``redis://redis:6379/0``), and
optionally ``POLARIS_PIPELINE_CELERY_BACKEND`` (result backend, default
``rpc://``) and ``POLARIS_PIPELINE_CELERY_QUEUE`` (the queue steps go to,
default ``dagster``). Unset, dagster-celery's own defaults apply
(``pyamqp://guest@$DAGSTER_CELERY_BROKER_HOST:5672//``, ``rpc://``).
The Celery workers must use the same broker and queue: see
``deploy/celery/dagster_celery_config.py`` and docs/scale-out.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dagster import ExecutorDefinition, FilesystemIOManager
from dagster_celery import celery_executor

BROKER_ENV = "POLARIS_PIPELINE_CELERY_BROKER"
BACKEND_ENV = "POLARIS_PIPELINE_CELERY_BACKEND"
QUEUE_ENV = "POLARIS_PIPELINE_CELERY_QUEUE"
# Where step outputs (the child leases a table cleanup hands to its children) are
# kept. The steps of one run execute on different Celery workers, so with workers on
# more than one host this must be storage they all reach (a shared volume).
# Unset: $DAGSTER_HOME/storage of each process, enough when all share one host.
IO_BASE_DIR_ENV = "POLARIS_PIPELINE_IO_BASE_DIR"


def celery_executor_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Executor config that names the environment variables, never their values.

    Broker URLs carry passwords: through ``{"env": NAME}`` they are resolved in
    the run worker when the run starts, and the UI shows only the name.
    """
    env = os.environ if environ is None else environ
    config: dict[str, Any] = {}
    if env.get(BROKER_ENV):
        config["broker"] = {"env": BROKER_ENV}
    if env.get(BACKEND_ENV):
        config["backend"] = {"env": BACKEND_ENV}
    queue = env.get(QUEUE_ENV)
    if queue:
        # Steps without a ``dagster-celery/queue`` tag go to the default queue.
        config["config_source"] = {"task_default_queue": queue}
    return config


def io_manager_from_env(environ: Mapping[str, str] | None = None) -> FilesystemIOManager | None:
    """The ``io_manager`` for ``$POLARIS_PIPELINE_IO_BASE_DIR``; None when it is unset."""
    env = os.environ if environ is None else environ
    base_dir = env.get(IO_BASE_DIR_ENV, "").strip()
    return FilesystemIOManager(base_dir=base_dir) if base_dir else None


def _config_from_environment(_outer: Any) -> dict[str, Any]:
    return celery_executor_config()


def build_celery_executor() -> ExecutorDefinition:
    """dagster-celery's executor, configured from the environment (see the module doc).

    The environment is read when a run's config is resolved (in the run worker,
    and again in each Celery worker), not when the code location is imported:
    importing needs no variable, and each process uses its own environment.
    """
    return celery_executor.configured(_config_from_environment, config_schema={}, name="celery")
