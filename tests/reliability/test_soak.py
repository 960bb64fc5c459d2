"""Scenario 11: the soak, short: a Polaris-like writer for two minutes while the deployment sweeps.

``bench/soak.py``'s soak at CI size: a real ``dagster-daemon run`` with the
repository's code location over a PostgreSQL metastore and a dagster-postgres
instance (both databases made for this test), the writer of
``tests/support/polaris_writer.py`` (dropped pyiceberg tables, purges a Polaris
executor died in, batch and manifest orphans, hostile rows) one event every five
seconds, then a drain. Run retention is on (one day, every minute), each
finished run backdated by a day 30 s after it ended (``bench/soak.py`` says why).
The published 30-minute run and its figures are in docs/soak.md.

It asserts what the published run states: every task the writer created is done
(nothing lost, no file outside a table deleted), none dead but the hostile rows,
which are refused or left unhandled with their rows kept; no two holders on one
task at the same time (the rows' executor history, read once a second); and the
retention kept Dagster's runs bounded: it deleted runs, and no task run older
than the retention age plus two schedule ticks is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from bench.soak import SoakConfig, run_soak
from bench.soak_stats import invariant_problems, latency_figures, rows
from tests.reliability.harness import RelDb, Scenario
from tests.support.daemon import TASK_JOB

CONFIG = SoakConfig(
    instance="postgres",
    minutes=2.0,
    event_interval_s=5.0,
    lease_timeout_ms=20_000,
    grace_ms=5_000,
    retention_age_s=30.0,
    # A bound, not a wait: the drain ends as soon as only hostile rows are left; on a
    # loaded host the last queued runs need more than a quiet host's two minutes.
    drain_s=360.0,
    sample_s=3.0,
    db_sample_s=10.0,
)
# A finished run may stay this long: its age, a schedule tick a minute, the
# retention run's own start and work on a loaded host.
RETENTION_SLACK_S = 150.0


@pytest.mark.slow
@pytest.mark.timeout(900)
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
    assert by_state == {"done": final["writer_tasks"]}, (by_state, result["daemon"])
    assert final["children_seen"] > 0 and final["children_left"] == 0
    scenario.check("after the drain every task is done, the children the runs created too")

    hostile = final["hostile_by_state"]
    assert final["hostile_rows"] > 0
    assert sum(hostile.values()) == final["hostile_rows"]
    assert set(hostile) <= {"dead", "backing-off", "unhandled"}, hostile
    scenario.check("hostile rows end refused (dead or backing off) or unhandled, rows kept")

    assert r.first_deletion_s is not None and r.runs_deleted > 0, r
    runs = result["runs"]
    stale = [
        run_id
        for run_id in result["present_runs"]
        if runs.get(run_id, {}).get("job") == TASK_JOB
        and runs[run_id]["end"] is not None
        and result["ended_at"] - runs[run_id]["end"] > CONFIG.retention_age_s + RETENTION_SLACK_S
    ]
    assert not stale, f"{len(stale)} task runs outlived the retention: {stale[:5]}"
    assert len(result["present_runs"]) < len(runs)
    scenario.check(
        f"run retention deleted {r.runs_deleted} runs; none older than its age plus "
        f"{RETENTION_SLACK_S:.0f} s is left"
    )
