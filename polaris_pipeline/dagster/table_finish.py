"""A dropped table's last step in the task job: its unreferenced files, then its row.

A table whose attempt created children has its unreferenced phase run last
(``TaskOutcome.deferred``): the root hands its lease (and the row it read) to
this step, which runs after the last stage's steps are all done (Dagster skips
it when one failed). Here ``Runner.finish_table`` runs the phase
(``cleanup/unreferenced.py``): in ``delete`` mode the root left the row held,
and this step completes it or records the phase's failure (skipped, the row
stays held until its lease lapses and a sweeper's run retries the table); in
``report`` mode the root completed the row as ever and this step only reports.

The step's metadata carries the phase's numbers and line, never a task status:
the root step counted the table already, so the run's total counts it once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dagster import Failure, OpExecutionContext, Output

from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.task_step import open_step
from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import UNREFERENCED
from polaris_pipeline.report.outcome_view import OutcomeView
from polaris_pipeline.report.step_record import StepRecord
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease

LEASE_KEY, MODE_KEY, ROW_KEY = "lease", "mode", "row"


def finish_input(outcome: TaskOutcome) -> dict[str, Any]:
    """What the root step hands this step: the table's lease, mode and the row it read."""
    row = dataclasses.asdict(outcome.row) if outcome.row is not None else None
    return {LEASE_KEY: outcome.lease.to_dict(), MODE_KEY: outcome.unreferenced_after, ROW_KEY: row}


def finish_metadata(translator: PolarisTranslator, outcome: TaskOutcome) -> dict[str, Any]:
    """The phase's numbers and its record: its line, no task status (the root step
    counted the table)."""
    view = OutcomeView(outcome)
    line = view.unreferenced.summary() if view.unreferenced is not None else None
    return {
        **translator.lease_metadata(outcome.lease),
        **view.unreferenced_metadata(),
        **translator.step_record_metadata(StepRecord(unreferenced=line)),
    }


def finish_table_step(
    context: OpExecutionContext,
    table: Mapping[str, Any],
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    translator: PolarisTranslator,
) -> Output[dict]:
    """Run the deferred table's unreferenced phase and complete its row."""
    lease = Lease.from_dict(table[LEASE_KEY])
    row = TaskRow(**table[ROW_KEY]) if table.get(ROW_KEY) else None
    deferred = TaskOutcome(
        lease,
        Status.DONE,
        row.task_type_code if row is not None else None,
        result=CleanupResult(),
        row=row,
        unreferenced_after=table.get(MODE_KEY) or "delete",
    )
    with open_step(context, metastore, storage, lease.realm_id, translator) as step:
        final = step.runner.finish_table(deferred, children_done=True)
    view = OutcomeView(final)
    summary = view.unreferenced.summary() if view.unreferenced else "no unreferenced phase"
    meta = finish_metadata(translator, final)
    if final.status is Status.DONE:
        context.log.info(f"table task {translator.task_label(lease)} finished: {summary}")
        return Output({"status": final.status.value, UNREFERENCED: summary}, metadata=meta)
    if final.status is Status.LEASE_LOST:
        context.log.warning(f"{final.error}; the current holder finishes the table")
        return Output({"status": final.status.value, "message": final.error}, metadata=meta)
    context.log.error(f"table task {translator.task_label(lease)} failed: {final.error}")
    raise Failure(description=final.error, metadata=meta, allow_retries=False)
