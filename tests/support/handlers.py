"""Putting a handler of a test's own in place of the table cleanup, for one test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from polaris_pipeline.cleanup import dispatch
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.tasks.model import TaskType

Handler = Callable[[CleanupContext], CleanupTally]


def replace_table_handler(monkeypatch: pytest.MonkeyPatch, handler: Handler) -> None:
    """``handler`` runs every ENTITY_CLEANUP_SCHEDULER task; the other types keep theirs."""
    real: Callable[[TaskType], Handler] = dispatch.handler_for
    monkeypatch.setattr(
        dispatch,
        "handler_for",
        lambda kind: handler if kind is TaskType.ENTITY_CLEANUP_SCHEDULER else real(kind),
    )
