"""BATCH_FILE_CLEANUP: delete the listed files that exist (metadata-level files)."""

from __future__ import annotations

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.deleting import (
    dedupe,
    delete_chunked,
    delete_leftover_sidecars,
    existing_with_sizes,
    list_dry_run_sidecars,
)
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.tasks.payloads import BatchCleanupPayload


def run_batch_cleanup(ctx: CleanupContext) -> CleanupTally:
    """Guard every path, then delete those that exist; missing ones are counted."""
    payload = ctx.decoded.require(BatchCleanupPayload)
    result = CleanupTally.start()
    guard = Guard.for_task(ctx)
    admitted = [p for p in dedupe(payload.batch_files) if guard.admit(p, result)]
    # Stat first (batches are small, at most the metadata batch size): it is how
    # Polaris skips missing files, and gives sizes S3's delete call does not.
    present = existing_with_sizes(ctx, result, admitted)
    if ctx.dry_run:
        result.would_delete.extend(present)
        list_dry_run_sidecars(result, guard)
        return result
    gone = [p for p in admitted if p not in present and p not in result.failed]
    delete_leftover_sidecars(ctx, result, guard, gone)
    delete_chunked(
        ctx, result, guard, list(present), sizes=present, what="batch files", total=len(present)
    )
    return result
