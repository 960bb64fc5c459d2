"""The repository's code location with the reliability journal in every process that loads it.

The daemon fault scenarios (tests/reliability/test_daemon_*.py) judge "no two
runs worked one task at once" from what the processes did, not from timing
guesses: every process that imports this module (the code server, each run
worker, each step process) appends a ``begin`` line before each delete and an
``end`` line after it to ``$PP_REL_JOURNAL_DIR/<pid>.jsonl``, naming the lease
(task, attempt, executor), as tests/reliability/worker.py does for sweepers.

``PP_REL_BACKOFF_BASE_MS`` / ``PP_REL_BACKOFF_MAX_MS`` scale the failure backoff
down for a short test (the code location has no setting for it: the defaults of
``TaskPolicy`` are what a deployment runs). ``faulty://`` is registered by
``tests.support.daemon_location``, whose definitions this module serves.
"""

import dataclasses
import os
from typing import Any

import polaris_pipeline.dagster.resources.metastore as metastore_resource
import polaris_pipeline.dagster.task_step as task_step
from polaris_pipeline.tasks.model import TaskPolicy
from tests.reliability.journal import Journal
from tests.reliability.worker import install_journal, journal_runner_class

JOURNAL_DIR_ENV = "PP_REL_JOURNAL_DIR"
BACKOFF_BASE_ENV = "PP_REL_BACKOFF_BASE_MS"
BACKOFF_MAX_ENV = "PP_REL_BACKOFF_MAX_MS"

_directory = os.environ.get(JOURNAL_DIR_ENV)
if _directory:
    _journal = Journal(os.path.join(_directory, f"{os.getpid()}.jsonl"))
    install_journal(_journal, None)
    # The task job's steps make their Runner in task_step.
    task_step.Runner = journal_runner_class(_journal)  # type: ignore[misc,assignment]

if os.environ.get(BACKOFF_BASE_ENV):
    _base_ms = int(os.environ[BACKOFF_BASE_ENV])
    _max_ms = int(os.environ.get(BACKOFF_MAX_ENV) or _base_ms)

    class _ScaledPolicy:
        """``TaskPolicy`` as the resource builds it, with the backoff scaled."""

        @staticmethod
        def from_section(section: Any) -> TaskPolicy:
            policy = TaskPolicy.from_section(section)
            return dataclasses.replace(policy, backoff_base_ms=_base_ms, backoff_max_ms=_max_ms)

    # The resource builds its TaskPolicy by this name (resources/metastore.py).
    metastore_resource.TaskPolicy = _ScaledPolicy  # type: ignore[misc,assignment]

from tests.support.daemon_location import defs  # noqa: E402  # after the patches, which it must see

__all__ = ["defs"]
