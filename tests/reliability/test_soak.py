"""Scenario 11: the soak, short: a Polaris-like writer for two minutes while the deployment sweeps.

``bench/soak.py``'s soak at CI size: a real ``dagster-daemon run`` with the
repository's code location over a PostgreSQL metastore and a dagster-postgres
instance (both databases made for this test), the writer of
``builders/polaris_writer.py`` (dropped pyiceberg tables, purges a Polaris
executor died in, batch and manifest orphans, hostile rows) one event every eight
seconds, then a drain. Run retention is on (one day, every minute), each
finished run backdated by a day 30 s after it ended (``bench/soak.py`` says why).
The published 30-minute run and its figures are in docs/soak.md.

It asserts what the published run states: every task the writer created is done
(nothing lost, no file outside a table deleted), none dead but the hostile rows,
which are refused or left unhandled with their rows kept; no two holders on one
task at the same time (the rows' executor history, read once a second); and the
retention kept Dagster's runs bounded: its runs, queued ahead of the task runs
(``dagster/priority``), deleted runs, and no task run aged before a retention run
started is left (causal, not timed: on a loaded host ticks come late, and a
retention run waiting behind a backlog of task runs was the last CI's failure).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bench.soak import SoakConfig, run_soak, still_aged
from bench.soak_stats import invariant_problems, latency_figures, rows
from builders.daemon import TASK_JOB
from polaris_pipeline.dagster.contract import PRIORITY_TAG
from polaris_pipeline.dagster.retention import RETENTION_JOB_NAME, RETENTION_RUN_TAGS
from tests.reliability.harness import RelDb, Scenario

CONFIG = SoakConfig(
    instance="postgres",
    minutes=2.0,
    # One event every 8 s (15 in the two minutes): the invariants need every kind of event,
    # not a backlog; a CI host at load 20 drained 76 tasks too slowly for any fixed bound.
    event_interval_s=8.0,
    lease_timeout_ms=20_000,
    grace_ms=5_000,
    retention_age_s=30.0,
    # A bound, not a wait: the drain ends as soon as only hostile rows are left, or once
    # no task finished for stall_s; on a loaded host the last queued runs need more than
    # a quiet host's two minutes (a CI host had 14 tasks left after 360 s, this one at load
    # 20 had 15 after 540 s, still draining).
    drain_s=720.0,
    stall_s=150.0,
    sample_s=3.0,
    db_sample_s=10.0,
)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.scenario(
    11, "Soak: a Polaris-like writer for 2 minutes while dagster-daemon sweeps, retention on"
)
def test_soak(
    tmp_path: Path, rel_db: RelDb, dagster_pg_env: Mapping[str, str], scenario: Scenario
) -> None:
    scenario.load = (
        f"one writer event every {CONFIG.event_interval_s:.0f} s for {CONFIG.minutes:.0f} min "
        "(dropped pyiceberg tables, purges a Polaris executor died in, batch and manifest "
        "orphans, hostile rows), a real dagster-daemon over a PostgreSQL metastore and "
        "dagster-postgres; run retention on"
    )
    scenario.fault = (
        "a Polaris executor dies mid-purge (children written, half of them leased by it, "
        f"one file already deleted; lease {CONFIG.lease_timeout_ms // 1000} s); hostile rows"
    )
    result = run_soak(CONFIG, tmp_path, rel_db.url, dagster_pg_env, log=lambda _: None)
    final = result["final"]
    scenario.losses(
        tasks_lost=len(final["lost"]),
        wrongly_dead=len(final["wrongly_dead"]),
        files_wrongly_deleted=len(final["kept_files_deleted"]),
        concurrent_holders=len(result["overlaps"]),
    )
    lat = latency_figures(result)
    r = rows(result)
    scenario.metrics.update(
        {
            "events": final["events"],
            "writer_tasks": final["writer_tasks"],
            "children_seen": final["children_seen"],
            "latency_p50_s": round(lat["p50"] or 0, 1),
            "latency_p95_s": round(lat["p95"] or 0, 1),
            "runs_deleted": r.runs_deleted,
            "rows_per_task": round(r.rows_per_task or 0, 1),
        }
    )

    problems = invariant_problems(result)
    assert not problems, problems
    scenario.check(
        "every task the writer created is done or still in grace, leased or orphaned; "
        "none lost, none dead but hostile rows, no file outside a table deleted"
    )
    assert not result["overlaps"]
    scenario.check("no two holders on one task at the same time (the rows' executor history)")

    by_state = final["writer_tasks_by_state"]
    drain_s = round(result["drained_s"] - result["writer_end_s"])
    assert by_state == {"done": final["writer_tasks"]}, (by_state, drain_s, result["daemon"])
    assert final["children_seen"] > 0 and final["children_left"] == 0
    scenario.check("after the drain every task is done, the children the runs created too")

    hostile = final["hostile_by_state"]
    assert final["hostile_rows"] > 0
    assert sum(hostile.values()) == final["hostile_rows"]
    assert set(hostile) <= {"dead", "backing-off", "unhandled"}, hostile
    scenario.check("hostile rows end refused (dead or backing off) or unhandled, rows kept")

    assert r.first_deletion_s is not None and r.runs_deleted > 0, r
    runs = result["runs"]
    retention = [info for info in runs.values() if info["job"] == RETENTION_JOB_NAME]
    priority = RETENTION_RUN_TAGS[PRIORITY_TAG]
    assert retention and all(info["priority"] == priority for info in retention), retention
    scenario.check(
        f"the daemon's retention runs carry {PRIORITY_TAG} {priority}: queued ahead of task runs"
    )
    # Causal, not timed: a task run aged (backdated) before a retention run started is
    # one that run selected. A late tick on a loaded host only leaves younger runs.
    retention_starts = [
        info["start"] - result["t0"]
        for info in retention
        if info["status"] == "SUCCESS" and info["start"] is not None
    ]
    stale = [
        run_id
        for run_id in result["present_runs"]
        if runs.get(run_id, {}).get("job") == TASK_JOB
        and run_id in result["backdated"]
        # Still aged (not updated since: then a retention run may not select it yet).
        and still_aged(result["present_runs"][run_id]["updated"], runs[run_id]["end"])
        and any(start > result["backdated"][run_id] for start in retention_starts)
    ]
    assert not stale, (
        f"{len(stale)} task runs outlived a retention run: {_story(result, stale[:5], retention)}"
    )
    assert len(result["present_runs"]) < len(runs)
    waits = [info["start"] - info["created"] for info in retention if info["start"] is not None]
    scenario.metrics["retention_wait_max_s"] = round(max(waits), 1)
    scenario.metrics["runs_aged_again"] = result["backdated_again"]
    scenario.check(
        f"run retention deleted {r.runs_deleted} runs: every task run aged before a retention "
        "run started, none left"
    )


def _story(result: Mapping[str, Any], run_ids: list[str], retention: list[dict[str, Any]]) -> str:
    """When each run ended, was backdated and last updated, and when retention ran (s)."""
    t0 = result["t0"]
    lines = []
    for run_id in run_ids:
        info = result["runs"][run_id]
        left = result["present_runs"][run_id]
        aged = result["backdated"].get(run_id, float("nan"))
        lines.append(
            f"{run_id}: ended {info['end'] - t0:.0f}, backdated {aged:.0f}, "
            f"updated {left['updated'] - t0:.0f}, reported {left['reported']}"
        )
    times = sorted(
        (info["created"], info["start"] or t0, info["end"] or t0, info["status"])
        for info in retention
    )
    lines.append(
        "retention runs (created, started, ended, status): "
        + ", ".join(f"({c - t0:.0f}, {s - t0:.0f}, {e - t0:.0f}, {st})" for c, s, e, st in times)
    )
    return "; ".join(lines)
