"""This repository's code location with the task job's steps on Celery workers.

``definitions.py``'s own composition, unchanged: the deployment chooses Celery in
its environment (``POLARIS_PIPELINE_TASK_EXECUTOR=celery``, beside the
``POLARIS_PIPELINE_CELERY_*`` variables and ``POLARIS_PIPELINE_IO_BASE_DIR``,
docs/scale-out.md). Load this module (``deploy/celery/workspace.yaml``) in the code
server, the run workers and the Celery workers: it refuses to load without that
choice, so no process of a Celery deployment runs the task job another way.
"""

from definitions import defs
from polaris_pipeline.dagster import TASK_EXECUTOR_ENV
from resources.location import DEPLOYMENT

if DEPLOYMENT.executor != "celery":
    raise ImportError(
        f"celery_definitions needs {TASK_EXECUTOR_ENV}=celery in the environment "
        f"(docs/scale-out.md), not {DEPLOYMENT.executor or 'unset'}"
    )

__all__ = ["defs"]
