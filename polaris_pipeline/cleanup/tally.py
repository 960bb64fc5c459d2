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
    freed_uris = report.freed
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
