"""This code location's assets: ``assets.location`` lists them (the task backlog of every
realm with its checks, and the leak report with its check) for ``definitions.py``.

Its re-exports of earlier releases still import, with a ``DeprecationWarning``.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "polaris_pipeline.dagster.backlog": (
            "BACKLOG_CHECKS",
            "BacklogSettings",
            "polaris_task_backlog",
        ),
        "polaris_pipeline.dagster.leaks": ("LeakSettings", "polaris_leaked_roots"),
    },
)
