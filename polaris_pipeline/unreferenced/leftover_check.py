"""What is left under a dropped table's location when its task row vanished while we held it.

A holder finds its row gone (a fence or a lease compare-and-set finds no row) when Polaris
ran the task to its end, another holder finished it after our lease lapsed, or an operator
discarded it. Nobody will run it again, and a row gone does not prove the files are (issue
38). So the holder lists the dropped entity's recorded location as the unreferenced phase
does in ``report`` mode (``unreferenced/listing.py``: the catalog's recorded location only,
refused when a live entity overlaps it or it is a root or above an allowed location),
deletes nothing, and the outcome carries that report (``unreferenced_left``) on every
surface the phase's report reaches.

Only a table's or view's own ENTITY_CLEANUP task is checked: a child works under its
table's location. The listing is what is there when the loss is found (children this
attempt created may still delete more); a row gone before the attempt read it records no
location. The runner calls ``after_attempt`` and ``after_table_vanished`` with the task as
the attempt decoded it and a ``Lister`` (a dry-run context), so nothing of ``execution/``
is imported here.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.errors import LeaseLost, PolarisPipelineError, one_line
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.payloads import DroppedEntity
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced.listing import run_unreferenced
from polaris_pipeline.unreferenced.mode import UnreferencedMode
from polaris_pipeline.unreferenced.report import UnreferencedReport

log = logging.getLogger("polaris_pipeline.runner")

ROW_GONE = (
    "its row is gone (run to its end by Polaris or by the holder after us, or discarded); "
    "what is left under its location was listed, nothing deleted"
)


class Lister(Protocol):
    """What the check needs of a runner's contexts: its metastore and a dry run's storage."""

    @property
    def metastore(self) -> Metastore: ...

    def schema_version(self) -> int | None: ...

    def cleanup_context(self, task: DecodedTask, lease: Lease | None = None) -> CleanupContext: ...

    def reach_storage(self, ctx: CleanupContext) -> None: ...


def _vanished(outcome: TaskOutcome) -> bool:
    """An attempt that ended without finishing its row: its lease lost, or its failure
    found no row to record on (``FailOutcome.ALREADY_GONE`` reads as done)."""
    if outcome.status is Status.LEASE_LOST:
        return True
    result = outcome.result
    return outcome.status is Status.DONE and result is not None and not result.ok


def left_under(runner: Lister, task: DecodedTask, entity: DroppedEntity) -> UnreferencedReport:
    """What is under ``entity``'s recorded location now, listed and never deleted."""
    ctx = runner.cleanup_context(task)  # no lease: a dry run's context, which deletes nothing
    try:
        runner.reach_storage(ctx)
    except (PolarisPipelineError, OSError) as exc:
        return UnreferencedReport(
            mode=UnreferencedMode.REPORT.value,
            dry_run=True,
            error=f"storage not reached: {one_line(exc)}",
        )
    live = LiveLocations(
        runner.metastore.engine, runner.schema_version(), bound_s=runner.metastore.guard_bound_s
    )
    try:
        return run_unreferenced(ctx, entity, UnreferencedMode.REPORT, live.overlaps)
    except LeaseLost as exc:  # a report fences nothing; never expected
        return UnreferencedReport(mode=UnreferencedMode.REPORT.value, dry_run=True, error=str(exc))


def after_table_vanished(runner: Lister, outcome: TaskOutcome) -> TaskOutcome:
    """``outcome``, with what is left under its location now that its row is gone (a
    deferred table once its children ran, or an attempt that vanished)."""
    task = outcome.task
    # The dropped table or view of an ENTITY_CLEANUP task; None for a child, a row
    # gone before the attempt read it, or a payload that did not decode.
    entity = task.entity if task is not None else None
    result = outcome.result
    if task is None or entity is None or (result is not None and result.unreferenced is not None):
        return outcome  # a child, or the phase already said what is left
    if runner.metastore.get_task(task.row.realm_id, task.row.id) is not None:
        return outcome  # lost to a holder who still holds it: the rest is theirs
    report = left_under(runner, task, entity)
    result = replace(result or CleanupResult(), unreferenced=report)
    error = f"{outcome.error}; {ROW_GONE}" if outcome.error else None
    log.warning("task %s: %s: %s", task.label, ROW_GONE, report.summary())
    return outcome.evolve(result=result, error=error)


def after_attempt(runner: Lister, outcome: TaskOutcome) -> TaskOutcome:
    """``outcome``, with what is left under its location when its row vanished
    meanwhile; unchanged otherwise."""
    return after_table_vanished(runner, outcome) if _vanished(outcome) else outcome
