"""The handlers' context for each task a ``Runner`` works on, and the storage it reaches.

An attempt's context is fenced by its lease, with its deletion record and progress;
a dry run's (no lease) deletes nothing: a plan, the leftover check. Storage is
reached apart (``reach_storage``), so that each caller says what a storage not
reached means for its work (a failed attempt, a note in a report).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.execution.attempt_record import AttemptRecords
from polaris_pipeline.execution.holder import Holder
from polaris_pipeline.execution.outcome import ProgressFn
from polaris_pipeline.execution.task_storage import task_storage
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.ref import Lease

if TYPE_CHECKING:
    from polaris_pipeline.storage.resolve import StorageResolver


class TaskContexts:
    """Builds each task's ``CleanupContext`` for one holder (``run_id``: its Dagster run)."""

    def __init__(
        self,
        metastore: Metastore,
        config: StorageConfig,
        resolver: StorageResolver,
        *,
        holder: Holder,
        records: AttemptRecords,
        run_id: str | None = None,
        progress: ProgressFn | None = None,
        releases: ReleaseProbe | None = None,
    ) -> None:
        self.metastore = metastore
        self.config = config
        self.resolver = resolver
        self.holder = holder
        self.records = records
        self.run_id = run_id
        self.progress = progress
        # The schema version and each realm's Polaris release, read once per sweep or
        # run (a run's steps share one): they say which Polaris reads the rows we write.
        self.releases = releases or ReleaseProbe(metastore)

    def schema_version(self) -> int | None:
        """The metastore's Polaris schema version (None without a version row), cached."""
        return self.releases.schema_version()

    def read(self, lease: Lease, held: DecodedTask | None = None) -> DecodedTask | None:
        """The leased task's row, read and decoded (None: gone); ``held``: its decoding
        already made, kept when still valid (``DecodedTask.reread``)."""
        row = self.metastore.get_task(lease.realm_id, lease.task_id)
        if row is None:
            return None
        return held.reread(row) if held is not None else DecodedTask.from_row(row)

    def reach_storage(self, ctx: CleanupContext) -> None:
        """Give ``ctx`` the resolver for its task: its storage configuration, else its catalog's
        (``execution/task_storage.py``). Raises PayloadError for a malformed configuration, or the
        ``PolarisPipelineError``/``OSError`` of a storage not reached.
        """
        storage = task_storage(ctx.decoded, self.metastore)
        ctx.resolver = self.resolver.for_task(ctx.task, storage.properties)
        ctx.catalog_storage_info = storage.from_catalog

    def cleanup_context(self, task: DecodedTask, lease: Lease | None = None) -> CleanupContext:
        """The handlers' context for ``task``, as decoded already (never decoded again);
        with ``lease``, the attempt's, else a dry run's (see the module)."""
        realm = task.row.realm_id
        ctx = CleanupContext(
            task=task.row,
            decoded_task=task,
            resolver=self.resolver,
            config=self.config,
            dry_run=lease is None,
            new_task_id=new_entity_id,
            release=self.releases.release(realm),
            metadata_batch_size=self.metastore.policy.for_realm(realm).metadata_batch_size,
            # Every handler's shared-location guard asks the whole metastore.
            live=LiveLocations(
                self.metastore.engine,
                self.schema_version(),
                bound_s=self.metastore.guard_bound_s,
            ),
        )
        if lease is not None:
            holder = self.holder
            ctx.record = self.records.open(task.row, lease, holder.executor_id, self.run_id)
            ctx.fence = partial(holder.deadlines.fence, lease)
            ctx.still_held = partial(holder.deadlines.still_held, lease)
            if self.progress is not None:
                ctx.progress = partial(self.progress, lease)
        return ctx
