"""``polaris_task_job`` on dagster-celery's executor: every step is a Celery task.

Graph, ops, retries and tags are ``task_job.py``'s; each step (root, every mapped child)
goes through the broker to any worker, so a table of thousands of manifests fans out.
The broker comes from the run worker's environment (``settings/executor.py``):
``POLARIS_PIPELINE_CELERY_BROKER``, ``_BACKEND`` (default ``rpc://``), ``_QUEUE`` (default
``dagster``); unset, dagster-celery's defaults. Workers must use the same broker and queue
(``deploy/celery/dagster_celery_config.py``, docs/scale-out.md).
"""

from __future__ import annotations

from typing import Any

from dagster import ExecutorDefinition, FilesystemIOManager
from dagster_celery import celery_executor

from polaris_pipeline.settings import ENV_VARIABLES, ExecutorSection, executor_settings

BROKER_ENV = ENV_VARIABLES[("executor", "celery_broker")]
BACKEND_ENV = ENV_VARIABLES[("executor", "celery_backend")]
QUEUE_ENV = ENV_VARIABLES[("executor", "celery_queue")]
# Where step outputs (the child leases a table cleanup hands to its children) are
# kept. The steps of one run execute on different Celery workers, so with workers on
# more than one host this must be storage they all reach (a shared volume).
IO_BASE_DIR_ENV = ENV_VARIABLES[("executor", "io_base_dir")]


def celery_executor_config(section: ExecutorSection) -> dict[str, Any]:
    """Executor config naming the variables, never their values: broker URLs carry passwords,
    resolved through ``{"env": NAME}`` in the run worker; the UI shows only the name.
    """
    config: dict[str, Any] = {}
    if section.celery_broker:
        config["broker"] = {"env": BROKER_ENV}
    if section.celery_backend:
        config["backend"] = {"env": BACKEND_ENV}
    queue = section.celery_queue
    if queue:
        # Steps without a ``dagster-celery/queue`` tag go to the default queue.
        config["config_source"] = {"task_default_queue": queue}
    return config


def io_manager_for(section: ExecutorSection) -> FilesystemIOManager | None:
    """The ``io_manager`` for the section's ``io_base_dir``; None when it is unset."""
    base_dir = section.io_base_dir
    return FilesystemIOManager(base_dir=base_dir) if base_dir else None


def _config_from_environment(_outer: Any) -> dict[str, Any]:
    return celery_executor_config(executor_settings())


def build_celery_executor() -> ExecutorDefinition:
    """dagster-celery's executor, configured from the environment when a run's config is resolved
    (run worker and each Celery worker), never at import: each process uses its own.
    """
    return celery_executor.configured(_config_from_environment, config_schema={}, name="celery")
