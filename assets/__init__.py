"""This code location's assets: ``assets.location`` lists them (the task backlog of every
realm with its checks, and the leak report with its check) for ``definitions.py``.

The library names this package re-exported in earlier releases still import from here,
with a ``DeprecationWarning`` naming the library module to import them from.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "BACKLOG_CHECKS": "polaris_pipeline.dagster.backlog",
        "BacklogSettings": "polaris_pipeline.dagster.backlog",
        "polaris_task_backlog": "polaris_pipeline.dagster.backlog",
        "LeakSettings": "polaris_pipeline.dagster.leaks",
        "polaris_leaked_roots": "polaris_pipeline.dagster.leaks",
    },
)
