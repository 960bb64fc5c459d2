"""Scenario 10 (databases): PostgreSQL restarted under a real ``dagster-daemon`` (issue 29).

Dagster's instance database and the Polaris metastore each live, for the test
that restarts them, on a PostgreSQL server of the test's own
(tests/support/private_postgres.py): restarting the machine's server would also
restart every other test's database, so these tests need no ``serial`` marker
and run beside the rest. What each proves is tests/support/daemon_faults.py's
end state (see test_daemon_faults.py), plus what the fault must not cost.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRunStatus

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import TaskPolicy
from tests.reliability import journal as jr
from tests.reliability.harness import RelDb, Scenario
from tests.support import private_postgres
from tests.support.daemon_faults import (
    FaultDaemon,
    abandoned_lineages,
    attempts_per_task,
    check_backlog,
    failure_reasons,
    fault_daemons,
    op_retries,
    slow_backlog,
    wait_quietly,
)
from tests.support.daemon_fixtures import metastore_for
from tests.support.private_postgres import PrivatePostgres

LEASE_MS = 30_000
# Longer than dagster-postgres's own reconnection attempts last, so some runs fail.
DAGSTER_DOWN_S = 15.0
METASTORE_DOWN_S = 10.0
# What a client of a PostgreSQL server that went away logs (psycopg 2 and 3).
CONNECTION_LOST = (
    r"OperationalError|could not connect|server closed the connection|terminating connection"
    r"|[Cc]onnection refused|connection failed|consuming input failed"
)

needs_private_server = pytest.mark.skipif(
    not private_postgres.available(),
    reason="a private PostgreSQL server needs root, runuser and /usr/lib/postgresql/*/bin",
)


@pytest.fixture
def fault_daemon(tmp_path: Path) -> Iterator[Callable[..., FaultDaemon]]:
    with fault_daemons(tmp_path) as start:
        yield start


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as pg:
        yield pg


def _runs_started(daemon: FaultDaemon, at_least: int) -> bool:
    statuses = Counter(daemon.run_statuses().values())
    return statuses[DagsterRunStatus.STARTED] >= at_least


def _runs_recovered(daemon: FaultDaemon, scenario: Scenario, events: list[dict[str, Any]]) -> None:
    """Record the runs and why they failed; assert no lineage that leased a task gave up."""
    runs = daemon.runs()
    failed = [r for r in runs if r.status is DagsterRunStatus.FAILURE]
    scenario.metrics["runs_by_status"] = dict(Counter(r.status.value for r in runs))
    scenario.metrics["run_retries"] = sum(1 for r in runs if r.tags.get("dagster/parent_run_id"))
    scenario.metrics["runs_with_a_relaunched_key"] = sum(
        ":again:" in (r.tags.get("dagster/run_key") or "") for r in runs
    )
    scenario.metrics["why_runs_failed"] = failure_reasons(daemon, failed)
    scenario.metrics["steps_retried_inside_their_run"] = op_retries(daemon, runs)
    abandoned = abandoned_lineages(runs, events)
    assert not abandoned, daemon.diagnose()
    scenario.check(
        "every run that failed after leasing a task has a run retry in its lineage that "
        "finished the task; the other failed runs had leased nothing, and the sweeper asked "
        "for their tasks again"
    )


def _lines_matching(log: Path, offset: int, pattern: str) -> int:
    """Lines of the daemon's log (its runs' and code server's output too) after ``offset``
    that match ``pattern``."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return sum(1 for line in text.splitlines() if re.search(pattern, line))


# ------------------------------------------------- 3. Dagster's own PostgreSQL restarted


