"""Running leased tasks to the end: a task, its children stage by stage, its last stage;
and a sweep (``sweep_tasks``), which leases and runs every available task until none remains.

The CLI's ``sweep`` and ``tasks run`` and the realm backfill run tasks this way; a
Dagster run places each stage in steps of its own (``dagster/task_job.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from polaris_pipeline.cleanup.stages import CHILD_STAGES, ChildStage, Staged, leases_in_stages
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.tasks.ref import Lease

# Tasks a sweep leases per round trip, unless told otherwise.
SWEEP_BATCH_SIZE = 32


def child_stages(outcome: TaskOutcome, plan: Sequence[ChildStage] = CHILD_STAGES) -> Staged[Lease]:
    """The children an attempt created, in the stages its handler put them in."""
    staged = outcome.result.child_stages if outcome.result is not None else []
    return leases_in_stages(staged, outcome.children, plan)


def execute_tree(
    runner: Runner, lease: Lease, on_outcome: Callable[[TaskOutcome], None] | None = None
) -> list[TaskOutcome]:
    """Execute a task, its children stage by stage, then a waiting table's last stage.
    ``on_outcome`` hears each final outcome, a parent before its children (a table's after
    its last stage).
    """
    root = runner.execute(lease)
    tell = None if root.finish is not None else on_outcome
    if tell is not None:
        tell(root)
    rest: list[TaskOutcome] = []
    restored: TaskOutcome | None = None
    # One at a time, so each stage is done before the next one starts.
    for child in (child for _, stage in child_stages(root) for child in stage):
        ran = execute_tree(runner, child, tell)
        rest.extend(ran)
        restored = next((o for o in ran if o.status is Status.RESTORED), None)
        if restored is not None:
            break
    if root.finish is None:
        return [root, *rest]
    if restored is not None:
        # A child found the table live again and ended the whole family (its rows are
        # gone): the table is restored, not done, and has no last stage to run.
        final = root.evolve(status=Status.RESTORED, restored_as=restored.restored_as, finish=None)
    else:
        done = all(outcome.ok for outcome in rest)
        finished = runner.finish_table(root.finish, children_done=done, result=root.result)
        final = finished.evolve(children=root.children)
    outcomes = [final, *rest]
    if on_outcome is not None:
        for outcome in outcomes:
            on_outcome(outcome)
    return outcomes


def sweep_tasks(
    runner: Runner,
    realms: Iterable[str] | None = None,
    *,
    batch_size: int = SWEEP_BATCH_SIZE,
    max_tasks: int | None = None,
    on_outcome: Callable[[TaskOutcome], None] | None = None,
) -> list[TaskOutcome]:
    """Lease and run every available task (and its children) until none remains."""
    realm_list = list(realms) if realms is not None else None
    outcomes: list[TaskOutcome] = []
    while max_tasks is None or len(outcomes) < max_tasks:
        limit = batch_size if max_tasks is None else min(batch_size, max_tasks - len(outcomes))
        leases = runner.lease(limit, realm_list)
        if not leases:
            break
        try:
            for lease in leases:
                outcomes += execute_tree(runner, lease, on_outcome)
        except BaseException:
            # The batch is abandoned: stop renewing its leases so they lapse and
            # any sweeper (this one included, under a new id) can take them.
            runner.holder.renew()
            raise
    return outcomes
