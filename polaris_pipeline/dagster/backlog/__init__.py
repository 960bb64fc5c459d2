"""The task backlog of every realm, as one asset the UI plots, with four checks.

``polaris_task_backlog`` is one (non-partitioned) asset: each materialization
records, as numeric metadata, how many tasks are in each state and how long
the longest-waiting orphan has waited, over all realms (``pending``, ``total``,
...) and per realm (``POLARIS/pending``, ``POLARIS/total``, ...). The UI plots
every number over time on the asset's page. It is not partitioned by realm:
partitioned asset checks are a Dagster preview feature (a warning at every
code-server start), and a realm is not a slice of data that is "missing" or
"materialized" anyway.

No run refreshes the asset or its checks. The sweeper sensor reports the asset's
numbers and the three metastore checks with its sweeps (``sweep_report``); a
sweeper cannot report that it stopped, so ``polaris_sweeper_watch`` (``watch``),
a sensor that reads only the instance, reports ``sweeper_is_sweeping``
(``freshness``). The modules: ``settings`` (the ``backlog`` resource), ``report``
(the numbers), ``checks`` (the metastore checks), ``freshness``, ``assets`` (the
definitions), ``watch``, ``sweep_report``. The names below are the ones a project
composing its own ``Definitions`` uses.
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
from polaris_pipeline.dagster.backlog.watch import (
    WATCH_NAME,
    build_sweeper_watch,
    polaris_sweeper_watch,
)

__all__ = [
    "BACKLOG_CHECKS",
    "STORAGE_CHECKS",
    "WATCH_NAME",
    "BacklogSettings",
    "build_sweeper_watch",
    "held_tables_restorable",
    "no_dead_tasks",
    "no_failing_tasks",
    "no_stale_orphans",
    "polaris_sweeper_watch",
    "polaris_task_backlog",
    "sweeper_is_sweeping",
]
