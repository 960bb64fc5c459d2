"""The task backlog of every realm, as one asset the UI plots, with four checks.

``polaris_task_backlog`` records as numeric metadata the tasks per state and the oldest
orphan's wait, overall (``pending``, ``total``...) and per realm (``POLARIS/pending``...).
Not partitioned by realm: partitioned checks are a Dagster preview (warned at every
code-server start) and a realm is no slice of data. No run refreshes it: the sweeper
reports it and the three metastore checks (``sweep_report``); ``polaris_sweeper_watch``
(``watch``), reading only the instance, reports ``sweeper_is_sweeping`` (``freshness``).
"""

from polaris_pipeline.dagster.backlog.assets import (
    BACKLOG_CHECKS,
    STORAGE_CHECKS,
    held_tables_restorable,
    no_dead_tasks,
    no_failing_tasks,
    no_stale_orphans,
    polaris_task_backlog,
    sweeper_is_sweeping,
)
from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.dagster.backlog.watch import WATCH_NAME, polaris_sweeper_watch

__all__ = [
    "BACKLOG_CHECKS",
    "STORAGE_CHECKS",
    "WATCH_NAME",
    "BacklogSettings",
    "held_tables_restorable",
    "no_dead_tasks",
    "no_failing_tasks",
    "no_stale_orphans",
    "polaris_sweeper_watch",
    "polaris_task_backlog",
    "sweeper_is_sweeping",
]
