"""Route a task to its handler by ``taskType``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.tasks.model import TaskType

if TYPE_CHECKING:
    from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally

# (module, function) per type, imported on first use: the handlers pull in
# pyiceberg, pyarrow and the filesystems, which the code location (sensor ticks,
# the code server) never needs; only a run that executes a task pays for them.
HANDLERS: dict[TaskType, tuple[str, str]] = {
    TaskType.ENTITY_CLEANUP_SCHEDULER: ("polaris_pipeline.cleanup.table", "run_table_cleanup"),
    TaskType.MANIFEST_FILE_CLEANUP: ("polaris_pipeline.cleanup.manifest", "run_manifest_cleanup"),
    TaskType.BATCH_FILE_CLEANUP: ("polaris_pipeline.cleanup.batch", "run_batch_cleanup"),
}


def handler_for(task_type: TaskType) -> Callable[[CleanupContext], CleanupTally]:
    module, name = HANDLERS[task_type]
    handler: Callable[[CleanupContext], CleanupTally] = getattr(
        importlib.import_module(module), name
    )
    return handler


def run_cleanup(ctx: CleanupContext) -> CleanupTally:
    """Run the handler for ``ctx.task``'s type.

    A payload that cannot be decoded raises PayloadError naming the task; the
    caller records it (retrying would not help).
    """
    handler = handler_for(ctx.decoded.require_kind())
    try:
        return handler(ctx)
    except PayloadError as e:
        if e.task is None:
            raise e.for_task(ctx.task.label) from None
        raise
