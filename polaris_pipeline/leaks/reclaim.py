"""Reclaim one leaked root: delete its files, on the operator's word, after checking again.

Just before anything is deleted the root is judged again against the metastore as it is:
under a catalog's base or allowed location and not a bucket root; a table root (Iceberg
metadata under ``metadata/``), never other data; spelt by ``storage.uri.checked_location``
(no ``..``, ``.`` or empty segment: the filesystem would resolve them, the checks compare
text), a local symlinked root judged at its real location too; no live entity enclosing
or overlapping it, no live ``write.data.path`` or ``write.metadata.path`` at, above or
under it, no task recording it; its newest metadata readable and not turning
``gc.enabled`` off (``cleanup/gc_policy.py``).

Storage is reached as the walk reached it (``catalogs.py``). Objects are listed in pages
and deleted by ``bulk_delete``, only those older than ``min_age_ms``, the overlap checked
again before each batch. ``metadata/`` goes last, only when nothing else stayed: until
then the root stays a table root the report finds. A deletion record (header: root and
its first catalog in realm and name order) is opened before the first delete: one that
cannot be written stops the reclaim before anything is deleted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from polaris_pipeline.cleanup.gc_policy import gc_enabled
from polaris_pipeline.errors import MetastoreError, StorageError
from polaris_pipeline.leaks.catalogs import catalog_resolver, read_catalogs
from polaris_pipeline.leaks.find import walk_starts
from polaris_pipeline.leaks.metadata import (
    METADATA_DIRECTORY,
    holds_table_metadata,
    read_root_metadata,
)
from polaris_pipeline.leaks.model import CatalogRef
from polaris_pipeline.leaks.owners import RootOwners
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.settings.leaks import checked_min_age_days
from polaris_pipeline.storage.delete import DeleteReport, bulk_delete
from polaris_pipeline.storage.deletion_record import DeletionRecord, ReclaimHeader
from polaris_pipeline.storage.listing import (
    ListedObject,
    list_directory,
    list_prefix,
    remove_empty_directories,
)
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import Location, checked_location, parse_location

DAY_MS = 86_400_000


# A reclaim never deletes an object younger than a day: a writer may be creating a
# table at the root right now, and a day is far beyond any commit's duration.
@dataclass
class ReclaimReport:
    """What a reclaim of one root did, or why it was refused."""

    root: str
    min_age_ms: int
    refusal: str | None = None
    error: str | None = None  # a listing or the metastore failed half way
    deleted: int = 0
    bytes_deleted: int = 0
    # Of ``deleted``: kept by the store's versioning or soft delete (their bytes in
    # ``bytes_retained``, never in ``bytes_deleted``), or where it would not say.
    retained: int = 0
    bytes_retained: int = 0
    retention_unknown: int = 0
    missing: int = 0
    kept_young: int = 0
    failures: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # a sample, credentials masked
    metadata_deleted: bool = False
    directories_removed: int = 0
    # The catalog whose location holds the root, once judged.
    catalog: CatalogRef | None = None
    # The deletion record written (credentials masked), when one was.
    record: str | None = None

    @property
    def ok(self) -> bool:
        return self.refusal is None and self.error is None and not self.failures


def min_age_days(report: ReclaimReport) -> float:
    """The report's minimum age in days, for JSON: a whole number as an integer, since jq
    1.7 prints the literal written (``3.0``) and jq 1.6 its value (``3``)."""
    days = report.min_age_ms / DAY_MS
    return int(days) if days.is_integer() else days


def check_min_age_days(days: float) -> int:
    """``days`` in milliseconds; ValueError unless ``LeakSection``'s rule accepts it."""
    return int(checked_min_age_days(days) * DAY_MS)


def holding_catalog(catalogs: list[CatalogRef], root: Location) -> CatalogRef | None:
    """The first of ``catalogs`` with a walked location strictly above ``root``: the
    catalog the report lists it under (catalogs in realm and name order)."""
    for catalog in catalogs:
        for start in walk_starts(catalog)[0]:
            if parse_location(start, directory=True).contains(root, strictly=True):
                return catalog
    return None


