"""Scenario 4: PostgreSQL connections killed mid-sweep, and a real PostgreSQL restart."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

import pytest

from builders.tasks import batch_task
from polaris_pipeline.metastore import CompleteOutcome, Metastore
from polaris_pipeline.tasks.ref import Lease
from tests.reliability import journal as jr
from tests.reliability.harness import (
    SIZES,
    PgRole,
    RelDb,
    Scenario,
    Worker,
    Workers,
    iter_chunks,
    left_over,
    list_tree,
    pg_restart_enabled,
    policy_dict,
    rel_policy,
    touch_all,
    wait_for,
)

REALMS = ["r1", "r2", "r3"]
# A log line of the engine (cli.main's logging format) or the CLI's one-line error.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (WARNING|ERROR|INFO) [\w.]+: ")
ERROR_LINE = "polaris-pipeline: error: "
# The CLI's one-line warnings (no storage config bounding the deletes, an untested release).
WARNING_LINE = "polaris-pipeline: warning: "


class Delay(TypedDict):
    """Every delete takes ``seconds`` more (worker.install_journal)."""

    seconds: float


class SweeperConfig(TypedDict):
    """The worker settings (tests/reliability/worker.py) the three sweepers share."""

    url: str
    policy: dict[str, Any]
    deadline_s: int
    batch_size: int
    delay: Delay


def _seed(store: Metastore, root: Path, n: int) -> tuple[set[str], list[Any]]:
    expected: set[str] = set()
    tasks = []
    for i in range(n):
        realm = REALMS[i % len(REALMS)]
        table = root / realm / f"t{i}"
        files = [table / "metadata" / f"f{k}.avro" for k in range(2)]
        touch_all(files)
        uris = [f"file://{f}" for f in files]
        expected.update(uris)
        tasks.append(
            batch_task(
                realm, uris, internal={"storageLocation": f"file://{table}"}, create_timestamp=0
            )
        )
    for chunk in iter_chunks(tasks, 1000):
        store.insert_tasks(chunk)
    return expected, tasks


def _stderr_problems(stderr: list[str], stdout: list[str], role: PgRole) -> list[str]:
    """Printed passwords, and stderr lines that are neither a one-line log record nor the
    CLI's one-line error or warning."""
    problems = []
    for text in stderr + stdout:
        for secret in role.spellings():
            if secret in text:
                problems.append(f"password {secret!r} printed")
    for text in stderr:
        for line in text.splitlines():
            if not line.strip() or line.startswith("worker: metastore error: metastore "):
                continue
            if LOG_LINE.match(line) or line.startswith((ERROR_LINE, WARNING_LINE)):
                continue
            problems.append(line[:300])
    return problems


def _verify(
    scenario: Scenario,
    store: Metastore,
    root: Path,
    expected: set[str],
    events: list[dict[str, Any]],
    stderr: list[str],
    stdout: list[str],
    role: PgRole,
) -> None:
    dels = jr.deletions(events)
    left = expected & list_tree(root)
    foreign = {d.uri for d in dels if d.result == "deleted"} - expected
    concurrent = jr.concurrent_holders(dels)
    errors = [e.get("error") or "" for e in jr.of_kind(events, "outcome")]
    leaked = [e for e in errors if any(s in e for s in role.spellings())]
    problems = _stderr_problems(stderr, stdout, role)
    remaining = store.count_tasks()
    scenario.losses(
        tasks_lost=remaining,
        files_left_behind=len(left),
        files_wrongly_deleted=len(foreign),
        concurrent_holders=len(concurrent),
        unclear_or_secret_error_lines=len(problems) + len(leaked),
    )
    statuses = Counter(e["status"] for e in jr.of_kind(events, "outcome"))
    scenario.metrics["attempt_outcomes"] = dict(statuses)
    scenario.metrics["tasks_run_by_more_than_one_lease"] = sum(
        1 for h in jr.holders_per_task(dels).values() if len(h) > 1
    )
    assert remaining == 0 and not left
    scenario.check("every task finished: the table is empty and every listed file is gone")
    assert not foreign
    scenario.check("nothing outside the tasks' lists was deleted")
    assert not concurrent, concurrent[:3]
    scenario.check("no two holders of one task deleted at overlapping times")
    assert not problems, problems[:10]
    assert not leaked, leaked[:3]
    scenario.check(
        "every stderr line is a one-line log record or the CLI's one-line error; no "
        "traceback; the password (raw or URL-encoded) appears nowhere, nor in task errors"
    )


