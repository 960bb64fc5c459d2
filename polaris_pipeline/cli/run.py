"""The commands that run tasks: ``tasks run`` (one task and its children) and ``sweep``.

Each prints one line per task as it ends (the outcome view's), then the total;
exit 1 when a task failed. ``sweep --dry-run`` leases nothing and opens the
metastore read-only.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from polaris_pipeline.cli.context import (
    EXIT_OK,
    EXIT_TASK_FAILED,
    checked_metastore,
    find_task,
    settings_for,
    storage_config,
    warn_if_unbounded,
)
from polaris_pipeline.cli.output import (
    OutcomeReport,
    dump_json,
    plan_json,
    print_plans,
    would_fail,
)
from polaris_pipeline.execution.dry_run import dry_run
from polaris_pipeline.execution.holder import make_executor_id
from polaris_pipeline.execution.outcome import ProgressFn
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import execute_tree, sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.nothing_available import nothing_available_reason
from polaris_pipeline.settings import PipelineSettings


def _runner(
    settings: PipelineSettings, store: Metastore, command: str, progress: ProgressFn | None = None
) -> Runner:
    """The Runner of a command (a dry run's leases nothing: its executor id goes unused)."""
    prefix = settings.metastore.executor_prefix
    config = storage_config(settings)
    if command != DRY_RUN:  # a dry run deletes nothing
        warn_if_unbounded(config)
    return Runner(
        store,
        config,
        executor_id=make_executor_id(command, prefix),
        progress=progress,
        deletion_record=settings.storage.deletion_record,
    )


def _nothing_available(store: Metastore, realms: list[str] | None) -> str:
    now, rows = store.tasks_with_state(realms)
    return nothing_available_reason(rows, now, store.policy, realms)


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=False)
    task = find_task(store, args.task_id, args.realm, settings.metastore.realm_list())
    report = OutcomeReport(out, as_json=args.json)
    with _runner(settings, store, "run", report.progress) as runner:
        # A fresh holder: nothing of its own to adopt.
        decision = runner.start(task.realm_id, task.id, operator=True, may_adopt=False)
        start = {"action": decision.action.value, "message": decision.message}
        if decision.lease is None:
            if args.json:
                dump_json({"started": False, **start}, out)
            else:
                print(f"not run: {decision.message}", file=out)
            return EXIT_TASK_FAILED
        if not args.json:
            print(decision.message, file=out)
        execute_tree(runner, decision.lease, on_outcome=report)
        report.progress.clear()
    report.finish("ran", {"started": True, **start})
    return EXIT_TASK_FAILED if report.totals.failed else EXIT_OK


DRY_RUN = "dry-run"


def cmd_sweep(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    realms = settings.metastore.realm_list()
    if args.dry_run:
        return _dry_run(settings, realms, out, as_json=args.json)
    store = checked_metastore(settings, read_only=False)
    report = OutcomeReport(out, as_json=args.json)
    with _runner(settings, store, "sweep", report.progress) as runner:
        report.progress.status(f"sweeping {store.display_url} …")
        outcomes = sweep_tasks(runner, realms, batch_size=args.batch_size, on_outcome=report)
        report.progress.clear()
    report.finish("swept")
    if not outcomes and not args.json:
        print(_nothing_available(store, realms), file=out)
    return EXIT_TASK_FAILED if report.totals.failed else EXIT_OK


def _dry_run(
    settings: PipelineSettings, realms: list[str] | None, out: TextIO, *, as_json: bool
) -> int:
    store = checked_metastore(settings, read_only=True)
    with _runner(settings, store, DRY_RUN) as runner:
        docs = [plan_json(task, plan) for task, plan in dry_run(runner, realms)]
    reason = None if docs else _nothing_available(store, realms)
    failing = would_fail(docs)
    if as_json:
        dump_json({"tasks": docs, "would_fail": failing, "nothing_available": reason}, out)
    else:
        print_plans(docs, reason, out)
    # As the sweep itself would exit: 1 when a task would fail.
    return EXIT_TASK_FAILED if failing else EXIT_OK