def catalog_at(catalogs: list[CatalogRef], root: Location) -> CatalogRef | None:
    """The first of ``catalogs`` with a walked location that is ``root`` itself."""
    for catalog in catalogs:
        for start in walk_starts(catalog)[0]:
            if parse_location(start, directory=True) == root:
                return catalog
    return None


def _refusal(
    store: Metastore,
    live: LiveLocations,
    resolver: StorageResolver,
    uri: str,
    root: Location,
    catalog: CatalogRef | None,
) -> str | None:
    """Why ``root`` may not be reclaimed now, or None (see the module docstring).
    ``catalog``: the one whose location holds it; ``resolver`` reaches it."""
    if not root.segments:
        return "it is a bucket, container or filesystem root"
    if catalog is None:
        own = catalog_at(read_catalogs(store.engine), root)
        if own is not None:
            return (
                f"it is catalog {own.name!r}'s (realm {own.realm_id}) own location, "
                "not a table root under it"
            )
        return "it is under no catalog's default-base-location or allowedLocations"
    files = [
        e
        for e in list_directory(resolver, f"{uri.rstrip('/')}/{METADATA_DIRECTORY}")
        if isinstance(e, ListedObject)
    ]
    if not holds_table_metadata(files):
        return "it is not a table root (no Iceberg metadata under metadata/)"
    owners = RootOwners(live, store.list_tasks(None))
    for spelling in judged_locations(root):
        found = _live_owner(owners, spelling)
        if found is not None:
            return found
        task = owners.task_naming(spelling)
        if task is not None:
            return f"a task still records the location {task} (the sweeper's, not a leak)"
    meta = read_root_metadata(resolver, files)
    if meta.error is not None:
        return f"its newest metadata cannot tell gc.enabled: {meta.error}"
    if meta.gc_enabled is not None and not gc_enabled(meta.gc_enabled):
        return f"its newest metadata says gc.enabled={meta.gc_enabled!r}: its files are kept"
    return None


def judged_locations(root: Location) -> list[Location]:
    """``root``, and for a local root reached through a symlink its real location too:
    the deletes land there, so the live entities are looked for at both."""
    if root.scheme != "file":
        return [root]
    real = os.path.realpath(root.path)
    if real == root.path:
        return [root]
    return [root, parse_location(real, directory=True)]


def _live_owner(owners: RootOwners, root: Location) -> str | None:
    """Why a live entity owns ``root`` (it encloses it, overlaps it, or writes its files
    there by a write path), or None."""
    for hit in (owners.inside_live_table(root), owners.live_owner(root)):
        if hit is not None:
            return hit.describe()
    writer = owners.live_writer(root)
    return writer.describe() if writer is not None else None


