"""A dry run: what a run would delete and refuse, each orphaned task planned through a
``Runner``'s dry-run context; nothing leased, changed or deleted."""

from __future__ import annotations

from collections.abc import Iterable

from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.errors import PayloadError, PolarisPipelineError, one_line
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow, TaskState
from polaris_pipeline.unreferenced.phase import phase_entity, run_phase


def plan(runner: Runner, task: TaskRow | DecodedTask) -> CleanupResult:
    """Dry run of one task: what would be deleted and refused; nothing leased or changed."""
    decoded = DecodedTask.of(task)
    ctx = runner.contexts.cleanup_context(decoded)
    runner.contexts.reach_storage(ctx)
    result = run_cleanup(ctx)
    mode = runner.table_finisher.mode(decoded.row.realm_id)
    entity = phase_entity(mode, decoded, result)
    if entity is not None:
        # What the referenced plan deletes is listed apart; an error is the plan's note.
        error = run_phase(ctx, entity, mode, result)
        if error is not None:
            result.notes.append(error)
    return result.freeze()


def dry_run(
    runner: Runner, realms: Iterable[str] | None = None
) -> list[tuple[DecodedTask, CleanupResult | str]]:
    """Each orphaned task, decoded once, with its plan (``plan``) or why it has none."""
    _, rows = runner.metastore.tasks_with_state(realms)
    out: list[tuple[DecodedTask, CleanupResult | str]] = []
    for row, state in rows:
        if state is not TaskState.ORPHANED:
            continue
        task = DecodedTask.from_row(row)
        try:
            out.append((task, plan(runner, task)))
        except PayloadError as exc:
            out.append((task, exc.for_task(task.label).args[0]))
        except (PolarisPipelineError, OSError) as exc:
            out.append((task, one_line(exc)))
    return out