@pytest.mark.scenario(4, "Database faults: connections killed with pg_terminate_backend")
def test_killed_connections_mid_sweep(
    rel_db: RelDb, pg_role: PgRole, workers: Workers, scenario: Scenario, tmp_path: Path
) -> None:
    n = SIZES.db_fault_tasks
    policy = rel_policy(lease_timeout_ms=3_000)
    store = Metastore(rel_db.url, policy=policy)
    root = tmp_path / "wh"
    expected, _ = _seed(store, root, n)
    scenario.load = (
        f"{n} BATCH_FILE_CLEANUP tasks ({len(expected)} local files, {len(REALMS)} realms); "
        "3 sweeper processes (Runner.sweep loops, 4 ms per delete) connecting as a role "
        "with a password"
    )
    scenario.fault = (
        f"up to {SIZES.db_kills} rounds of pg_terminate_backend on every connection of the "
        "database, 0.3 s apart, while the sweep runs (each sweeper re-creates its runner "
        "after a metastore error, as a re-run would)"
    )
    common: SweeperConfig = {
        "url": pg_role.url,
        "policy": policy_dict(policy),
        "deadline_s": 240,
        "batch_size": 8,
        "delay": {"seconds": 0.004},
    }
    for k in range(3):
        workers.start(f"sweeper-{k}", "runner", **common)
    wait_for(lambda: n - store.count_tasks() >= n // 10, 120, what="the sweep to get going")
    killed: list[int] = []
    while len(killed) < SIZES.db_kills and store.count_tasks() > 0:
        killed.append(rel_db.terminate_connections())
        time.sleep(0.3)
    scenario.metrics["connections_killed"] = sum(killed)
    scenario.metrics["tasks_left_when_faults_stopped"] = store.count_tasks()
    for w in workers.started:
        assert w.wait(240) == 0, left_over(store) + "\n" + w.stderr()[-2000:]
    scenario.metrics["kill_rounds"] = len(killed)
    # The faults really hit live connections, many times over.
    assert sum(killed) >= min(SIZES.db_kills, 6), killed
    scenario.metrics["metastore_errors_seen_by_sweepers"] = len(
        jr.of_kind(workers.events(), "error")
    )
    _verify(
        scenario,
        store,
        root,
        expected,
        workers.events(),
        [w.stderr() for w in workers.started],
        [w.stdout() for w in workers.started],
        pg_role,
    )


def _cluster() -> tuple[str, str] | None:
    if not shutil.which("pg_ctlcluster") or os.geteuid() != 0:
        return None
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    return (versions[-1], "main") if versions else None


def _pg_ready() -> bool:
    return (
        subprocess.run(
            ["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"], check=False, timeout=10
        ).returncode
        == 0
    )


@pytest.mark.serial
@pytest.mark.scenario(4, "Database faults: a real PostgreSQL restart mid-sweep")
def test_postgres_restart_mid_sweep(
    rel_db: RelDb, pg_role: PgRole, workers: Workers, scenario: Scenario, tmp_path: Path
) -> None:
    cluster = _cluster()
    if cluster is None or not pg_restart_enabled():
        pytest.skip("needs root and pg_ctlcluster (or PP_RELIABILITY_PG_RESTART=0 was set)")
    n = max(60, SIZES.db_fault_tasks // 4)
    lease_ms = 2_000
    policy = rel_policy(lease_timeout_ms=lease_ms)
    store = Metastore(rel_db.url, policy=policy)
    root = tmp_path / "wh"
    expected, _ = _seed(store, root, n)
    scenario.load = (
        f"{n} BATCH_FILE_CLEANUP tasks ({len(expected)} files); two loops of "
        "`polaris-pipeline sweep` (the CLI, 10 ms per delete), each re-run as soon as "
        "it exits, until no task is left"
    )
    scenario.fault = (
        f"`pg_ctlcluster {cluster[0]} {cluster[1]} restart` while both sweeps run; "
        f"lease timeout {lease_ms} ms"
    )
    argv = [
        "sweep",
        "--metastore",
        pg_role.url,
        "--lease-timeout-ms",
        str(lease_ms),
        "--grace-ms",
        "0",
        "--batch-size",
        "4",
    ]
    runs: list[Worker] = []
    lock = threading.Lock()
    stop = threading.Event()

    def loop(name: str) -> None:
        while not stop.is_set():
            with lock:
                w = workers.start(name, "cli", argv=argv, delay={"seconds": 0.01})
                runs.append(w)
            w.wait(240)
            try:
                if store.count_tasks() == 0:
                    return
            except Exception:
                time.sleep(0.5)  # the database is restarting

    threads = [threading.Thread(target=loop, args=(f"cli-{k}",)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: n - store.count_tasks() >= n // 5, 120, what="the sweep to get going")
        left_before = store.count_tasks()
        started = time.monotonic()
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "restart"],
            check=True,
            timeout=120,
            capture_output=True,
        )
        wait_for(_pg_ready, 120, interval=0.2, what="PostgreSQL to accept connections")
        scenario.metrics["restart_seconds"] = round(time.monotonic() - started, 1)
        scenario.metrics["tasks_left_at_restart"] = left_before
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads)
    finally:
        stop.set()
        if not _pg_ready():
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "start"],
                check=False,
                timeout=120,
            )
        for t in threads:
            t.join(timeout=60)
    codes = Counter(w.proc.returncode for w in runs)
    scenario.metrics["cli_runs_by_exit_code"] = {str(k): v for k, v in sorted(codes.items())}
    error_lines = sorted(
        {
            re.sub(r"\d+", "N", line)
            for w in runs
            for line in w.stderr().splitlines()
            if line.startswith(ERROR_LINE)
        }
    )
    scenario.metrics["cli_error_lines"] = error_lines[:5]
    assert codes.get(2, 0) + codes.get(1, 0) >= 1, codes  # the restart was felt
    scenario.check("the restart was felt: at least one CLI run ended with an error exit code")
    _verify(
        scenario,
        store,
        root,
        expected,
        workers.events(),
        [w.stderr() for w in runs],
        [w.stdout() for w in runs],
        pg_role,
    )


