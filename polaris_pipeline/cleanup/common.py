"""Pieces every cleanup handler shares: the guard, deleting, tallying, child tasks."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import unquote

from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.errors import GuardRefusal, PolarisPipelineError
from polaris_pipeline.storage.delete import MAX_KEYS_PER_REQUEST, DeleteReport, bulk_delete
from polaris_pipeline.storage.guard import PathGuard
from polaris_pipeline.tasks.model import NewTask, TaskType
from polaris_pipeline.tasks.payloads import DroppedEntity, TableIdentifier, task_properties

STORAGE_LOCATION_KEY = "storageLocation"
PARENT_NAMESPACE_KEY = "parent-namespace"
GC_ENABLED_KEY = "gc.enabled"
SAMPLE_SIZE = 20
# Iceberg's RESTUtil joins namespace levels with the URL-encoded unit separator.
_NAMESPACE_SEPARATOR = "%1F"


def gc_disabled(*property_maps: Mapping[str, str] | None) -> bool:
    """Whether any source says ``gc.enabled=false``: then content files must stay.

    Any one source is enough: keeping files by mistake costs storage, deleting
    them by mistake loses data another table may still reference.
    """
    for props in property_maps:
        if props and str(props.get(GC_ENABLED_KEY, "")).strip().lower() == "false":
            return True
    return False


def table_identifier(entity: DroppedEntity) -> TableIdentifier:
    """The dropped table's identifier, as Polaris's ``getTableIdentifier`` builds it."""
    encoded = entity.internal_properties.get(PARENT_NAMESPACE_KEY, "")
    levels = tuple(unquote(p) for p in encoded.split(_NAMESPACE_SEPARATOR)) if encoded else ()
    return TableIdentifier(levels, entity.name)


class Guard:
    """A PathGuard, or the reason there is none (every path is then refused)."""

    def __init__(self, guard: PathGuard | None, reason: str | None = None) -> None:
        self._guard = guard
        self._reason = reason

    @classmethod
    def build(
        cls,
        ctx: CleanupContext,
        table_properties: Mapping[str, str],
        fallback_location: str | None = None,
    ) -> Guard:
        """The guard for the task's table.

        The task's ``storageLocation`` comes first: it was written by the catalog,
        whereas the metadata's ``location`` is only as trustworthy as the file.
        """
        location = ctx.task.internal_properties.get(STORAGE_LOCATION_KEY) or fallback_location
        if not location:
            return cls(None, "task has no storageLocation and no table location is known")
        try:
            return cls(PathGuard.for_table(location, table_properties, ctx.config))
        except GuardRefusal as e:
            return cls(None, f"no usable table location ({e.reason})")

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

    def admit(self, uri: str, result: CleanupResult) -> bool:
        """Check ``uri``; a refusal is recorded in ``result``."""
        refusal = self.check(uri)
        if refusal is not None:
            result.refused.append(refusal)
            return False
        return True


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
    result.missing += len(report.missing)
    result.failed.update(report.failed)
    room = SAMPLE_SIZE - len(result.deleted_paths_sample)
    if room > 0:
        result.deleted_paths_sample.extend(report.deleted[:room])
    freed: int | None
    if (
        report.deleted
        and sizes is not None
        and all(sizes.get(u) is not None for u in report.deleted)
    ):
        freed = sum(sizes[u] or 0 for u in report.deleted)
    else:
        freed = report.bytes_freed
    if freed is None or result.bytes_freed is None:
        result.bytes_freed = None
    else:
        result.bytes_freed += freed


def delete_chunked(
    ctx: CleanupContext,
    result: CleanupResult,
    uris: Sequence[str],
    *,
    sizes: Mapping[str, int | None] | None = None,
    what: str = "files",
    done_before: int = 0,
    total: int = 0,
) -> int:
    """Delete ``uris`` in chunks of ``ctx.delete_chunk_size``, fencing before each.

    Returns how many paths were processed, for progress across several calls.
    """
    chunk_size = max(1, ctx.delete_chunk_size)
    done = done_before
    for start in range(0, len(uris), chunk_size):
        chunk = uris[start : start + chunk_size]
        ctx.fence()
        report = bulk_delete(
            ctx.resolver,
            chunk,
            chunk_size=min(chunk_size, MAX_KEYS_PER_REQUEST),
            check=ctx.still_held,
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
    """A child task of ``ctx.task``: same realm, the parent's internal properties by default."""
    task_id = ctx.new_task_id() if ctx.new_task_id is not None else (secrets.randbits(63) or 1)
    internal = ctx.task.internal_properties if internal_properties is None else internal_properties
    return NewTask(
        realm_id=ctx.task.realm_id,
        id=task_id,
        name=name,
        properties=task_properties(task_type, data),
        internal_properties=dict(internal),
    )


def dedupe(items: Iterable[str]) -> list[str]:
    """``items`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(items))
