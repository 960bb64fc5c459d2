"""ENTITY_CLEANUP_SCHEDULER for a dropped table: plan the cleanup as child tasks.

Polaris's TableCleanupTaskHandler, plus what it misses:

1. Guard on the roots the catalog recorded (``storageLocation``, else the entity's
   ``location``; never the metadata file's; neither: refused). Guard the current
   metadata file; gone means done.
2. Read it; refuse unless its ``location`` is the recorded root. Keep the distinct
   existing manifests of every snapshot; collect manifest lists, the metadata log,
   older metadata files that fell out of a capped log (following the oldest existing
   file's log, repeatedly), statistics and partition statistics.
3. Fence, then create in one ``create_children`` call the children of
   ``stages.CHILD_STAGES``: one MANIFEST_FILE_CLEANUP per manifest, BATCH_FILE_CLEANUP
   of metadata-level paths, then one of the current metadata file, last.

The parent deletes nothing itself (but a lone metadata file). A crash before the
children commit leaves everything, after it the children and the metadata file: either
way a retry plans again (duplicate children are harmless). Children are in Polaris's
format and any order is safe: no child needs a file another deletes. With ``gc.enabled``
not ``true`` (as Iceberg reads it) no content file is deleted: manifests go into batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pyiceberg.exceptions import ValidationError
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from polaris_pipeline.cleanup.children import new_child
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.deleting import (
    dedupe,
    delete_guarded,
    existing_with_sizes,
    list_dry_run_sidecars,
)
from polaris_pipeline.cleanup.gc_policy import gc_disabling_value, gc_kept_note
from polaris_pipeline.cleanup.guard.shared_location import (
    DROPPED_METADATA_KEY,
    dropped_metadata_file,
)
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.cleanup.manifest import sweep_manifest_entries
from polaris_pipeline.cleanup.manifest_list import read_bounded_manifest_list
from polaris_pipeline.cleanup.metadata_file import read_metadata_bytes
from polaris_pipeline.cleanup.stages import (
    CURRENT_METADATA,
    MANIFESTS,
    METADATA,
    Staged,
    in_plan_order,
)
from polaris_pipeline.cleanup.tally import tally
from polaris_pipeline.cleanup.view import run_view_cleanup
from polaris_pipeline.errors import PolarisPipelineError, StorageError, one_line
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.tasks.manifest_codec import ManifestFileRef, manifest_ref_from_pyiceberg
from polaris_pipeline.tasks.model import NewTask, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    DroppedEntity,
    ManifestCleanupPayload,
    TableIdentifier,
    batch_cleanup_task_name,
    encode_batch_cleanup,
    encode_manifest_cleanup,
    manifest_cleanup_task_name,
    require_metadata_location,
    table_identifier,
)
from polaris_pipeline.tasks.roots import STORAGE_LOCATION_KEY, RecordedRoots

# Bound on how many older metadata files the log walk may discover, so a cyclic
# or hostile chain of logs cannot keep a run busy forever.
MAX_OLDER_METADATA = 100_000


@dataclass
class TablePlan:
    """Everything a table cleanup deletes, directly or through its children."""

    table_id: TableIdentifier
    metadata_uri: str
    keep_content: bool
    roots: RecordedRoots  # what the guard was built on, all from the catalog
    manifests: list[ManifestFileRef] = field(default_factory=list)
    manifest_lists: list[str] = field(default_factory=list)
    previous_metadata: list[str] = field(default_factory=list)  # the metadata log
    older_metadata: list[str] = field(default_factory=list)  # beyond a capped log
    statistics: list[str] = field(default_factory=list)  # incl. partition statistics

    def metadata_files(self) -> list[str]:
        """Metadata-level paths for batch children, dependents before what names them."""
        paths = dedupe(
            [*self.statistics, *self.manifest_lists, *self.previous_metadata, *self.older_metadata]
        )
        return [p for p in paths if p != self.metadata_uri]

    def all_files(self) -> list[str]:
        """Every file the plan names itself (not the manifests' entries): the current
        metadata file, the manifests and the metadata-level files."""
        manifests = [ref.manifest_path for ref in self.manifests]
        return dedupe([self.metadata_uri, *manifests, *self.metadata_files()])


def read_table_metadata(ctx: CleanupContext, uri: str) -> TableMetadata | None:
    """The table metadata at ``uri``, or None when the file does not exist. Read within
    ``MAX_METADATA_BYTES`` (``cleanup/metadata_file.py``)."""
    try:
        data = read_metadata_bytes(ctx.resolver.input_file(uri))
        return TableMetadataUtil.parse_raw(data.decode("utf-8"))
    except FileNotFoundError:
        return None
    except PolarisPipelineError:
        raise
    except (ValueError, TypeError, KeyError, ValidationError) as e:
        # Includes pydantic's ValidationError: the file is not table metadata.
        raise StorageError(f"cannot parse table metadata {uri}: {one_line(e)[:300]}") from None


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    step = max(1, size)
    for start in range(0, len(items), step):
        yield items[start : start + step]


class _Planner:
    def __init__(self, ctx: CleanupContext, result: CleanupTally, guard: Guard) -> None:
        self.ctx = ctx
        self.result = result
        self.guard = guard

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    def manifests(self, metadata: TableMetadata) -> tuple[list[str], list[ManifestFileRef]]:
        """(manifest lists, distinct existing manifests) of every snapshot."""
        lists: list[str] = []
        listed: set[str] = set()
        found: dict[str, ManifestFileRef] = {}
        missing_lists = missing_manifests = 0
        seen: set[str] = set()
        for snapshot in metadata.snapshots:
            ml = snapshot.manifest_list
            if not ml or ml in listed:
                continue
            listed.add(ml)
            lists.append(ml)
            # A refused manifest list is not even read: what it names is untrusted.
            if not self.guard.admit(ml, self.result):
                continue
            try:
                entries = read_bounded_manifest_list(self.ctx.resolver.input_file(ml))
            except FileNotFoundError:
                missing_lists += 1
                continue
            for mf in entries:
                path = mf.manifest_path
                if path in seen:
                    continue
                seen.add(path)
                if not self.guard.admit(path, self.result):
                    continue
                if not self.ctx.resolver.exists(path):
                    missing_manifests += 1
                    continue
                found[path] = manifest_ref_from_pyiceberg(mf)
        if missing_lists:
            self.note(f"{missing_lists} manifest list(s) already gone: their manifests not listed")
        if missing_manifests:
            self.note(f"{missing_manifests} manifest(s) already gone")
        return lists, list(found.values())

    def older_metadata(self, metadata_uri: str, log: list[str]) -> list[str]:
        """Metadata files older than the log, found by walking each oldest file's own log."""
        known = {metadata_uri, *log}
        older: list[str] = []
        frontier = log
        while frontier and len(older) < MAX_OLDER_METADATA:
            oldest = self._oldest_readable(frontier)
            if oldest is None:
                break
            new = [e.metadata_file for e in oldest.metadata_log if e.metadata_file not in known]
            known.update(new)
            older.extend(new)
            frontier = new
        if older:
            self.note(f"{len(older)} metadata file(s) older than the metadata log found")
        return older

    def _oldest_readable(self, candidates: list[str]) -> TableMetadata | None:
        # The log is oldest first; the first file that still exists has the longest
        # view into the past.
        for uri in candidates:
            if self.guard.check(uri) is not None:
                continue  # refused later, when the batch is planned; never read
            try:
                md = read_table_metadata(self.ctx, uri)
            except StorageError as e:
                self.note(f"older metadata {uri} unreadable, walk stopped: {e}")
                return None
            if md is not None:
                return md
        return None


def plan_table_cleanup(
    ctx: CleanupContext, entity: DroppedEntity, result: CleanupTally
) -> TablePlan | None:
    """Read the table and list what to delete; None when there is nothing to do.

    Refusals are recorded in ``result``. The guard is built on what the catalog
    recorded (the task's ``storageLocation``, else the entity's ``location``) and
    judges the metadata file before it is read; the file's own ``location`` must
    then equal that root, or the whole table is refused.
    """
    metadata_uri = require_metadata_location(entity)
    internal = ctx.task.internal_properties
    table_id = table_identifier(entity)

    guard = Guard.for_task(ctx)
    # Judged before it is read. A guard without recorded roots refuses every path,
    # so ``roots`` is only None here when the refusal is already recorded.
    if not guard.admit(metadata_uri, result) or guard.roots is None:
        result.notes.append("metadata file refused by the guard: nothing read or deleted")
        return None

    metadata = read_table_metadata(ctx, metadata_uri)
    if metadata is None:
        result.missing += 1
        result.notes.append("metadata file already gone: nothing to do")
        return None
    if not guard.admit_declared_location(metadata_uri, metadata.location, result):
        result.notes.append("metadata file's location is not the recorded one: nothing deleted")
        return None

    keep_value = gc_disabling_value(metadata.properties, entity.properties, internal)
    plan = TablePlan(
        table_id=table_id,
        metadata_uri=metadata_uri,
        keep_content=keep_value is not None,
        roots=guard.roots,
    )
    planner = _Planner(ctx, result, guard)
    plan.manifest_lists, plan.manifests = planner.manifests(metadata)
    plan.previous_metadata = [e.metadata_file for e in metadata.metadata_log]
    plan.older_metadata = planner.older_metadata(metadata_uri, plan.previous_metadata)
    plan.statistics = dedupe(
        [s.statistics_path for s in metadata.statistics]
        + [s.statistics_path for s in metadata.partition_statistics]
    )
    # Metadata-level paths are guarded now, so a refusal stops the table before
    # anything is scheduled. Manifest lists were checked while reading them.
    checked = set(plan.manifest_lists)
    for path in plan.metadata_files():
        if path not in checked:
            guard.admit(path, result)
    if keep_value is not None:
        result.notes.append(gc_kept_note(keep_value))
    if ctx.dry_run:
        _dry_run(ctx, result, guard, plan)
    return plan


def _dry_run(ctx: CleanupContext, result: CleanupTally, guard: Guard, plan: TablePlan) -> None:
    """Fill ``would_delete`` with the whole plan, children included."""
    if not plan.keep_content:
        for ref in plan.manifests:
            sweep_manifest_entries(ctx, result, guard, ref)
    result.would_delete.extend(ref.manifest_path for ref in plan.manifests)
    refused = {r.path for r in result.refused}
    candidates = [p for p in plan.metadata_files() if p not in refused]
    result.would_delete.extend(existing_with_sizes(ctx, result, candidates))
    result.would_delete.append(plan.metadata_uri)
    list_dry_run_sidecars(result, guard)
    result.notes.append(
        "dry run: content files are listed from the manifests without checking they exist"
    )


def build_children(ctx: CleanupContext, plan: TablePlan) -> Staged[NewTask]:
    """The child tasks by stage of the engine's plan, each stage possibly empty.

    A table with nothing but its metadata file has no children: the parent
    deletes that file itself.
    """
    parent = ctx.task.name
    internal = child_internal_properties(ctx, plan.roots)
    manifest_children: list[NewTask] = []
    batch_children: list[NewTask] = []
    batch_paths: list[str] = []
    if plan.keep_content:
        # The manifests go, their files stay: a batch child never reads a manifest.
        batch_paths.extend(ref.manifest_path for ref in plan.manifests)
    else:
        for ref in plan.manifests:
            data = encode_manifest_cleanup(ManifestCleanupPayload(plan.table_id, ref))
            name = manifest_cleanup_task_name(parent, ref.manifest_path)
            manifest_children.append(
                new_child(ctx, TaskType.MANIFEST_FILE_CLEANUP, name, data, internal)
            )
    batch_paths.extend(plan.metadata_files())
    for files in _chunks(dedupe(batch_paths), ctx.metadata_batch_size):
        batch_children.append(_batch_child(ctx, plan, files, internal))
    if not manifest_children and not batch_children:
        return in_plan_order([])
    last = _batch_child(ctx, plan, [plan.metadata_uri], internal)
    return in_plan_order(
        [(MANIFESTS, manifest_children), (METADATA, batch_children), (CURRENT_METADATA, [last])]
    )


def child_internal_properties(ctx: CleanupContext, roots: RecordedRoots) -> dict[str, str]:
    """The children's internal properties: the parent's, plus the roots it guarded with.

    Children run after the metadata file is gone and see no dropped entity, so a root taken
    from the entity's ``location`` goes down as ``storageLocation`` with the entity's root
    properties, and a storage configuration looked up from the catalog goes down too (as
    Polaris's children carry it). All from the catalog, never the metadata file; extra keys
    are safe: Polaris reads a map.
    """
    internal = dict(ctx.task.internal_properties)
    if not internal.get(STORAGE_LOCATION_KEY, "").strip():
        internal[STORAGE_LOCATION_KEY] = roots.location
    if ctx.catalog_storage_info is not None:
        internal.setdefault(STORAGE_CONFIG_KEY, ctx.catalog_storage_info)
    for key, value in roots.properties.items():
        internal.setdefault(key, value)
    metadata_file = dropped_metadata_file(ctx)
    if metadata_file is not None:
        # How a child's shared-location guard tells the table restored (re-registered).
        internal.setdefault(DROPPED_METADATA_KEY, metadata_file)
    return internal


def _batch_child(
    ctx: CleanupContext, plan: TablePlan, files: list[str], internal: dict[str, str]
) -> NewTask:
    payload = BatchCleanupPayload(plan.table_id, tuple(files))
    data = encode_batch_cleanup(payload, with_type=ctx.release.batch_has_type)
    name = batch_cleanup_task_name(ctx.task.name, files)
    return new_child(ctx, TaskType.BATCH_FILE_CLEANUP, name, data, internal)


def run_table_cleanup(ctx: CleanupContext) -> CleanupTally:
    """Clean up a dropped table (or view): see the module docstring."""
    entity = ctx.decoded.require(DroppedEntity)
    if entity.is_view:
        return run_view_cleanup(ctx, entity)
    result = CleanupTally.start()
    plan = plan_table_cleanup(ctx, entity, result)
    if plan is None:
        return result
    guard = Guard.for_task(ctx)
    if not result.refused:
        # Before any child exists: a live table sharing the files refuses the whole
        # task (a dry run too, so that its plan says so).
        guard.may_delete(result, plan.all_files())
    if ctx.dry_run:
        return result
    if result.refused:
        # Scheduling the rest and deleting the metadata file would lose the only
        # record of the refused files; stop with everything in place instead.
        result.notes.append("guard refused part of the plan: no child created, nothing deleted")
        return result

    stages = build_children(ctx, plan)
    children = [child for _, stage in stages for child in stage]
    if not children:
        # Nothing but the metadata file: no child would carry anything else.
        ctx.fence()
        present = existing_with_sizes(ctx, result, [plan.metadata_uri])
        if present:
            tally(result, delete_guarded(ctx, guard, [plan.metadata_uri], sizes=present), present)
        return result
    if ctx.create_children is None:
        raise PolarisPipelineError(
            f"cannot schedule {len(children)} child task(s): no create_children given"
        )
    ctx.fence()
    ctx.create_children(children)
    result.child_stages = stages
    sizes = ", ".join(f"{len(stage)} {s.name}" for s, stage in stages)
    result.notes.append(
        f"created {len(children)} child task(s) in stages of {sizes}; run them stage by "
        "stage: the current metadata file is the last child"
    )
    return result
