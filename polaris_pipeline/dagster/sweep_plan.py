"""What one sweeper tick decides, as pure functions: no Dagster context, no I/O.

``sweep_tick`` (polaris_pipeline.dagster.sweeper) reads the cursor, the run queue
and the metastore, then asks these functions what to do with what it read: how
many runs it may request (``queue_limit``), and which runs to request, with the
lines to log (``plan_sweep``). Kept apart so each rule can be tested with plain
rows and runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from dagster import DagsterRun, RunRequest

from polaris_pipeline.dagster.contract import (
    TAG_REALM,
    TAG_TASK_ID,
    run_config_for,
    run_key,
    run_task_ids,
)
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.orphans import CandidateRun, group_candidates
from polaris_pipeline.tasks.summary import why_available

# Rows read per run a tick may request: a table's orphaned children share one run,
# so up to this many of them per run cap are read to gather them.
ROWS_PER_RUN_SELECTED = 10
# Tasks named one by one in a tick's log; the rest are counted.
LOGGED_TASKS = 20


@dataclass(frozen=True)
class QueueLimit:
    """How many runs a tick may request; ``skip_reason`` says why none when the queue is
    full."""

    runs: int
    skip_reason: str | None = None


def queue_full(pending: int, settings: SweeperSettings) -> bool:
    """Whether the runs waiting to start leave no room for another (``max_pending_runs``)."""
    return pending >= settings.max_pending_runs


def queue_limit(
    pending: int, settings: SweeperSettings, *, job_name: str, wait_s: int, drain: str = ""
) -> QueueLimit:
    """The room the run queue leaves: ``max_pending_runs`` minus the runs waiting to start,
    at most ``max_runs_per_tick``. ``drain``: the note on how fast the queue empties."""
    if queue_full(pending, settings):
        return QueueLimit(
            0,
            f"{pending} run(s) of {job_name} still waiting to start "
            f"(max_pending_runs {settings.max_pending_runs}){drain}: "
            "the run queue, not the metastore, is the bottleneck; selecting nothing until "
            f"they start (a waiting run holds no lease); next sweep in {wait_s} s",
        )
    return QueueLimit(min(settings.max_runs_per_tick, settings.max_pending_runs - pending))


def rows_to_read(limit: int, queued: set[tuple[str, int]]) -> int:
    """The cap counts runs, and orphaned children of one purge share a run: read enough
    rows that a table's whole set of orphans can become one run (and past the queued)."""
    return limit * ROWS_PER_RUN_SELECTED + len(queued)


def waiting_tasks(runs: Iterable[DagsterRun]) -> set[tuple[str, int]]:
    """(realm, task id) of the runs waiting to start: their task gets no second run."""
    out: set[tuple[str, int]] = set()
    for run in runs:
        realm = run.tags.get(TAG_REALM)
        if realm is None:
            continue
        # The task id tag, and every task of a run of orphaned children (its config).
        ids = [run.tags.get(TAG_TASK_ID) or "", *run_task_ids(run.run_config)]
        out.update((realm, int(task_id)) for task_id in ids if task_id.isdigit())
    return out


def run_request_for(
    run: CandidateRun, translator: PolarisTranslator = DEFAULT_TRANSLATOR
) -> RunRequest:
    """The run of one task, or of the orphaned children of one purge."""
    first = run.first
    grouped = [t.id for t in run.tasks] if run.parent_name is not None else []
    return RunRequest(
        run_key=run_key(run),
        run_config=run_config_for(
            first.realm_id, first.id, entity_version=first.entity_version, task_ids=grouped
        ),
        tags=translator.request_tags(run),
    )


@dataclass(frozen=True)
class SweepPlan:
    """The runs one tick requests (with their requests, in order) and why.

    ``available_line`` and ``selected_line`` are logged (the release line goes between
    them: it needs the metastore); ``idle_note`` is set when there is nothing to request
    (the end of the idle reason); ``more``: a full batch, sweep again at once.
    """

    runs: list[CandidateRun]
    requests: list[RunRequest]
    realms: list[str]
    more: bool
    available_line: str = ""
    selected_line: str = ""
    idle_note: str | None = None


def plan_sweep(
    rows: Sequence[TaskRow],
    queued: set[tuple[str, int]],
    *,
    limit: int,
    settings: SweeperSettings,
    parents_present: Callable[[str, Iterable[str]], set[str]],
    pending: int,
    wait_s: int,
    elapsed_s: float = 0.0,
    translator: PolarisTranslator = DEFAULT_TRANSLATOR,
) -> SweepPlan:
    """The runs to request from the available ``rows``: those not ``queued`` (a run of
    theirs waits or has just started), orphaned children of one purge grouped in one run,
    at most ``limit`` runs. ``parents_present``: as ``group_candidates``'s."""
    available = [t for t in rows if (t.realm_id, t.id) not in queued]
    runs = group_candidates(available, parents_present)[:limit]
    candidates = [task for run in runs for task in run.tasks]
    if not candidates:
        note = f" ({pending} run(s) still waiting to start)" if pending else ""
        if rows:
            note = f" ({len(rows)} available task(s) already have a run waiting to start)"
        return SweepPlan([], [], [], more=False, idle_note=note)
    realms = sorted({task.realm_id for task in candidates})
    # A full batch means more is waiting: sweep again at the next evaluation.
    more = len(runs) >= settings.max_runs_per_tick or len(candidates) < len(available)
    available_line = (
        "available: "
        + "; ".join(
            f"{t.realm_id}/{t.id} (attempts so far {t.attempt_count}: {why_available(t)})"
            for t in candidates[:LOGGED_TASKS]
        )
        + (f"; and {len(candidates) - LOGGED_TASKS} more" if len(candidates) > LOGGED_TASKS else "")
    )
    selected_line = (
        f"selected {len(candidates)} available task(s) in {len(runs)} run(s) (orphaned "
        f"children of one purge share a run) in {', '.join(realms)} in "
        f"{elapsed_s:.2f} s (each run leases its task when it starts); "
        + ("backlog: sweeping again at the next evaluation" if more else f"next in {wait_s} s")
    )
    return SweepPlan(
        runs,
        [run_request_for(run, translator) for run in runs],
        realms,
        more,
        available_line,
        selected_line,
    )
