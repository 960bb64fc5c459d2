"""How a dropped table's run ends: its unreferenced phase, then its row.

Once its referenced purge is done (``unreferenced/phase.py`` says when the phase
applies): a table without children runs the phase inside its attempt. A table
whose attempt created children ends its attempt with a ``TableFinish``, and its
last stage (``finish``) runs once they ran: in ``delete`` mode its row stays held
until then and is completed there; in ``report`` mode the row completes with the
attempt and the report is made afterwards, from the task the attempt read.
"""

from __future__ import annotations

from collections.abc import Sequence

from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult, CleanupTally
from polaris_pipeline.errors import LeaseLost, PolarisPipelineError, one_line
from polaris_pipeline.execution.attempt_end import AttemptEnds
from polaris_pipeline.execution.attempt_record import RecordStatus
from polaris_pipeline.execution.contexts import TaskContexts
from polaris_pipeline.execution.outcome import Status, TableFinish, TaskOutcome
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import DroppedEntity
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced import leftover_check
from polaris_pipeline.unreferenced.mode import UnreferencedMode
from polaris_pipeline.unreferenced.phase import phase_entity, run_phase


class TableFinisher:
    """Ends the attempts and last stages of one holder's tables (see the module)."""

    def __init__(self, contexts: TaskContexts, ends: AttemptEnds) -> None:
        self._contexts = contexts
        self._ends = ends

    def mode(self, realm_id: str) -> UnreferencedMode:
        """The unreferenced mode ``realm_id`` runs under, as its policy resolves it."""
        return self._contexts.metastore.policy.for_realm(realm_id).unreferenced

    def after_purge(
        self,
        lease: Lease,
        decoded: DecodedTask,
        ctx: CleanupContext,
        result: CleanupTally,
        children: Sequence[Lease],
        record_failure: bool,
    ) -> TaskOutcome:
        """The end of an attempt whose referenced purge succeeded: the phase now, or a
        ``TableFinish`` for after its children, then the row completed (or held)."""
        task = decoded.row
        mode = self.mode(task.realm_id)
        entity = phase_entity(mode, decoded, result)
        if entity is not None and children:
            finish = TableFinish(lease, mode, decoded)
            if mode is UnreferencedMode.DELETE:
                # The row stays held until then. This attempt's own deletes end here;
                # the phase writes a record of its own.
                records = self._contexts.records
                error = records.close(lease, RecordStatus.AWAITING_CHILDREN, result=result)
                if error is not None:
                    return self._ends.fail(lease, task, error, result=result, children=children)
                return TaskOutcome(
                    lease,
                    Status.DONE,
                    task.task_type_code,
                    result=result.freeze(),
                    children=tuple(children),
                    finish=finish,
                )
            # A report deletes nothing: the row completes as ever, the report comes last.
            done = self._ends.complete(lease, task, result, children)
            return done.evolve(finish=finish) if done.ok else done
        if entity is not None:
            failed = self._run(lease, task, ctx, entity, result, record_failure, mode)
            if failed is not None:
                return failed
        return self._ends.complete(lease, task, result, children)

    def finish(
        self, finish: TableFinish, *, children_done: bool, result: CleanupResult | None = None
    ) -> TaskOutcome:
        """A table's last stage, once its children ran (``Runner.finish_table``).

        ``delete``: with every child done, the unreferenced phase, then the row completes;
        otherwise the row fails without the phase (a retry plans again). ``report``: the attempt
        completed the row; the report comes from the task it read. ``result``: the attempt's, which
        the phase adds to. The task is the attempt's decoding (``finish.task``); in ``delete`` mode
        the row is re-read (still held?) and keeps it (``DecodedTask.reread``).
        """
        # The phase adds to a tally of its own: the attempt's outcome keeps its result.
        tally = result.thaw() if result is not None else CleanupTally.start()
        lease, held = finish.lease, finish.task
        task_type = held.row.task_type_code if held is not None else lease.task_type_code
        report = finish.mode is UnreferencedMode.REPORT
        task = held if report else self._contexts.read(lease, held)
        if task is None or report:
            if task is not None and children_done:
                self._phase(lease, task, tally, UnreferencedMode.REPORT)
                # A report deletes nothing: its record was never opened, and goes.
                self._contexts.records.close(lease, RecordStatus.DONE, result=tally)
            done = tally.freeze()
            outcome = TaskOutcome(lease, Status.DONE, task_type, result=done, task=held)
            if task is None:  # vanished while its children ran: what is left is said
                return leftover_check.after_table_vanished(self._contexts, outcome)
            return outcome
        failed: TaskOutcome | None
        if not children_done:
            error = "unreferenced files not looked at: child task(s) of this table not done"
            failed = self._ends.fail(lease, task.row, error, result=tally)
        else:
            failed = self._phase(lease, task, tally, self.mode(task.row.realm_id))
        final = failed or self._ends.complete(lease, task.row, tally)
        return final.evolve(task=held or task)

    def _phase(
        self, lease: Lease, task: DecodedTask, result: CleanupTally, mode: UnreferencedMode
    ) -> TaskOutcome | None:
        entity = phase_entity(mode, task, result)
        if entity is None:
            return None
        ctx = self._contexts.cleanup_context(task, lease)
        try:
            self._contexts.reach_storage(ctx)
        except (PolarisPipelineError, OSError) as exc:
            if mode is not UnreferencedMode.DELETE:
                result.notes.append(f"unreferenced files not reported: {one_line(exc)}")
                return None
            return self._ends.fail(lease, task.row, one_line(exc), result=result)
        return self._run(lease, task.row, ctx, entity, result, True, mode)

    def _run(
        self,
        lease: Lease,
        task: TaskRow,
        ctx: CleanupContext,
        entity: DroppedEntity,
        result: CleanupTally,
        record_failure: bool,
        mode: UnreferencedMode,
    ) -> TaskOutcome | None:
        """Run the table's unreferenced phase; the failed outcome, or None to complete."""
        try:
            error = run_phase(ctx, entity, mode, result)
        except LeaseLost:
            return self._ends.lost(lease, task.task_type_code, "during its unreferenced files")
        if error is None or mode is not UnreferencedMode.DELETE:
            return None  # a report that failed says so in itself; it changes nothing
        # The referenced purge stays done; the retry finds the metadata gone and
        # goes straight to this phase.
        return self._ends.fail(lease, task, error, result=result, record=record_failure)
