"""Folding a delete report into a handler's result: counts, bytes, a sample of paths."""

from __future__ import annotations

from collections.abc import Mapping

from polaris_pipeline.cleanup.context import CleanupTally
from polaris_pipeline.storage.delete import DeleteReport
from polaris_pipeline.tasks.formatting import PATH_SAMPLE


def tally(
    result: CleanupTally,
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
    room = PATH_SAMPLE - len(result.deleted_paths_sample)
    if room > 0:
        result.deleted_paths_sample.extend(report.deleted[:room])
    result.retained += len(report.retained)
    result.retention_unknown += len(report.retention_unknown)
    by_size = _sized(report.freed, sizes)
    freed = report.bytes_freed if by_size is None else by_size + report.sidecar_bytes
    result.bytes_freed = _add(result.bytes_freed, freed)
    kept = _sized(report.retained, sizes)
    result.bytes_retained = _add(
        result.bytes_retained, report.bytes_retained if kept is None else kept
    )


def _sized(uris: list[str], sizes: Mapping[str, int | None] | None) -> int | None:
    """The bytes of ``uris`` by ``sizes``; None when there are none or a size is not known."""
    if not uris or sizes is None or any(sizes.get(u) is None for u in uris):
        return None
    return sum(sizes[u] or 0 for u in uris)


def _add(total: int | None, n: int | None) -> int | None:
    """A byte count added up; None (a size not known) stays None."""
    return None if total is None or n is None else total + n
