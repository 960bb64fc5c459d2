"""This code location's assets: the task backlog of every realm and its checks, and the
leak report (table roots no live entity owns and no task names) with its check."""

from polaris_pipeline.dagster.backlog import BACKLOG_CHECKS, BacklogSettings, polaris_task_backlog
from polaris_pipeline.dagster.leaks import LeakSettings, polaris_leaked_roots

__all__ = [
    "BACKLOG_CHECKS",
    "BacklogSettings",
    "LeakSettings",
    "polaris_leaked_roots",
    "polaris_task_backlog",
]