def reclaim_root(
    store: Metastore,
    resolver: StorageResolver,
    root_uri: str,
    *,
    min_age_ms: int,
    now_ms: int | None = None,
    deletion_record: str | None = None,
    run_id: str | None = None,
) -> ReclaimReport:
    """Delete the leaked root ``root_uri`` (see the module docstring). Raises ValueError
    for a minimum age below a day; every other outcome is in the report.

    ``deletion_record``: the prefix under which the deleted paths are recorded
    (None: no record); ``run_id``: the Dagster run that reclaims, for the record."""
    check_min_age_days(min_age_ms / DAY_MS)
    report = ReclaimReport(root_uri, min_age_ms)
    try:
        root = checked_location(root_uri, directory=True)
    except ValueError as e:
        report.refusal = f"{root_uri!r} is not a location that may be reclaimed ({e})"
        return report
    live = LiveLocations(store.engine, store.check_schema(), bound_s=store.guard_bound_s)
    cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - min_age_ms
    metadata = Location(root.scheme, root.store, (*root.segments, METADATA_DIRECTORY))
    record: DeletionRecord | None = None
    try:
        catalog = holding_catalog(read_catalogs(store.engine), root)
        report.catalog = catalog
        if catalog is not None:
            resolver = catalog_resolver(resolver, catalog, [root_uri])
        report.refusal = _refusal(store, live, resolver, root_uri, root, catalog)
        if report.refusal is not None:
            return report
        if deletion_record is not None and report.catalog is not None:
            record = _open_record(deletion_record, resolver, report, run_id)
        _delete_pass(
            report, live, resolver, root, cutoff, lambda loc: not metadata.contains(loc), record
        )
        if report.kept_young or report.failures or report.refusal:
            return report
        _delete_pass(report, live, resolver, root, cutoff, metadata.contains, record)
        report.metadata_deleted = not (report.kept_young or report.failures or report.refusal)
    except (StorageError, MetastoreError) as e:
        report.error = str(e)
        return report
    finally:
        if record is not None:
            _close_record(record, report)
    report.directories_removed = remove_empty_directories(root_uri)
    return report


def _open_record(
    prefix: str, resolver: StorageResolver, report: ReclaimReport, run_id: str | None
) -> DeletionRecord:
    """The reclaim's record (its header written at the first delete)."""
    assert report.catalog is not None
    header = ReclaimHeader(
        realm_id=report.catalog.realm_id,
        catalog=report.catalog.name,
        catalog_id=report.catalog.catalog_id,
        root=report.root,
        min_age_days=min_age_days(report),
        run_id=run_id,
    )
    return DeletionRecord(prefix, resolver, header)


def _close_record(record: DeletionRecord, report: ReclaimReport) -> None:
    """The footer: ``done``, or ``refused``/``failed`` and why; a footer that cannot be
    written is the reclaim's error (what it deleted is recorded already)."""
    if record.opened:
        report.record = record.shown_uri
    if report.ok:
        status, why = "done", None
    elif report.refusal is not None:
        status, why = "refused", report.refusal
    else:
        status = "failed"
        why = report.error or f"{report.failures} delete(s) failed"
    try:
        record.close(status, why)
    except StorageError as e:
        report.error = f"{report.error}; {e}" if report.error else str(e)


def _delete_pass(
    report: ReclaimReport,
    live: LiveLocations,
    resolver: StorageResolver,
    root: Location,
    cutoff_ms: int,
    selects: Callable[[Location], bool],
    record: DeletionRecord | None,
) -> None:
    for page in list_prefix(resolver, report.root):
        batch: list[ListedObject] = []
        for obj in page:
            if not selects(parse_location(obj.uri)):
                continue
            if obj.mtime_ms is None or obj.mtime_ms > cutoff_ms:
                report.kept_young += 1
                continue
            batch.append(obj)
        if not batch:
            continue
        # Again right before the batch: a table created at the root meanwhile stops it.
        for spelling in judged_locations(root):
            found = live.overlaps(spelling, limit=1) or [
                hit for hit in [live.enclosing_table(spelling)] if hit is not None
            ]
            if found:
                report.refusal = found[0].describe()
                return
        sizes = {o.uri: o.size for o in batch}
        result = DeleteReport()
        if record is not None:
            record.open()  # before the first delete: no delete without its record
        try:
            # A local delete follows no link below the root (judged at its real location).
            bulk_delete(resolver, list(sizes), report=result, local_roots=[report.root])
        finally:
            if record is not None:
                record.add_report(result, sizes, resolver.redact)
        report.deleted += len(result.deleted)
        report.bytes_deleted += sum(sizes.get(u) or 0 for u in result.freed)
        report.retained += len(result.retained)
        report.bytes_retained += sum(sizes.get(u) or 0 for u in result.retained)
        report.retention_unknown += len(result.retention_unknown)
        report.missing += len(result.missing)
        report.failures += len(result.failed)
        result.sample_failed_into(report.failed)
