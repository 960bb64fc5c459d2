"""The executor section: which executor runs a cleanup's steps, and Celery's broker and queue.

Read by the process that runs the steps, from its own environment, when a run's
config is resolved (the run worker, each Celery worker), never when the code
location is imported; so it is not a block of ``PipelineSettings``, which the CLI
and the code location are built from. The broker and backend URLs carry
passwords: the executor's config names their variables, never their values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from polaris_pipeline.settings.section import Section, blank_is_none

# How the task job's steps execute: all in the run's own process (a run is one task's
# worth of work), one process per step, or on Celery workers (dagster-celery, an extra).
TaskExecutor = Literal["multiprocess", "in_process", "celery"]


class ExecutorSection(Section):
    """How a cleanup's steps run, and where Celery sends them."""

    task_executor: TaskExecutor | None = Field(
        default=None,
        description="The task job's executor: multiprocess, in_process or celery; null: Dagster's.",
    )
    celery_broker: str | None = Field(
        default=None,
        repr=False,
        description=(
            "Celery broker URL (pyamqp://user:pass@rabbitmq:5672//, redis://redis:6379/0); "
            "null: dagster-celery's default."
        ),
    )
    celery_backend: str | None = Field(
        default=None,
        repr=False,
        description="Celery result backend URL; null: dagster-celery's default (rpc://).",
    )
    celery_queue: str | None = Field(
        default=None,
        description="The Celery queue steps go to; null: dagster-celery's (dagster).",
    )
    io_base_dir: str | None = Field(
        default=None,
        description=(
            "Directory for step outputs that every Celery worker reaches (a shared volume); "
            "null: $DAGSTER_HOME/storage of each process."
        ),
    )

    _text = field_validator("celery_broker", "celery_backend", "celery_queue", "io_base_dir")(
        blank_is_none
    )