@needs_private_server
@pytest.mark.slow
@pytest.mark.scenario(10, "Daemon faults: Dagster's PostgreSQL restarted with runs in flight")
def test_dagster_database_restarted_with_runs_in_flight(
    rel_db: RelDb,
    private_pg: PrivatePostgres,
    fault_daemon: Callable[..., FaultDaemon],
    scenario: Scenario,
    tmp_path: Path,
) -> None:
    n = 10
    backlog, plan = slow_backlog(tmp_path, n, files_each=6, delay_s=0.3)
    store = metastore_for(rel_db.url, lease_timeout_ms=LEASE_MS)
    store.insert_tasks(backlog.tasks)
    scenario.load = (
        f"{n} orphaned BATCH_FILE_CLEANUP tasks (6 files each, 0.3 s per delete) in a "
        "PostgreSQL metastore; dagster-daemon with Dagster's instance (runs, event logs, "
        "sensor ticks) on a PostgreSQL server of its own"
    )
    scenario.fault = (
        f"Dagster's PostgreSQL server stopped (`pg_ctl stop -m fast`: every session "
        f"ended) while runs are in flight, down {DAGSTER_DOWN_S:.0f} s, started again"
    )
    daemon = fault_daemon(
        metastore_url=rel_db.url,
        postgres=private_pg.dagster_env(),
        lease_timeout_ms=LEASE_MS,
        extra_env={"PP_REL_FAULT_PLAN": str(plan)},
    )
    daemon.wait_for(lambda: _runs_started(daemon, 2), timeout_s=240, what="runs in flight")
    scenario.metrics["tasks_left_at_the_restart"] = store.count_tasks()
    log_before = daemon.log_path.stat().st_size
    scenario.metrics["restart_seconds"] = round(private_pg.restart(DAGSTER_DOWN_S), 1)
    # The test's own view of the instance holds connections the restart ended.
    daemon.instance.dispose()
    daemon._instance = None

    deadline = time.monotonic() + 300
    dead = 0
    while store.count_tasks() and time.monotonic() < deadline:
        _, rows = store.tasks_with_state()
        dead = max(dead, sum(state.value == "dead" for _, state in rows))
        time.sleep(1)
    wait_quietly(lambda: daemon.wait_runs_finished(timeout_s=5), timeout_s=180)
    events = check_backlog(scenario, daemon, store, backlog)
    _runs_recovered(daemon, scenario, events)
    felt = _lines_matching(daemon.log_path, log_before, CONNECTION_LOST)
    scenario.metrics["daemon_log_lines_on_the_lost_connection"] = felt
    assert felt, "the daemon never noticed the restart"
    scenario.check("the restart was felt: the daemon logged the lost connections")
    attempts = attempts_per_task(events)
    spent = {task: max(a) for task, a in attempts.items()}
    scenario.metrics["attempts_spent"] = dict(Counter(spent.values()))
    scenario.losses(
        tasks_dead_lettered=dead,
        attempts_spent_on_dagster_outage=sum(v - 1 for v in spent.values()),
    )
    assert dead == 0
    assert set(spent.values()) == {1}, spent
    scenario.check(
        "no task spent an attempt towards dead-letter on Dagster's outage: every task was "
        "done on its first attempt (a retried run adopts its lineage's lease; a run that "
        "never reached the metastore leased nothing)"
    )


# ------------------------------------------------- 4. the metastore's PostgreSQL restarted


