"""This code location's assets: the task backlog of every realm and its checks."""

from polaris_pipeline.dagster.backlog import (
    BACKLOG_CHECKS,
    BacklogSettings,
    polaris_task_backlog,
)

__all__ = [
    "BACKLOG_CHECKS",
    "BacklogSettings",
    "polaris_task_backlog",
]
