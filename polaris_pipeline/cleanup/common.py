"""Pieces every cleanup handler shares: the guard, deleting, tallying, child tasks."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.cleanup.shared_location import check_shared_location
from polaris_pipeline.errors import GuardRefusal, PolarisPipelineError
from polaris_pipeline.storage.delete import (
    MAX_KEYS_PER_REQUEST,
    DeleteReport,
    bulk_delete,
    crc_sidecar,
    present_crc_sidecar,
)
from polaris_pipeline.storage.guard import ROOT_PROPERTIES, PathGuard
from polaris_pipeline.storage.uri import same_location
from polaris_pipeline.tasks.decoded import ENTITY_LOCATION_KEY, recorded_location
from polaris_pipeline.tasks.model import PERMANENT_TRUE, NewTask, Prop, TaskRow, TaskType
from polaris_pipeline.tasks.payloads import DroppedEntity, task_properties

GC_ENABLED_KEY = "gc.enabled"
SAMPLE_SIZE = 20


def gc_enabled(value: str | None) -> bool:
    """``gc.enabled`` as Iceberg reads it (Java's ``Boolean.parseBoolean``).

    On only when absent or equal to ``true`` ignoring case: ``false``, ``0``,
    ``no``, `` true`` and the empty string all turn it off. Java's case folding
    matches no non-ASCII character to the letters of ``true``, so ASCII lower
    case is exact.
    """
    return value is None or (value.isascii() and value.lower() == "true")


def gc_disabling_value(*property_maps: Mapping[str, str] | None) -> str | None:
    """The first ``gc.enabled`` value that turns garbage collection off, else None.

    Any one source is enough: keeping files by mistake costs storage, deleting
    them by mistake loses data another table may still reference.
    """
    for props in property_maps:
        if props and GC_ENABLED_KEY in props:
            value = str(props[GC_ENABLED_KEY])
            if not gc_enabled(value):
                return value
    return None


def gc_kept_note(value: str) -> str:
    """The note a handler leaves when ``gc.enabled`` kept the content files."""
    return f"gc.enabled={value!r}: content files kept"


@dataclass(frozen=True)
class RecordedRoots:
    """The table roots the catalog recorded: what a guard may be built on.

    Never read from a file the guard is about to judge (a metadata file's own
    ``location``): such a file could be crafted, or be a live table's.
    """

    location: str
    source: str  # which record ``location`` came from, for messages
    # Root properties (write.data.path ...) the catalog recorded; never the metadata file's.
    properties: dict[str, str]


def recorded_roots(task: TaskRow, entity: DroppedEntity | None = None) -> RecordedRoots | None:
    """The task's recorded roots, or None when the catalog recorded no location.

    The location is the task's ``storageLocation``, else the dropped entity's
    ``properties["location"]`` (blank values count as absent). Root properties come
    from the entity's properties and the task's internal properties (the task's win:
    it is what the catalog handed the task).
    """
    internal = task.internal_properties
    found = recorded_location(task, entity)
    if found is None:
        return None
    location, source = found
    props = {
        key: value
        for source_props in (entity.properties if entity is not None else {}, internal)
        for key, value in source_props.items()
        if key in ROOT_PROPERTIES and value.strip()
    }
    return RecordedRoots(location, source, props)


def _no_roots_reason(entity: DroppedEntity | None) -> str:
    where = "no storageLocation"
    if entity is not None:
        where += f" and the dropped entity no {ENTITY_LOCATION_KEY!r} property"
    return (
        f"the catalog recorded no table location (the task has {where}); "
        "refused without reading or deleting anything"
    )


class Guard:
    """A PathGuard on the recorded roots, or the reason there is none (all refused)."""

    def __init__(
        self,
        guard: PathGuard | None,
        reason: str | None = None,
        roots: RecordedRoots | None = None,
    ) -> None:
        self._guard = guard
        self._reason = reason
        self.roots = roots

    @classmethod
    def build(cls, ctx: CleanupContext, entity: DroppedEntity | None = None) -> Guard:
        """The guard for the task's table, on the roots the catalog recorded only.

        ``entity`` is the dropped table or view, for the table and view handlers;
        child tasks have only their own internal properties.
        """
        roots = recorded_roots(ctx.task, entity)
        if roots is None:
            return cls(None, _no_roots_reason(entity))
        try:
            guard = PathGuard.for_table(roots.location, roots.properties, ctx.config)
        except GuardRefusal as e:
            return cls(None, f"no usable table location ({e.reason})", roots)
        return cls(guard, roots=roots)

    def check(self, uri: str) -> GuardRefusal | None:
        """None when ``uri`` may be deleted, else the refusal."""
        if self._guard is None:
            return GuardRefusal(uri, self._reason or "no guard")
        try:
            self._guard.check(uri)
        except GuardRefusal as e:
            # Drop the traceback: a batch may hold 100,000 refusals.
            return e.with_traceback(None)
        return None

    def allows(self, uri: str) -> bool:
        """Whether ``uri`` may be deleted (nothing recorded): for checksum sidecars."""
        return self.check(uri) is None

    def admit(self, uri: str, result: CleanupResult) -> bool:
        """Check ``uri``; a refusal is recorded in ``result``."""
        refusal = self.check(uri)
        if refusal is not None:
            result.refused.append(refusal)
            return False
        return True

    def check_shared(
        self, ctx: CleanupContext, result: CleanupResult, files: Sequence[str]
    ) -> None:
        """The shared-location guard before deleting ``files`` (``cleanup/shared_location.py``):
        raises SharedLocationRefusal, or notes the task's override. Without recorded
        roots this guard refuses every path anyway."""
        if self.roots is None:
            return
        roots = [self.roots.location, *self.roots.properties.values()]
        check_shared_location(ctx, result, self.roots.location, roots, files)

    def admit_declared_location(
        self, metadata_uri: str, declared: object, result: CleanupResult
    ) -> bool:
        """Whether the ``location`` a metadata file declares is the recorded root.

        One location by the rule of ``storage.uri`` (``file:/x`` is ``file:///x``,
        ``s3a://`` is ``s3://``, a trailing slash does not count). Polaris writes
        ``storageLocation`` from the metadata's own ``location``, so a real file
        agrees; a wider location (the namespace directory) would make the file's
        other paths look like the table's, a narrower or a sibling one means the
        file is not this table's. A disagreement is recorded as a refusal of the
        metadata file: nothing the file names is then scheduled or deleted.
        """
        if self.roots is None:
            return self.admit(metadata_uri, result)
        if isinstance(declared, str) and same_location(self.roots.location, declared):
            return True
        result.refused.append(
            GuardRefusal(
                metadata_uri,
                f"the metadata file declares location {declared!r}, but the catalog "
                f"recorded {self.roots.location!r} ({self.roots.source})",
            )
        )
        return False


def delete_guarded(
    ctx: CleanupContext,
    guard: Guard,
    uris: Sequence[str],
    *,
    chunk_size: int = MAX_KEYS_PER_REQUEST,
    sizes: Mapping[str, int | None] | None = None,
) -> DeleteReport:
    """``bulk_delete`` of already admitted ``uris``, with their checksum sidecars.

    Each local file's Hadoop sidecar (``.NAME.crc``) goes too when it exists and
    the same guard admits it; nothing else is ever added. With a deletion record,
    its header is written before the delete and the chunk's paths after it
    (``sizes``, from a manifest or a stat, give the sizes S3 does not say).
    """
    return recorded(
        ctx,
        lambda report: bulk_delete(
            ctx.resolver,
            uris,
            chunk_size=chunk_size,
            check=ctx.still_held,
            sidecar_check=guard.allows,
            report=report,
        ),
        sizes,
    )


def recorded(
    ctx: CleanupContext,
    delete: Callable[[DeleteReport], DeleteReport],
    sizes: Mapping[str, int | None] | None = None,
) -> DeleteReport:
    """Run ``delete`` (filling the report it is given) between the deletion record's
    header and its paths.

    The header first: a record that cannot be written stops the attempt before
    anything is deleted, never a purge without its record. A delete stopped
    midway (the lease lost) still has what it did recorded.
    """
    report = DeleteReport()
    if ctx.record is None:
        return delete(report)
    ctx.record.open()
    try:
        delete(report)
    finally:
        ctx.record.add_report(report, sizes, ctx.resolver.redact)
    return report


def delete_leftover_sidecars(
    ctx: CleanupContext, result: CleanupResult, guard: Guard, gone: Iterable[str]
) -> None:
    """Delete the checksum sidecars of admitted local files found already gone.

    A crash between a file's unlink and its sidecar's leaves only the sidecar;
    the retry finds the file missing and must still finish it. Only sidecars are
    counted: the files were counted missing when they were looked up.
    """
    local = [u for u in gone if crc_sidecar(u) is not None]
    if not local or ctx.dry_run:
        return
    guard.check_shared(ctx, result, local)
    ctx.fence()
    report = delete_guarded(ctx, guard, local)
    result.sidecars_deleted += len(report.sidecars)
    result.failed.update({u: e for u, e in report.failed.items() if u not in local})
    if result.bytes_freed is not None:
        result.bytes_freed += report.sidecar_bytes


def list_dry_run_sidecars(result: CleanupResult, guard: Guard) -> None:
    """Add to ``would_delete`` the checksum sidecars a real run would delete with its files."""
    sidecars = [
        sidecar
        for sidecar in map(present_crc_sidecar, result.would_delete)
        if sidecar is not None and guard.allows(sidecar)
    ]
    result.would_delete[:] = dedupe([*result.would_delete, *sidecars])


def delete_one(
    ctx: CleanupContext,
    result: CleanupResult,
    guard: Guard,
    uri: str,
    sizes: Mapping[str, int | None],
) -> CleanupResult:
    """Delete the admitted ``uri`` with its sidecar, fenced; in a dry run, list them."""
    # In a dry run too, so that a view's plan says it would be refused.
    guard.check_shared(ctx, result, [uri])
    if ctx.dry_run:
        result.would_delete.append(uri)
        list_dry_run_sidecars(result, guard)
    else:
        ctx.fence()
        tally(result, delete_guarded(ctx, guard, [uri], sizes=sizes), sizes)
    return result


def tally(
    result: CleanupResult,
    report: DeleteReport,
    sizes: Mapping[str, int | None] | None = None,
) -> None:
    """Fold a delete report into ``result``.

    ``sizes`` (from a manifest entry or a stat) lets bytes be counted on stores
    whose delete call does not say how big a file was (S3).
    """
    result.deleted += len(report.deleted)
    result.sidecars_deleted += len(report.sidecars)
    result.missing += len(report.missing)
    result.failed.update(report.failed)
    room = SAMPLE_SIZE - len(result.deleted_paths_sample)
    if room > 0:
        result.deleted_paths_sample.extend(report.deleted[:room])
    # What a store keeps (versioning, soft delete) or would not say about is never freed.
    result.retained += len(report.retained)
    result.retention_unknown += len(report.retention_unknown)
    not_freed = {*report.retained, *report.retention_unknown}
    freed_uris = [u for u in report.deleted if u not in not_freed]
    freed: int | None
    if freed_uris and sizes is not None and all(sizes.get(u) is not None for u in freed_uris):
        freed = sum(sizes[u] or 0 for u in freed_uris) + report.sidecar_bytes
    else:
        freed = report.bytes_freed
    result.bytes_freed = _add(result.bytes_freed, freed)
    kept: int | None = report.bytes_retained
    if (
        report.retained
        and sizes is not None
        and all(sizes.get(u) is not None for u in report.retained)
    ):
        kept = sum(sizes[u] or 0 for u in report.retained)
    result.bytes_retained = _add(result.bytes_retained, kept)


def _add(total: int | None, n: int | None) -> int | None:
    """A byte count added up; None (a size not known) stays None."""
    return None if total is None or n is None else total + n


def delete_chunked(
    ctx: CleanupContext,
    result: CleanupResult,
    guard: Guard,
    uris: Sequence[str],
    *,
    sizes: Mapping[str, int | None] | None = None,
    what: str = "files",
    done_before: int = 0,
    total: int = 0,
) -> int:
    """Delete ``uris`` (admitted by ``guard``) in chunks of ``ctx.delete_chunk_size``,
    fencing before each; checksum sidecars go with their files.

    Returns how many paths were processed, for progress across several calls.
    """
    chunk_size = max(1, ctx.delete_chunk_size)
    done = done_before
    for start in range(0, len(uris), chunk_size):
        chunk = uris[start : start + chunk_size]
        # Again before every chunk: a table created at the path meanwhile stops the rest.
        guard.check_shared(ctx, result, chunk)
        ctx.fence()
        report = delete_guarded(
            ctx, guard, chunk, chunk_size=min(chunk_size, MAX_KEYS_PER_REQUEST), sizes=sizes
        )
        tally(result, report, sizes)
        done += len(chunk)
        if ctx.progress is not None:
            ctx.progress(done, total, what)
    return done


def existing_with_sizes(
    ctx: CleanupContext, result: CleanupResult, uris: Iterable[str]
) -> dict[str, int | None]:
    """The paths of ``uris`` that exist, with their sizes; stat errors go to ``failed``.

    Missing paths count as ``missing`` here, so a store that reports deleting an
    absent key (S3) does not inflate ``deleted``.
    """
    out: dict[str, int | None] = {}
    for uri in uris:
        if uri in out:
            continue
        try:
            size = ctx.resolver.size(uri)
        except PolarisPipelineError as e:
            result.failed[uri] = str(e)
            continue
        if size is None:
            result.missing += 1
            if ctx.record is not None and not ctx.dry_run:
                ctx.record.note_gone(uri)
        else:
            out[uri] = size
    return out


def new_child(
    ctx: CleanupContext,
    task_type: TaskType,
    name: str,
    data: str,
    internal_properties: Mapping[str, str] | None = None,
) -> NewTask:
    """A child task of ``ctx.task``: same realm, the parent's internal properties by default.

    A parent whose shared-location guard an operator overrode hands the override down:
    its children delete the files the operator let it delete.
    """
    task_id = ctx.new_task_id() if ctx.new_task_id is not None else (secrets.randbits(63) or 1)
    internal = ctx.task.internal_properties if internal_properties is None else internal_properties
    properties = task_properties(task_type, data)
    if ctx.task.shared_location_allowed:
        properties[Prop.ALLOW_SHARED_LOCATION] = PERMANENT_TRUE
    return NewTask(
        realm_id=ctx.task.realm_id,
        id=task_id,
        name=name,
        properties=properties,
        internal_properties=dict(internal),
    )


def dedupe(items: Iterable[str]) -> list[str]:
    """``items`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(items))
