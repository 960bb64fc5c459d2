"""Dagster runs made and aged by hand, for the report sensor and the run retention.

Dagster has no API to set a run's last update; the retention and the report
sensor both select runs by it, so tests set ``runs.update_timestamp`` in the run
storage's own table.
"""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.storage.runs.schema import RunsTable

from polaris_pipeline.dagster.contract import TAG_TOTAL, run_config_for
from polaris_pipeline.dagster.task_job import polaris_task_job


def set_run_updated(instance: DagsterInstance, run_id: str, when: datetime) -> None:
    """Set the run's last update to ``when`` (stored naive UTC, as Dagster keeps it)."""
    with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
        conn.execute(
            RunsTable.update()
            .where(RunsTable.c.run_id == run_id)
            .values(update_timestamp=when.astimezone(UTC).replace(tzinfo=None))
        )


def set_run_started(instance: DagsterInstance, run_id: str, when_s: float) -> None:
    """Set the run's start time to ``when_s`` (seconds since the epoch)."""
    with instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
        conn.execute(
            RunsTable.update().where(RunsTable.c.run_id == run_id).values(start_time=when_s)
        )


def finished_task_run(instance: DagsterInstance, updated: datetime | None = None) -> str:
    """A SUCCESS run of the task job that never executed (nothing to total), last
    updated now or at ``updated``; returns its id."""
    run = instance.create_run_for_job(
        job_def=polaris_task_job,
        run_config=run_config_for("POLARIS", 1),
        status=DagsterRunStatus.SUCCESS,
    )
    if updated is not None:
        set_run_updated(instance, run.run_id, updated)
    return run.run_id


def has_total(instance: DagsterInstance, run_id: str) -> bool:
    """Whether the report sensor (or the retention) has tagged the run with its total."""
    run = instance.get_run_by_id(run_id)
    return run is not None and TAG_TOTAL in run.tags
