"""How an attempt ends, written: its record closed, then its row completed or failed;
or, its lease found lost, nothing written. Each end is a new ``TaskOutcome``."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from polaris_pipeline.cleanup.context import CleanupTally
from polaris_pipeline.errors import MetastoreError, StorageError, TableRestored
from polaris_pipeline.execution.attempt_record import AttemptRecords, RecordStatus
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.metastore import CompleteOutcome, FailOutcome, Metastore
from polaris_pipeline.storage.redact import redact
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease

log = logging.getLogger("polaris_pipeline.runner")


class AttemptEnds:
    """Writes the end of each attempt of one holder (``run_id``: its Dagster run, if any)."""

    def __init__(self, metastore: Metastore, records: AttemptRecords, run_id: str | None) -> None:
        self._metastore = metastore
        self._records = records
        self._run_id = run_id

    def complete(
        self, lease: Lease, task: TaskRow, result: CleanupTally, children: Sequence[Lease] = ()
    ) -> TaskOutcome:
        """Done: the record closed, then the row completed (deleted)."""
        # The record is closed before the row goes: a completed task has a whole record.
        error = self._records.close(lease, RecordStatus.DONE, result=result)
        if error is not None:
            return self.fail(lease, task, error, result=result, children=children)
        completed = self._metastore.complete(lease)
        if completed is CompleteOutcome.LEASE_LOST:
            return self.lost(lease, task.task_type_code, "before its result was written", children)
        return TaskOutcome(
            lease,
            Status.DONE,
            task.task_type_code,
            result=result.freeze(),
            children=tuple(children),
        )

    def restored(
        self, lease: Lease, task: TaskRow, found: TableRestored, children: Sequence[Lease] = ()
    ) -> TaskOutcome:
        """The table is live again (``TableRestored``): the record closed as restored, then
        the task and its family ended (``Metastore.end_restored``), then the restore record.

        Ending refused (another run holds one of them, a row changed) fails the attempt
        as any transient error, never dead-lettered at once: a retry finds it again."""
        kids = tuple(children)
        closing = self._records.close(lease, RecordStatus.RESTORED, restored_as=found.entity)
        if closing is not None:
            return self.fail(lease, task, closing, children=kids)
        try:
            ended = self._metastore.end_restored(task, holder=lease)
        except MetastoreError as e:
            return self.fail(lease, task, f"{found}, but its purge was not ended: {e}")
        log.info("task %s %s; ended %d task(s)", task.label, found, len(ended))
        try:
            self._records.write_restore_record(
                task,
                {
                    "by": "found live by the shared-location guard",
                    "restored_as": found.entity,
                    "metadata_file": found.metadata_file,
                    "tasks_ended": [f"{t.realm_id}/{t.id}" for t in ended],
                },
            )
        except (StorageError, OSError) as e:
            # The rows are ended already: the outcome stands, the missing record is said.
            log.warning("task %s: the restore record was not written: %s", task.label, e)
        return TaskOutcome(
            lease, Status.RESTORED, task.task_type_code, children=kids, restored_as=found.entity
        )

    def fail(
        self,
        lease: Lease,
        task: TaskRow,
        error: str,
        *,
        result: CleanupTally | None = None,
        children: Sequence[Lease] = (),
        permanent: bool = False,
        record: bool = True,
    ) -> TaskOutcome:
        """Failed: recorded on the row (backing off or dead), unless ``record`` is False
        and the failure is not permanent (the caller retries under the same lease)."""
        kids = tuple(children)
        done = result.freeze() if result is not None else None
        # Written to the row, logged, sent as metadata and alerts: masked once, here.
        error = redact(error)
        closing = self._records.close(lease, RecordStatus.FAILED, error, result)
        if closing is not None:
            error = f"{error}; {closing}"
        failed = TaskOutcome(
            lease, Status.FAILED, task.task_type_code, error=error, result=done, children=kids
        )
        if not record and not permanent:
            return failed.evolve(recorded=False)
        written = self._metastore.fail(lease, error, run_id=self._run_id, permanent=permanent)
        if written.outcome is FailOutcome.LEASE_LOST:
            return self.lost(lease, task.task_type_code, "before its failure was written", kids)
        if written.outcome is FailOutcome.ALREADY_GONE:
            return TaskOutcome(lease, Status.DONE, task.task_type_code, result=done, children=kids)
        log.warning("task %s failed (attempt %d): %s", task.label, lease.attempt, error)
        return failed.evolve(
            status=Status.DEAD if written.outcome is FailOutcome.DEAD else Status.FAILED,
            next_attempt_ms=written.next_attempt_ms,
            permanent=permanent,
        )

    def lost(
        self, lease: Lease, task_type: str | None, when: str, children: Sequence[Lease] = ()
    ) -> TaskOutcome:
        """The lease was lost ``when``: stopped, nothing written to the row."""
        message = (
            f"lease on {lease.label} (attempt {lease.attempt}) lost {when}; "
            "stopped, nothing recorded"
        )
        self._records.close(lease, RecordStatus.LEASE_LOST, message)
        log.warning(message)
        return TaskOutcome(
            lease, Status.LEASE_LOST, task_type, error=message, children=tuple(children)
        )
