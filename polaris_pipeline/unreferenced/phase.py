"""Where the unreferenced phase sits in a table's run, for the ``Runner``.

Once per dropped table (an ENTITY_CLEANUP task of a table, never a view or a
child, whose referenced purge refused and failed nothing), last: inside its
attempt, or in its last stage once its children ran (``execution/table_finish.py``).
What fails an attempt and what only refuses: ``unreferenced/listing.py``.
"""

from __future__ import annotations

from collections.abc import Set

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.storage.uri import normalize_uri
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import DroppedEntity
from polaris_pipeline.unreferenced.listing import run_unreferenced
from polaris_pipeline.unreferenced.mode import UnreferencedMode
from polaris_pipeline.unreferenced.report import UnreferencedReport


def phase_entity(
    mode: UnreferencedMode, task: TaskRow | DecodedTask, result: CleanupTally | None
) -> DroppedEntity | None:
    """The table to run the phase for (an ENTITY_CLEANUP task's), or None when it does not
    apply: a view, a child, or a payload that does not decode (its own attempt records why)."""
    if mode is UnreferencedMode.OFF or result is None or not result.ok:
        return None
    entity = DecodedTask.of(task).entity
    return None if entity is None or entity.is_view else entity


def run_phase(
    ctx: CleanupContext,
    entity: DroppedEntity,
    mode: UnreferencedMode,
    result: CleanupTally,
) -> str | None:
    """Run the phase into ``result.unreferenced``; the attempt's error, or None.

    The live entities are asked afresh of the context's metastore (``CleanupContext.live``;
    none: the phase refuses), catalogs included. In a dry run the referenced plan's
    paths (``result.would_delete``) are listed apart and every path that would go is
    kept for the plan.
    """
    live = (
        LiveLocations(ctx.live.engine, ctx.live.schema_version, bound_s=ctx.live.bound_s)
        if ctx.live
        else None
    )
    referenced: Set[str] = (
        frozenset(normalize_uri(u) for u in result.would_delete) if ctx.dry_run else frozenset()
    )
    report = run_unreferenced(
        ctx,
        entity,
        mode,
        live.overlaps if live is not None else None,
        writers=live.write_path_users if live is not None else None,
        referenced=referenced,
        all_paths=ctx.dry_run,
    )
    result.unreferenced = report
    return failure_of(report)


def failure_of(report: UnreferencedReport) -> str | None:
    """Why the phase fails its attempt (retried), or None (done, or a safety refusal)."""
    if report.error:
        return f"unreferenced files of {report.prefix}: {report.error}"
    if report.failures:
        uri, error = next(iter(report.failed.items()))
        return (
            f"unreferenced files of {report.prefix}: {report.failures} delete(s) failed, "
            f"first {uri!r}: {error}"
        )
    return None
