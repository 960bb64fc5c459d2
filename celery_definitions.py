"""This repository's code location with the task job's steps on Celery workers.

The same definitions as ``definitions.py``, built by the same factory, except
that ``polaris_task_job`` runs on dagster-celery's executor. Load this module
instead of ``definitions`` (``deploy/celery/workspace.yaml``): in the code
server, in the run workers and in the Celery workers, which import it to run
the steps. Environment: everything ``definitions.py`` reads, plus the
``POLARIS_PIPELINE_CELERY_*`` variables and ``POLARIS_PIPELINE_IO_BASE_DIR``
(docs/scale-out.md).
"""

import os

from polaris_pipeline.dagster import TASK_EXECUTOR_ENV, build_defs_from_env

defs = build_defs_from_env({**os.environ, TASK_EXECUTOR_ENV: "celery"})
