"""Dagster assets of the polaris-pipeline code location: the realms and their task backlog."""

from polaris_pipeline.dagster.backlog import (
    BacklogSettings,
    no_dead_tasks,
    no_stale_orphans,
    polaris_backlog_job,
    polaris_backlog_schedule,
    polaris_task_backlog,
)
from polaris_pipeline.dagster.partitions import REALM_PARTITIONS_NAME, realm_partitions

__all__ = [
    "REALM_PARTITIONS_NAME",
    "BacklogSettings",
    "no_dead_tasks",
    "no_stale_orphans",
    "polaris_backlog_job",
    "polaris_backlog_schedule",
    "polaris_task_backlog",
    "realm_partitions",
]
