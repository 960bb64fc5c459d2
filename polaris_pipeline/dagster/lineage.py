"""Who launched a run of the task job, read from its tags, and the runs of its lineage.

What a run does at start (``RunIntent``): a sweeper's run (``polaris/launched_by:
sweeper``) leases an available task, else ends skipped (a lost race, no failure); an
operator's run retries a backing-off or dead task now, and fails naming the reason for
one held elsewhere, pending or gone; a Dagster run retry keeps its original's intent.
Every run of a lineage leases under its root run's executor id, so a later run adopts an
earlier one's lease unless one is still in progress (``lineage_busy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dagster import DagsterRunStatus, OpExecutionContext, RunsFilter

from polaris_pipeline.dagster.contract import (
    LAUNCHED_BY_SWEEPER,
    PARENT_RUN_ID_TAG,
    RETRY_NUMBER_TAG,
    ROOT_RUN_ID_TAG,
    TAG_LAUNCHED_BY,
)

_IN_PROGRESS = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


@dataclass(frozen=True)
class RunIntent:
    """Who launched the run, read from its tags, and what follows from it."""

    operator: bool  # an operator's deliberate act: backing-off and dead tasks run now
    root_run_id: str  # the run lineage's first run: it names the executor id
    parent_run_id: str | None
    how: str  # in words, for logs


def run_intent(run_id: str, tags: Mapping[str, str]) -> RunIntent:
    parent = tags.get(PARENT_RUN_ID_TAG) or None
    root = tags.get(ROOT_RUN_ID_TAG) or parent or run_id
    by_sweeper = tags.get(TAG_LAUNCHED_BY) == LAUNCHED_BY_SWEEPER
    raw_retry = tags.get(RETRY_NUMBER_TAG)
    retry = int(raw_retry) if raw_retry and raw_retry.isdigit() else None
    if parent is None:
        how = "requested by the sweeper" if by_sweeper else "launched by an operator"
        return RunIntent(not by_sweeper, root, None, how)
    if retry is not None:
        # The daemon's run retry carries the parent's tags: the original intent holds.
        how = f"automatic run retry {retry} of run {parent}"
        return RunIntent(not by_sweeper, root, parent, how)
    return RunIntent(True, root, parent, f"re-execution of run {parent} by an operator")


def intent_of(context: OpExecutionContext) -> RunIntent:
    """The intent of the run ``context`` belongs to."""
    return run_intent(context.run_id, context.dagster_run.tags)


def lineage_busy(context: OpExecutionContext, intent: RunIntent) -> str | None:
    """Another run of this lineage still in progress (it shares the executor id), or None."""
    if intent.parent_run_id is None:
        return None  # a first run: the only holder of its executor id is itself
    try:
        instance = context.instance
        runs = instance.get_runs(RunsFilter(tags={ROOT_RUN_ID_TAG: intent.root_run_id}))
        root = instance.get_run_by_id(intent.root_run_id)
    except Exception:
        return None
    for run in [*runs, *([root] if root is not None else [])]:
        if run.run_id != context.run_id and run.status in _IN_PROGRESS:
            return run.run_id
    return None
