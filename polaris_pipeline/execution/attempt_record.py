"""Each attempt's deletion record (``storage/deletion_record.py``), for the ``Runner``:
opened with the attempt's context, closed with its end (or when its own deletes end)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from polaris_pipeline.cleanup.context import CleanupTally
from polaris_pipeline.errors import StorageError, one_line
from polaris_pipeline.storage.deletion_record import (
    DeletionRecord,
    RecordHeader,
    write_restore_record,
)
from polaris_pipeline.tasks.decoded import polaris_type_name
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease

if TYPE_CHECKING:
    from polaris_pipeline.storage.resolve import StorageResolver


class RecordStatus(StrEnum):
    """How an attempt's record ends: its footer's ``status``."""

    DONE = "done"
    FAILED = "failed"
    LEASE_LOST = "lease lost"
    # A table waiting for its children: its own deletes end here, and its last
    # stage (the unreferenced phase, ``Runner.finish_table``) writes a record of its own.
    AWAITING_CHILDREN = "deferred"
    # The table came back (re-registered): the purge stopped, its row ended.
    RESTORED = "restored"


class AttemptRecords:
    """The open deletion record of each attempt (or table's last stage) under ``prefix``."""

    def __init__(self, prefix: str | None, resolver: StorageResolver) -> None:
        self.prefix = prefix
        self._resolver = resolver
        # (realm, task id) -> the open deletion record of its attempt (or phase).
        self._open: dict[tuple[str, int], DeletionRecord] = {}

    def write_restore_record(self, task: TaskRow, fields: dict[str, Any]) -> str | None:
        """The restore record beside the deletion records (``storage/deletion_record.py``):
        its URI, None when none are kept."""
        if self.prefix is None:
            return None
        return write_restore_record(self._resolver, self.prefix, task, fields)

    def open(
        self, task: TaskRow, lease: Lease, executor_id: str, run_id: str | None
    ) -> DeletionRecord | None:
        """The attempt's record (written from its first delete); None when none is kept."""
        if self.prefix is None:
            return None
        header = RecordHeader(
            realm_id=task.realm_id,
            task_id=task.id,
            task_name=task.name,
            task_type=polaris_type_name(task.task_type_code),
            attempt=lease.attempt,
            executor_id=executor_id,
            run_id=run_id,
        )
        record = DeletionRecord(self.prefix, self._resolver, header)
        self._open[(lease.realm_id, lease.task_id)] = record
        return record

    def close(
        self,
        lease: Lease,
        status: RecordStatus,
        error: str | None = None,
        result: CleanupTally | None = None,
        restored_as: str | None = None,
    ) -> str | None:
        """Close the attempt's record (refusals, then totals); the error when it cannot.
        ``restored_as``: the live entity of a ``RESTORED`` end."""
        record = self._open.pop((lease.realm_id, lease.task_id), None)
        if record is None:
            return None
        try:
            if record.opened and result is not None and result.refused:
                record.add_refusals((r.path, r.reason) for r in result.refused)
            record.close(status.value, error, restored_as=restored_as)
        except StorageError as exc:
            return one_line(exc)
        return None
