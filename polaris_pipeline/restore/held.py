"""Every held table's restorability, for the asset check and ``tasks restorable``.

The held tasks are the parents in state ``held`` (``tasks/hold.py``); each is
checked through the storage its purge would use (``execution/task_storage.py``),
read-only. A view's only file is its metadata file. Bounded per call: at most
``MAX_TABLES`` tables and ``check_restorable``'s ``max_manifests`` new manifests each (the
cache keeps the rest from one call to the next).
"""

from __future__ import annotations

from dataclasses import dataclass

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.execution.task_storage import task_storage
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.restorable import ManifestCache, Restorability, check_restorable
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.hold import PARENT_TASK_TYPE
from polaris_pipeline.tasks.model import TaskRow, TaskState

MAX_TABLES = 50

# What a table no longer restorable under a hold means, said once: the check and the CLI.
STILL_DELETING = (
    "Polaris (or something else) still deletes on that storage, so the hold cannot protect "
    "it: give Polaris's storage identity no delete permission (docs/operator-guide.md, "
    "Holding purges and restoring tables)"
)


@dataclass(frozen=True)
class HeldTable:
    """One held drop and what its check found (``error``: why it could not be checked)."""

    task: TaskRow
    table: str | None
    result: Restorability | None = None
    error: str | None = None

    @property
    def lost(self) -> bool:
        """Files are missing: it is not restorable as it is."""
        return self.result is not None and bool(self.result.missing)

    def summary(self) -> str:
        return self.result.summary() if self.result is not None else str(self.error)


def held_parents(store: Metastore) -> list[TaskRow]:
    """The held drops (parent tasks), oldest first."""
    _, rows = store.tasks_with_state()
    held = [t for t, s in rows if s is TaskState.HELD and t.task_type_code == PARENT_TASK_TYPE]
    return sorted(held, key=lambda t: (t.create_timestamp, t.realm_id, t.id))


def check_task(
    store: Metastore,
    resolver: StorageResolver,
    task: TaskRow,
    cache: ManifestCache | None = None,
) -> HeldTable:
    """Whether the table ``task`` drops is restorable (the task need not be held)."""
    decoded = DecodedTask.of(task)
    entity = decoded.entity
    table = str(decoded.identifier) if decoded.identifier is not None else None
    if entity is None or entity.metadata_location is None:
        why = decoded.problem or "the dropped entity names no metadata file"
        return HeldTable(task, table, error=f"cannot be checked: {why}")
    try:
        own = resolver.for_task(task, task_storage(decoded, store).properties)
        if entity.is_view:
            found = own.exists(entity.metadata_location)
            missing = () if found else (entity.metadata_location,)
            return HeldTable(task, table, Restorability(entity.metadata_location, 1, missing))
        result = check_restorable(own, entity.metadata_location, cache)
    except PolarisPipelineError as e:
        return HeldTable(task, table, error=f"cannot be checked: {e}")
    return HeldTable(task, table, result)


def check_held_tables(
    store: Metastore,
    resolver: StorageResolver,
    cache: ManifestCache | None = None,
) -> list[HeldTable]:
    """The restorability of up to ``MAX_TABLES`` held drops, oldest first."""
    cache = ManifestCache() if cache is None else cache
    return [check_task(store, resolver, task, cache) for task in held_parents(store)[:MAX_TABLES]]