@pytest.mark.scenario(
    4, "Database faults: a metastore error escapes Runner.sweep, the Runner lives on"
)
def test_runner_surviving_a_metastore_error_lets_the_task_be_retried(
    rel_db: RelDb, scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived process (an embedding service, a custom loop) keeps its Runner after
    ``sweep()`` raised. The task whose result could not be written must become available
    again within a lease period, not stay leased for as long as the process lives."""
    from polaris_pipeline.errors import MetastoreError
    from polaris_pipeline.execution.runner import Runner
    from polaris_pipeline.execution.sweep import sweep_tasks

    policy = rel_policy()
    store = Metastore(rel_db.url, policy=policy)
    root = tmp_path / "wh"
    expected, _ = _seed(store, root, 3)
    scenario.if_failed += [
        "Cause: the heartbeat renews every lease of the Runner's executor id "
        "(`renew_held_by`). When `sweep()` raises, the attempt whose result failed to "
        "write and the rest of the leased batch stay held by that id and are renewed for "
        "as long as the Runner lives, so neither this Runner nor anyone else runs them. "
        "(The CLI exits on the error, so its leases lapse; a long-lived caller is stuck.)",
        "Proposed fix: when an exception escapes `execute_tree` in `Runner.sweep`, stop "
        "the heartbeat and continue under a new executor id (or have the heartbeat renew "
        "only the leases the Runner still tracks as in progress or queued, dropping the "
        "batch on error), so the abandoned leases lapse after one lease timeout.",
    ]
    scenario.load = "3 BATCH_FILE_CLEANUP tasks, one Runner in this process (2 s leases)"
    scenario.fault = (
        "the metastore fails once while the first task's result is written (the error "
        "`_begin` raises for a dropped connection); the caller keeps the Runner and sweeps on"
    )
    real_complete = store.complete
    failures: list[Lease] = []

    def complete_once_failing(lease: Lease) -> CompleteOutcome:
        if not failures:
            failures.append(lease)
            raise MetastoreError("metastore postgresql: server closed the connection unexpectedly")
        return real_complete(lease)

    monkeypatch.setattr(store, "complete", complete_once_failing)
    runner = Runner(store)
    try:
        with pytest.raises(MetastoreError):
            sweep_tasks(runner)
        deadline = time.monotonic() + 6 * policy.lease_timeout_ms / 1000
        while store.count_tasks() and time.monotonic() < deadline:
            sweep_tasks(runner)
            time.sleep(0.2)
        stuck = store.list_tasks()
    finally:
        runner.close()
    scenario.losses(
        tasks_stuck_while_the_runner_lives=len(stuck),
        files_left_behind=len(expected & list_tree(root)),
    )
    scenario.metrics["seconds_waited"] = round(6 * policy.lease_timeout_ms / 1000, 1)
    assert not stuck, (
        f"{len(stuck)} of 3 task(s) still leased by the same Runner after "
        f"{6 * policy.lease_timeout_ms} ms: its heartbeat keeps renewing every lease it "
        "took, including the one whose result failed to write and those of the same batch "
        f"that sweep() never reached (executor {stuck[0].executor_id})"
    )
    scenario.check(
        "the task whose result failed to write, and the rest of its batch, became available "
        "again and were finished by the same long-lived Runner"
    )
    assert not (expected & list_tree(root))
    scenario.check("the files of every task were deleted")
