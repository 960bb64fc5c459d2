"""This code location's assets: the task backlog of every realm and its checks."""

from polaris_pipeline.dagster.backlog import BACKLOG_CHECKS, polaris_task_backlog
from polaris_pipeline.dagster.backlog_report import BacklogSettings

__all__ = [
    "BACKLOG_CHECKS",
    "BacklogSettings",
    "polaris_task_backlog",
]
