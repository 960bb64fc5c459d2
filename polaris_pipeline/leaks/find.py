"""The walk: each catalog's locations, one directory level at a time, live tables pruned.

Each catalog's (``catalogs.py``) locations are walked depth first with ``list_directory``.
A directory inside a live table or view (``owners.py``) is never listed. A table root
(Iceberg metadata under ``metadata/``) is not descended: it is reported when nothing live
overlaps it and no task names it, with its totals (``list_prefix``) and newest metadata
(``metadata.py``); loose files elsewhere count as "not a table". Memory holds one level
and the stack. A failed listing is recorded on the catalog (partial report), the walk
goes on with what it gave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from polaris_pipeline.errors import MetastoreError, StorageError
from polaris_pipeline.leaks.catalogs import catalog_resolver, read_catalogs
from polaris_pipeline.leaks.drops import DropEvents
from polaris_pipeline.leaks.metadata import METADATA_DIRECTORY, holds_table_metadata
from polaris_pipeline.leaks.metadata import read_root_metadata as read_metadata
from polaris_pipeline.leaks.model import CatalogLeaks, CatalogRef, LeakedRoot, LeakReport, NotATable
from polaris_pipeline.leaks.owners import RootOwners
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.storage.listing import ListedObject, SubDirectory, list_directory, list_prefix
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import Location, parse_location

# Told each directory as it is listed.
ProgressFn = Callable[[str], None]


def walk_starts(catalog: CatalogRef) -> tuple[list[str], list[str]]:
    """``(locations to walk, problems)``: each location once, none inside another, no root."""
    parsed: list[tuple[str, Location]] = []
    problems: list[str] = []
    for uri in catalog.locations:
        try:
            loc = parse_location(uri, directory=True)
        except ValueError as e:
            problems.append(f"location {uri!r} is malformed ({e})")
            continue
        if not loc.segments:
            problems.append(f"location {uri!r} is a bucket or filesystem root: not walked")
            continue
        parsed.append((uri, loc))
    starts = [
        uri
        for i, (uri, loc) in enumerate(parsed)
        if not any(
            other.contains(loc) and (other != loc or j < i)
            for j, (_, other) in enumerate(parsed)
            if j != i
        )
    ]
    return starts, problems


def metastore_leaks(
    store: Metastore,
    resolver: StorageResolver,
    *,
    realms: Sequence[str] | None = None,
    catalogs: Sequence[str] | None = None,
) -> LeakReport:
    """The leak report of the catalogs of ``realms`` named ``catalogs`` (None: all),
    ownership judged against every realm and catalog of ``store``."""
    version = store.check_schema()
    # One connection for the walk's check per directory (LiveLocations.held).
    with LiveLocations(store.engine, version, bound_s=store.guard_bound_s).held() as live:
        return find_leaks(
            read_catalogs(store.engine, realms, catalogs),
            RootOwners(live, store.list_tasks(None)),
            resolver,
            DropEvents(store.engine, version),
        )


def find_leaks(
    catalogs: Sequence[CatalogRef],
    owners: RootOwners,
    resolver: StorageResolver,
    drops: DropEvents,
    progress: ProgressFn | None = None,
) -> LeakReport:
    """The leak report of ``catalogs`` (see the module docstring)."""
    report = LeakReport()
    covered: list[Location] = []  # the walked locations of the catalogs before
    for catalog in catalogs:
        leaks = CatalogLeaks(catalog)
        report.catalogs.append(leaks)
        if not catalog.locations:
            leaks.skipped = catalog.problem or "no default-base-location and no allowedLocations"
            continue
        if catalog.problem:
            leaks.errors.append(catalog.problem)
        starts, problems = walk_starts(catalog)
        leaks.errors += problems
        try:
            reach = catalog_resolver(resolver, catalog, starts)
        except StorageError as e:
            leaks.errors.append(f"its storage configuration cannot be used: {e}")
            starts = []
        for start in starts:
            _walk(leaks, start, owners, reach, drops, progress, covered)
        # Catalogs may share locations: what one walked is reported under it alone.
        covered += [parse_location(s, directory=True) for s in starts]
    return report


def _walk(
    leaks: CatalogLeaks,
    start: str,
    owners: RootOwners,
    resolver: StorageResolver,
    drops: DropEvents,
    progress: ProgressFn | None,
    covered: Sequence[Location],
) -> None:
    pending = [start]
    while pending:
        directory = pending.pop()
        try:
            loc = parse_location(directory, directory=True)
            if any(c.contains(loc) for c in covered):
                leaks.walked_before += 1
                continue
            if owners.inside_live_table(loc) is not None:
                leaks.live_tables_pruned += 1
                continue
            if progress is not None:
                progress(directory)
            leaks.directories_listed += 1
            # Loose files are counted, never held: a directory of millions of them
            # costs two numbers. Only the subdirectories still to visit are kept.
            file_count = file_bytes = 0
            subdirectories: list[str] = []
            try:
                for entry in list_directory(resolver, directory):
                    if isinstance(entry, SubDirectory):
                        subdirectories.append(entry.uri)
                    else:
                        file_count += 1
                        file_bytes += entry.size or 0
            except StorageError as e:
                # Partial: what the listing gave before it failed is still walked.
                leaks.errors.append(str(e))
            metadata_dir = next(
                (d for d in subdirectories if d.rsplit("/", 1)[-1] == METADATA_DIRECTORY), None
            )
            if metadata_dir is not None:
                metadata_files = [
                    e for e in list_directory(resolver, metadata_dir) if isinstance(e, ListedObject)
                ]
                if holds_table_metadata(metadata_files):
                    _judge_root(leaks, directory, loc, metadata_files, owners, resolver, drops)
                    continue
            if file_count:
                leaks.add_not_a_table(NotATable(directory, file_count, file_bytes))
            pending.extend(sorted(subdirectories, reverse=True))
        except (StorageError, MetastoreError) as e:
            leaks.errors.append(str(e))
        except ValueError as e:
            leaks.errors.append(f"{directory}: {e}")


def _judge_root(
    leaks: CatalogLeaks,
    uri: str,
    loc: Location,
    metadata_files: list[ListedObject],
    owners: RootOwners,
    resolver: StorageResolver,
    drops: DropEvents,
) -> None:
    if owners.live_owner(loc) is not None:
        leaks.owned_roots += 1
        return
    if owners.task_naming(loc) is not None:
        leaks.pending_roots += 1
        return
    meta = read_metadata(resolver, metadata_files)
    root = LeakedRoot(
        uri,
        meta.kind,
        metadata_file=meta.file,
        uuid=meta.uuid,
        last_updated_ms=meta.last_updated_ms,
        gc_enabled=meta.gc_enabled,
        error=meta.error,
    )
    add_totals(root, resolver)
    event = drops.find(
        leaks.catalog.realm_id, leaks.catalog.name, loc.segments, meta.kind, meta.last_updated_ms
    )
    if event is not None:
        root.dropped_by, root.dropped_at_ms = event.principal, event.timestamp_ms
    leaks.roots.append(root)


def add_totals(root: LeakedRoot, resolver: StorageResolver) -> None:
    """The root's objects, bytes and times, page by page; partial when the listing fails."""
    try:
        for page in list_prefix(resolver, root.uri, seen_on_error=True):
            for obj in page:
                root.objects += 1
                root.bytes += obj.size or 0
                if obj.mtime_ms is not None:
                    root.newest_ms = max(root.newest_ms or obj.mtime_ms, obj.mtime_ms)
                    root.oldest_ms = min(root.oldest_ms or obj.mtime_ms, obj.mtime_ms)
    except StorageError as e:
        root.partial = True
        root.error = f"{root.error}; {e}" if root.error else str(e)
