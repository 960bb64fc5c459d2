"""A dropped table's unreferenced files: what its last metadata no longer names.

Iceberg's purge (Polaris's, and ``table.py``'s with its children) deletes what the table's
last metadata references. Under its location there may be more (data files of failed
commits, speculative attempts, aborted compactions, metadata files that fell out of the
log, their ``.crc`` sidecars), which no tool cleans once the table is dropped (orphan-file
maintenance needs a live table). This phase does, last in a table's run, after every
referenced file and child is done:

1. The prefix is the task's recorded table location (``DecodedTask.roots``, as the guard
   uses), never one read from a file; refused, with the reason, when it is a bucket or
   filesystem root, or at or above an ``allowedLocations`` entry of the catalog's storage
   configuration (or an allowed prefix of the static config).
2. No live entity may overlap it (``metastore/overlap.py``: Polaris's rule, every realm and
   catalog): checked before listing and before each delete batch, so a table created there
   during the sweep stops it. No live table may write under it by a ``write.data.path``-style
   property (checked once, before listing: no column holds these). An overlap refuses the
   whole prefix.
3. The prefix is listed in pages (``storage/listing.py``); an object last modified after the
   task was created (the drop), or with no time, is kept and counted; every other must pass
   the table's guard (symlinks, ``..``, paths outside the roots refused as for referenced
   files).
4. ``report``: counted and sampled, nothing deleted. ``delete``: each page is deleted by
   ``bulk_delete`` (literal paths, per-key results), fenced first; on local filesystems the
   empty directories are removed afterwards.

A refusal is a safety decision, not the task's failure: recorded, and the task completes. A
failure (a listing or the overlap query failing half way) is recorded in
``UnreferencedReport.error`` and fails the attempt (retried), never undoing the referenced
work. Nothing is deleted but what was listed, checked and re-checked against the metastore.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.cleanup.deleting import recorded
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.errors import MetastoreError, PayloadError, StorageError
from polaris_pipeline.metastore.overlap import Overlap
from polaris_pipeline.storage.catalog_config import catalog_storage
from polaris_pipeline.storage.delete import MAX_KEYS_PER_REQUEST, bulk_delete
from polaris_pipeline.storage.listing import ListedObject, list_prefix, remove_empty_directories
from polaris_pipeline.storage.uri import (
    Location,
    checked_location,
    normalize_uri,
    parse_location,
)
from polaris_pipeline.tasks.formatting import PATH_SAMPLE
from polaris_pipeline.tasks.payloads import DroppedEntity
from polaris_pipeline.unreferenced.mode import UnreferencedMode
from polaris_pipeline.unreferenced.report import UnreferencedReport, UnreferencedTally

# A dry run's plan lists at most this many paths (the rest are counted): bounded memory.
PLAN_PATHS = 100_000
# Given a prefix, the live entities overlapping it (``LiveLocations.overlaps``).
OverlapCheck = Callable[[Location], list[Overlap]]


def prefix_refusal(ctx: CleanupContext, prefix: str) -> tuple[Location | None, str | None]:
    """``(the prefix as a Location, None)`` or ``(None, why it is refused)``."""
    try:
        loc = checked_location(prefix, directory=True)  # listed and deleted under as spelt
    except ValueError as e:
        return None, f"the table location {prefix!r} is malformed ({e})"
    if not loc.segments:
        return None, f"the table location {prefix!r} is a bucket, container or filesystem root"
    try:
        storage = catalog_storage(ctx.task.internal_properties)
    except PayloadError as e:
        return None, f"the catalog's storage configuration does not decode ({e})"
    allowed = [*(storage.allowed_locations if storage else ()), *ctx.config.allowed_prefixes]
    for entry in allowed:
        try:
            allowed_loc = parse_location(entry, directory=True)
        except ValueError:
            continue  # never admitted anything: it cannot be under the prefix either
        if loc.contains(allowed_loc):
            return None, (
                f"the table location {prefix!r} is equal to or above the allowed location {entry!r}"
            )
    return loc, None


def _overlap_text(found: list[Overlap]) -> str:
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return found[0].describe() + more


def run_unreferenced(
    ctx: CleanupContext,
    entity: DroppedEntity,
    mode: UnreferencedMode,
    overlaps: OverlapCheck | None,
    *,
    writers: OverlapCheck | None = None,
    referenced: Set[str] = frozenset(),
    all_paths: bool = False,
) -> UnreferencedReport:
    """The unreferenced phase of one dropped table (see the module docstring).

    ``referenced``: in a dry run, the normalized URIs the referenced plan deletes
    (they are still there and listed apart). ``all_paths``: keep every path that
    would go, up to ``PLAN_PATHS``, not a sample (a dry run's plan). Raises only LeaseLost.
    """
    report = UnreferencedTally.start(mode.value, ctx.dry_run)
    _listed(ctx, report, overlaps, writers, referenced, all_paths)
    return report.freeze()


def _listed(
    ctx: CleanupContext,
    report: UnreferencedTally,
    overlaps: OverlapCheck | None,
    writers: OverlapCheck | None,
    referenced: Set[str],
    all_paths: bool,
) -> None:
    """``run_unreferenced``'s work, added to ``report``; a refusal or an error ends it."""
    roots = ctx.decoded.roots
    if roots is None:
        report.refusal = "the catalog recorded no table location"
        return
    report.prefix = roots.location
    prefix, refusal = prefix_refusal(ctx, roots.location)
    if prefix is None:
        report.refusal = refusal
        return
    if overlaps is None:
        report.refusal = "no metastore to check for overlapping live entities"
        return
    guard = Guard.for_task(ctx)
    try:
        found = overlaps(prefix) or (writers(prefix) if writers is not None else [])
        if found:
            report.refusal = _overlap_text(found)
            return
        for page in list_prefix(ctx.resolver, roots.location, page_size=ctx.delete_chunk_size):
            candidates = _candidates(ctx, guard, page, report, referenced)
            if not candidates:
                continue
            if not report.deleting:
                _would_go(report, candidates, all_paths)
                continue
            # Again right before the batch: a table created here meanwhile stops it.
            found = overlaps(prefix)
            if found:
                report.refusal = _overlap_text(found)
                return
            _delete(ctx, guard, report, candidates)
    except (StorageError, MetastoreError) as e:
        report.error = str(e)
        return
    if report.deleting:
        # The referenced purge leaves its directories too, even with nothing else left.
        report.directories_removed = remove_empty_directories(roots.location)


def _keep(report: UnreferencedTally, uri: str, why: str) -> None:
    if len(report.kept_sample) < PATH_SAMPLE:
        report.kept_sample.append(f"{uri}: {why}")


def _candidates(
    ctx: CleanupContext,
    guard: Guard,
    page: list[ListedObject],
    report: UnreferencedTally,
    referenced: Set[str],
) -> list[ListedObject]:
    drop_ms = ctx.task.create_timestamp
    out: list[ListedObject] = []
    for obj in page:
        report.listed += 1
        if referenced and normalize_uri(obj.uri) in referenced:
            report.referenced += 1
            continue
        if obj.mtime_ms is None:
            report.kept_newer += 1
            _keep(report, obj.uri, "no last-modified time: kept")
            continue
        if obj.mtime_ms > drop_ms:
            report.kept_newer += 1
            _keep(report, obj.uri, "newer than the drop: kept")
            continue
        refused = guard.check(obj.uri)
        if refused is not None:
            report.refused_paths += 1
            _keep(report, obj.uri, f"refused by the guard: {refused.reason}")
            continue
        out.append(obj)
    return out


def _would_go(report: UnreferencedTally, objects: list[ListedObject], all_paths: bool) -> None:
    report.would_delete += len(objects)
    report.would_bytes += sum(o.size or 0 for o in objects)
    report.add_paths([o.uri for o in objects], PLAN_PATHS if all_paths else PATH_SAMPLE)


def _delete(
    ctx: CleanupContext, guard: Guard, report: UnreferencedTally, objects: list[ListedObject]
) -> None:
    ctx.fence()
    sizes = {o.uri: o.size for o in objects}
    result = recorded(
        ctx,
        lambda report: bulk_delete(
            ctx.resolver,
            list(sizes),
            chunk_size=max(1, min(len(sizes), MAX_KEYS_PER_REQUEST)),
            check=ctx.still_held,
            report=report,
            local_roots=guard.delete_roots,
        ),
        sizes,
    )
    report.deleted += len(result.deleted)
    report.missing += len(result.missing)
    report.failures += len(result.failed)
    result.sample_failed_into(report.failed)
    report.retained += len(result.retained)
    report.retention_unknown += len(result.retention_unknown)
    report.bytes_deleted = _sum_sizes(report.bytes_deleted, [sizes.get(u) for u in result.freed])
    report.bytes_retained = _sum_sizes(
        report.bytes_retained, [sizes.get(u) for u in result.retained]
    )
    report.add_paths(result.deleted)


def _sum_sizes(total: int | None, sizes: list[int | None]) -> int | None:
    """``total`` plus ``sizes``; None once any size (or the total) is not known."""
    if total is None or any(size is None for size in sizes):
        return None
    return total + sum(size or 0 for size in sizes)
