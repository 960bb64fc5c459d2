"""A "sweep" without a metastore: a dropped table's cleanup task, then each child it
creates in list order, the way the runner does; a task whose handler raises
(a lost lease) stays at the head of the queue and is run again from scratch.
``create_children`` appends to the queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from builders import tasks as built_tasks
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.errors import LeaseLost
from polaris_pipeline.tasks.model import NewTask, TaskRow
from tests.support.iceberg import Warehouse


@dataclass
class Run:
    task: TaskRow
    result: CleanupTally
    created: list[NewTask] = field(default_factory=list)


def _inserter(
    queue: deque[TaskRow],
    created: list[NewTask],
    after_create: Callable[[], None] | None,
) -> Callable[[Sequence[NewTask]], Sequence[NewTask]]:
    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        # Inserted durably first: a failure after this point keeps the children.
        created.extend(children)
        queue.extend(built_tasks.task_row(c) for c in children)
        if after_create is not None:
            after_create()
        return children

    return create


def sweep(
    wh: Warehouse,
    first: TaskRow,
    *,
    fence: Callable[[], None] | None = None,
    after_create: Callable[[], None] | None = None,
    max_runs: int = 500,
    **ctx_kwargs: Any,
) -> list[Run]:
    """Run ``first`` and every child it creates, in order, until the queue is empty."""
    queue: deque[TaskRow] = deque([first])
    runs: list[Run] = []
    for _ in range(max_runs):
        if not queue:
            return runs
        task = queue[0]
        created: list[NewTask] = []
        create = _inserter(queue, created, after_create)
        ctx = CleanupContext(
            task=task,
            resolver=wh.resolver,
            config=wh.config,
            fence=fence or (lambda: None),
            create_children=create,
            **ctx_kwargs,
        )
        try:
            result = run_cleanup(ctx)
        except LeaseLost:
            continue  # the task stays queued; the next attempt starts from scratch
        queue.popleft()
        runs.append(Run(task, result, created))
    raise AssertionError("sweep did not finish")


def assert_all_ok(runs: list[Run]) -> None:
    for run in runs:
        assert run.result.ok, (run.task.name, run.result.error_summary())
