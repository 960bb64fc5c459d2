"""The sweeper's pure planning (polaris_pipeline.dagster.sweep_plan), with plain rows and
settings: no Dagster instance, no metastore."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from builders.tasks import batch_task, task_row
from polaris_pipeline.dagster.contract import run_task_ids
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweep_plan import SweepPlan, plan_sweep, queue_limit, rows_to_read
from polaris_pipeline.tasks.model import TaskRow
from tests.support.tasks import purge_child

HOUR_AGO = 1_700_000_000_000 - 3_600_000
SETTINGS = SweeperSettings(max_runs_per_tick=5, max_pending_runs=20)


def _no_parents(realm: str, names: Iterable[str]) -> set[str]:
    return set()


def _plan(rows: list[TaskRow], queued: set[tuple[str, int]] | None = None, **kw: Any) -> SweepPlan:
    args: dict[str, Any] = {
        "limit": SETTINGS.max_runs_per_tick,
        "settings": SETTINGS,
        "parents_present": _no_parents,
        "pending": 0,
        "wait_s": 30,
        **kw,
    }
    return plan_sweep(rows, queued or set(), **args)


def test_a_task_past_its_grace_is_one_request() -> None:
    row = task_row(batch_task("POLARIS", create_timestamp=HOUR_AGO))
    plan = _plan([row])
    [request] = plan.requests
    assert run_task_ids(request.run_config) == [str(row.id)]
    assert plan.idle_note is None and plan.realms == ["POLARIS"] and not plan.more
    assert f"POLARIS/{row.id} (attempts so far 0: never leased, past the grace period)" in (
        plan.available_line
    )
    assert plan.selected_line.startswith("selected 1 available task(s) in 1 run(s)")
    assert plan.selected_line.endswith("next in 30 s")


def test_a_full_queue_requests_nothing_and_says_why() -> None:
    full = queue_limit(20, SETTINGS, job_name="polaris_task_job", wait_s=30, drain="; slow")
    assert full.runs == 0
    assert full.skip_reason is not None
    assert full.skip_reason.startswith(
        "20 run(s) of polaris_task_job still waiting to start (max_pending_runs 20); slow: "
        "the run queue, not the metastore, is the bottleneck"
    )
    assert full.skip_reason.endswith("next sweep in 30 s")
    # Room left: the smaller of the room and the per-tick cap, and no reason.
    assert queue_limit(17, SETTINGS, job_name="j", wait_s=30).runs == 3
    assert queue_limit(0, SETTINGS, job_name="j", wait_s=30).runs == 5
    assert queue_limit(0, SETTINGS, job_name="j", wait_s=30).skip_reason is None


def test_orphaned_children_of_one_purge_share_a_run() -> None:
    parent = "entityCleanup_42"
    children = [
        task_row(purge_child("POLARIS", parent, ("ns", "t"), [f"f{i}"], create_timestamp=HOUR_AGO))
        for i in range(3)
    ]
    plan = _plan(children)
    [request] = plan.requests
    assert set(run_task_ids(request.run_config)) == {str(c.id) for c in children}
    assert "selected 3 available task(s) in 1 run(s)" in plan.selected_line

    # While the parent row exists, its holder may still run them: a run each.
    def parent_present(realm: str, names: Iterable[str]) -> set[str]:
        return set(names) & {parent}

    assert len(_plan(children, parents_present=parent_present).requests) == 3


def test_queued_tasks_get_no_second_run_and_the_cap_holds() -> None:
    rows = [task_row(batch_task("POLARIS", create_timestamp=HOUR_AGO)) for _ in range(4)]
    queued = {("POLARIS", r.id) for r in rows}
    idle = _plan(rows, queued)
    assert idle.requests == []
    assert idle.idle_note == " (4 available task(s) already have a run waiting to start)"
    assert _plan([], pending=2).idle_note == " (2 run(s) still waiting to start)"

    capped = _plan(rows, limit=2)
    assert len(capped.requests) == 2 and capped.more  # more remain: sweep again at once
    assert capped.selected_line.endswith("backlog: sweeping again at the next evaluation")
    assert rows_to_read(2, queued) == 2 * 10 + 4
