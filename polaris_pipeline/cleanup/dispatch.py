"""Route a task to its handler by ``taskType``."""

from __future__ import annotations

from collections.abc import Callable

from polaris_pipeline.cleanup.batch import run_batch_cleanup
from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.cleanup.manifest import run_manifest_cleanup
from polaris_pipeline.cleanup.table import run_table_cleanup
from polaris_pipeline.errors import PayloadError
from polaris_pipeline.tasks.model import TaskType

HANDLERS: dict[TaskType, Callable[[CleanupContext], CleanupResult]] = {
    TaskType.ENTITY_CLEANUP_SCHEDULER: run_table_cleanup,
    TaskType.MANIFEST_FILE_CLEANUP: run_manifest_cleanup,
    TaskType.BATCH_FILE_CLEANUP: run_batch_cleanup,
}


def run_cleanup(ctx: CleanupContext) -> CleanupResult:
    """Run the handler for ``ctx.task``'s type.

    A payload that cannot be decoded raises PayloadError naming the task; the
    caller records it (retrying would not help).
    """
    handler = HANDLERS[ctx.task.task_type()]
    try:
        return handler(ctx)
    except PayloadError as e:
        if e.task is None:
            raise e.for_task(ctx.task.label) from None
        raise