@needs_private_server
@pytest.mark.slow
@pytest.mark.scenario(10, "Daemon faults: the metastore's PostgreSQL restarted under the daemon")
def test_metastore_database_restarted_under_the_daemon(
    dagster_pg_env: dict[str, str],
    private_pg: PrivatePostgres,
    fault_daemon: Callable[..., FaultDaemon],
    scenario: Scenario,
    tmp_path: Path,
) -> None:
    n = 10
    url = private_pg.url()
    Metastore(url).init_schema()
    backlog, plan = slow_backlog(tmp_path, n, files_each=6, delay_s=0.3)
    store = metastore_for(url, lease_timeout_ms=LEASE_MS)
    store.insert_tasks(backlog.tasks)
    scenario.load = (
        f"{n} orphaned BATCH_FILE_CLEANUP tasks (6 files each, 0.3 s per delete) in a "
        "metastore on a PostgreSQL server of its own; dagster-daemon with Dagster's "
        "instance on dagster-postgres"
    )
    scenario.fault = (
        f"the metastore's PostgreSQL server stopped (`pg_ctl stop -m fast`) while runs "
        f"are in flight, down {METASTORE_DOWN_S:.0f} s, started again"
    )
    daemon = fault_daemon(
        metastore_url=url,
        postgres=dagster_pg_env,
        lease_timeout_ms=LEASE_MS,
        extra_env={"PP_REL_FAULT_PLAN": str(plan)},
    )
    daemon.wait_for(lambda: _runs_started(daemon, 2), timeout_s=240, what="runs in flight")
    scenario.metrics["tasks_left_at_the_restart"] = store.count_tasks()
    log_before = daemon.log_path.stat().st_size
    scenario.metrics["restart_seconds"] = round(private_pg.restart(METASTORE_DOWN_S), 1)
    store.dispose()
    store = metastore_for(url, lease_timeout_ms=LEASE_MS)
    daemon.wait_for(
        lambda: wait_quietly(lambda: store.count_tasks() == 0, timeout_s=1),
        timeout_s=300,
        what="every task to be done",
    )
    daemon.wait_runs_finished(timeout_s=180)
    events = check_backlog(scenario, daemon, store, backlog)
    _runs_recovered(daemon, scenario, events)
    # Who felt it depends on where each process was when the server went: the daemon's
    # log (its sensor, its runs' output), a run's event log, a sensor tick's skip reason,
    # or only a step's retry (its error wrapped in our MetastoreError's words). The
    # metastore was up before the restart, so every such line is the restart's.
    felt = _lines_matching(daemon.log_path, log_before, CONNECTION_LOST)
    in_runs = sum(
        len(re.findall(CONNECTION_LOST, daemon.run_log(run.run_id))) for run in daemon.runs()
    )
    in_ticks = sum(
        bool(re.search(CONNECTION_LOST, f"{t.skip_reason or ''} {t.error or ''}"))
        for t in daemon.sensor_ticks()
    )
    scenario.metrics["daemon_log_lines_on_the_lost_connection"] = felt
    scenario.metrics["run_log_lines_on_the_lost_connection"] = in_runs
    scenario.metrics["sensor_ticks_on_the_lost_connection"] = in_ticks
    # A tick during the outage says the metastore is out of reach, never that the
    # configuration is wrong: an operator reading "configuration error" would go and
    # change a configuration that is right.
    reasons = [t.skip_reason or "" for t in daemon.sensor_ticks()]
    scenario.metrics["sensor_ticks_saying_metastore_unreachable"] = sum(
        r.startswith("metastore unreachable") for r in reasons
    )
    misread = [r for r in reasons if r.startswith("configuration error")]
    assert not misread, misread[:3]
    # A step retried inside its run failed on something; the metastore is the one fault.
    retried = int(scenario.metrics["steps_retried_inside_their_run"])
    assert felt + in_runs + in_ticks + retried, "nobody noticed the restart"
    scenario.check(
        "the restart was felt: steps were retried inside their runs, or the daemon's log, "
        "a run's event log or a sensor tick names the lost connection; no tick called the "
        "outage a configuration error"
    )
    attempts = attempts_per_task(events)
    spent = Counter(max(a) for a in attempts.values())
    scenario.metrics["tasks_by_attempts_spent"] = {str(k): v for k, v in sorted(spent.items())}
    dead = [e for e in jr.of_kind(events, "outcome") if e.get("status") == "dead"]
    scenario.losses(tasks_dead_lettered=len(dead))
    assert not dead, dead[:3]
    assert max(spent) < TaskPolicy().max_attempts, spent
    scenario.check(
        "no task was dead-lettered: each finished within the default attempt budget, "
        "whether its run rode out the restart (op retries under the same lease) or failed "
        "and was run again"
    )
