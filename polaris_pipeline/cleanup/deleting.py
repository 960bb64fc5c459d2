"""Deleting admitted paths: fenced, chunked, recorded, with their checksum sidecars."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.cleanup.tally import tally
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.storage.delete import (
    MAX_KEYS_PER_REQUEST,
    DeleteReport,
    bulk_delete,
    crc_sidecar,
    present_crc_sidecar,
)


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
            local_roots=guard.delete_roots,
        ),
        sizes,
    )


def recorded(
    ctx: CleanupContext,
    delete: Callable[[DeleteReport], DeleteReport],
    sizes: Mapping[str, int | None] | None = None,
) -> DeleteReport:
    """Run ``delete`` (filling its report) between the deletion record's header and its paths.

    The header first: a record that cannot be written stops the attempt before anything is
    deleted. A delete stopped midway (lease lost) still has what it did recorded.
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
    ctx: CleanupContext, result: CleanupTally, guard: Guard, gone: Iterable[str]
) -> None:
    """Delete the checksum sidecars of admitted local files found already gone.

    A crash between a file's unlink and its sidecar's leaves only the sidecar;
    the retry finds the file missing and must still finish it. Only sidecars are
    counted: the files were counted missing when they were looked up.
    """
    local = [u for u in gone if crc_sidecar(u) is not None]
    if not local or ctx.dry_run:
        return
    local = guard.may_delete(result, local)
    if not local:
        return
    ctx.fence()
    report = delete_guarded(ctx, guard, local)
    result.sidecars_deleted += len(report.sidecars)
    result.failed.update({u: e for u, e in report.failed.items() if u not in local})
    if result.bytes_freed is not None:
        result.bytes_freed += report.sidecar_bytes


def list_dry_run_sidecars(result: CleanupTally, guard: Guard) -> None:
    """Add to ``would_delete`` the checksum sidecars a real run would delete with its files."""
    sidecars = [
        sidecar
        for sidecar in map(present_crc_sidecar, result.would_delete)
        if sidecar is not None and guard.allows(sidecar)
    ]
    result.would_delete[:] = dedupe([*result.would_delete, *sidecars])


def delete_one(
    ctx: CleanupContext,
    result: CleanupTally,
    guard: Guard,
    uri: str,
    sizes: Mapping[str, int | None],
) -> CleanupTally:
    """Delete ``uri`` with its sidecar once the guard lets it go (``Guard.may_delete``),
    fenced; in a dry run, list them."""
    # In a dry run too, so that a view's plan says it would be refused.
    if not guard.may_delete(result, [uri]):
        return result
    if ctx.dry_run:
        result.would_delete.append(uri)
        list_dry_run_sidecars(result, guard)
    else:
        ctx.fence()
        tally(result, delete_guarded(ctx, guard, [uri], sizes=sizes), sizes)
    return result


def delete_chunked(
    ctx: CleanupContext,
    result: CleanupTally,
    guard: Guard,
    uris: Sequence[str],
    *,
    sizes: Mapping[str, int | None] | None = None,
    what: str = "files",
    done_before: int = 0,
    total: int = 0,
) -> int:
    """Delete ``uris`` in chunks of ``ctx.delete_chunk_size``, each once the guard lets
    it go (``Guard.may_delete``) and fenced; checksum sidecars go with their files.

    Returns how many paths were processed, for progress across several calls.
    """
    chunk_size = max(1, ctx.delete_chunk_size)
    done = done_before
    for start in range(0, len(uris), chunk_size):
        given = uris[start : start + chunk_size]
        # Before every chunk: a table created at the path meanwhile stops the rest.
        chunk = guard.may_delete(result, given)
        done += len(given)
        if not chunk:
            continue
        ctx.fence()
        report = delete_guarded(
            ctx, guard, chunk, chunk_size=min(chunk_size, MAX_KEYS_PER_REQUEST), sizes=sizes
        )
        tally(result, report, sizes)
        if ctx.progress is not None:
            ctx.progress(done, total, what)
    return done


def existing_with_sizes(
    ctx: CleanupContext, result: CleanupTally, uris: Iterable[str]
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


def dedupe(items: Iterable[str]) -> list[str]:
    """``items`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(items))
