"""Celery settings of the workers that run polaris_task_job's steps (docs/scale-out.md).

``dagster_celery.app`` (the app the workers start with) reads a module of this
name when it is importable. Put this directory on ``PYTHONPATH`` with the
project and start the worker as PID 1 of its container::

    PYTHONPATH=/opt/polaris-pipeline:/opt/polaris-pipeline/deploy/celery \\
    celery -A dagster_celery.app worker -Q "${POLARIS_PIPELINE_CELERY_QUEUE:-dagster}" \\
        -I celery_definitions --concurrency=4

The values come from the environment when the worker starts: the same variables
the run workers read (``jobs/celery.py``), so both sides agree on the broker, the
result backend and the queue, and no password is written to a file.
"""

import os

# Required: a worker without a broker has nothing to do.
broker_url = os.environ["POLARIS_PIPELINE_CELERY_BROKER"]
result_backend = os.environ.get("POLARIS_PIPELINE_CELERY_BACKEND") or "rpc://"
# One step per free process: a long manifest step never holds short ones back.
worker_prefetch_multiplier = 1

del os  # the app reads every public name of this module as a setting
