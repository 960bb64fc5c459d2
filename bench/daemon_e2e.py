"""Through a real ``dagster-daemon``: a mixed backlog, a 2,000-child table, Dagster's floor.

Everything goes the deployed way: ``dagster-daemon run`` over a temporary
instance (QueuedRunCoordinator, DefaultRunLauncher: one process per run, run
retries, run monitoring), the repository's code location, a PostgreSQL
metastore, real files in a local warehouse. The daemon is started first and the
clock runs from the moment the tasks are in the metastore (the code location is
already loaded) until the metastore holds none.

Phases, each with a fresh metastore and a fresh instance:

- **mixed**: one realm holding dropped pyiceberg tables (their manifest and
  batch children created and run inside the table's run), tables whose purge
  died leaving orphaned children (parent row gone), and independent BATCH
  tasks; on a SQLite instance and on dagster-postgres, straight to PostgreSQL
  and through PgBouncer configured from ``deploy/pgbouncer/``;
- **fan-out**: one table whose purge left 2,000 orphaned manifest children;
- **queue** (issue 18): BATCH tasks of one file behind ``max_concurrent_runs: 2``;
- **floor**: a trivial one-op job, requested by a sensor once per task, through
  the same daemon, queue and launcher (``bench/daemon_floor_location.py``); a
  second time in process, as many runs as the SQLite backlog took, which is the
  fastest any job could drain that backlog here.

Per run: the time from start to end in the run storage; per task: the lease
attempts the runs' step outputs report (a task's root output, or its group's).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import temp_database
from bench.proc_cpu import ProcessCpu
from bench.report import BenchResult, Figure, fmt
from builders.orphans import orphaned_batch, orphaned_children, touch_files

TITLE = "1. Through dagster-daemon: a mixed backlog, a 2,000-child table, Dagster's floor"
REALM = "POLARIS"
OLD_MS = 3_600_000
FULL: dict[str, int] = {
    "dropped_tables": 200,
    "orphan_tables": 20,
    "children_each": 30,
    "batch": 200,
    "fanout_children": 2_000,
    "queue_tasks": 80,
    "queue_lease_ms": 60_000,
    "floor_runs": 40,
    "concurrent_runs": 4,
    "sweep_interval_s": 5,
    "deadline_s": 900,
    "fanout_deadline_s": 360,
}
# A tenth, with deadlines that keep a run of `--quick` within a few minutes: a
# phase that is cut short reports what it finished and says so.
QUICK: dict[str, int] = {
    "dropped_tables": 20,
    "orphan_tables": 2,
    "children_each": 30,
    "batch": 20,
    "fanout_children": 200,
    "queue_tasks": 16,
    "queue_lease_ms": 20_000,
    "floor_runs": 8,
    "concurrent_runs": 4,
    "sweep_interval_s": 5,
    "deadline_s": 150,
    "fanout_deadline_s": 90,
}
LEASE_MS = 300_000  # the production default


# ------------------------------------------------------------------ fixtures


def dropped_table_tasks(root: Path, n: int, created: int) -> list[Any]:
    """``n`` small dropped pyiceberg tables (one append each) and their drop tasks."""
    from builders import tables as built_tables
    from builders import tasks as built_tasks

    warehouse = built_tables.local_warehouse_uri(root / "wh")
    catalog = built_tables.open_catalog(warehouse, root / "catalog.db", name="bench")
    tasks = []
    for i in range(n):
        table = built_tables.build_table(catalog, ("ns", f"dropped_{i}"), appends=1)
        tasks.append(built_tasks.drop_table_task(table, realm_id=REALM, create_timestamp=created))
    return tasks


def batch_tasks(root: Path, n: int, created: int) -> list[Any]:
    """``n`` independent BATCH tasks of 5 files each, their parent row gone."""
    tasks = []
    for i in range(n):
        location = root / "wh" / "ns" / f"batch_{i}"
        files = touch_files(location / "metadata", 5)
        tasks.append(
            orphaned_batch(REALM, location, f"batch_{i}", files, f"entityCleanup_b{i}", created)
        )
    return tasks


def insert_all(store: Any, tasks: list[Any]) -> None:
    for start in range(0, len(tasks), 500):
        store.insert_tasks(tasks[start : start + 500])


def seed_mixed(root: Path, store: Any, size: dict[str, int]) -> dict[str, int]:
    """The mixed backlog (see the module docstring); returns its counts."""
    created = store.now_ms() - OLD_MS
    tasks = dropped_table_tasks(root, size["dropped_tables"], created)
    for i in range(size["orphan_tables"]):
        tasks += orphaned_children(
            REALM, root / "wh", f"orphans_{i}", size["children_each"], created
        )
    tasks += batch_tasks(root, size["batch"], created)
    insert_all(store, tasks)
    return {
        "tasks": len(tasks),
        "dropped_tables": size["dropped_tables"],
        "orphaned_children": size["orphan_tables"] * size["children_each"],
        "orphan_tables": size["orphan_tables"],
        "batch": size["batch"],
    }


def files_left(root: Path) -> int:
    return sum(1 for p in (root / "wh").rglob("*") if p.is_file())


# ------------------------------------------------------------------ measuring


@contextlib.contextmanager
def _metastore() -> Iterator[tuple[str, Any]]:
    from polaris_pipeline.metastore import Metastore
    from polaris_pipeline.tasks.model import TaskPolicy

    with temp_database("daemon_metastore") as url:
        store = Metastore(url, policy=TaskPolicy(lease_timeout_ms=LEASE_MS, grace_ms=0))
        store.init_schema()
        try:
            yield url, store
        finally:
            store.dispose()


def _started(daemon: Any, sensor: str, timeout_s: float = 180) -> None:
    """Wait for the sensor's first tick: the code location is loaded."""
    daemon.wait_for(
        lambda: daemon.sensor_ticks(sensor, limit=1), timeout_s=timeout_s, what="a first tick"
    )


def _wait_empty(daemon: Any, store: Any, deadline_s: float) -> tuple[float, bool]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if store.count_tasks() == 0:
            return time.monotonic() - t0, True
        time.sleep(1)
    return time.monotonic() - t0, False


def _leases_reported(daemon: Any, run_id: str) -> list[dict[str, Any]]:
    """(task id, attempt, status) of every task a run's steps report on."""
    from dagster import DagsterEventType

    out = []
    for record in daemon.instance.all_logs(run_id, of_type=DagsterEventType.STEP_OUTPUT):
        event = record.dagster_event
        if event is None:
            continue
        meta = {k: getattr(v, "value", v) for k, v in event.step_output_data.metadata.items()}
        if "task id" in meta:
            out.append(
                {
                    "task": str(meta["task id"]),
                    "attempt": meta.get("lease attempt"),
                    "status": meta.get("status"),
                }
            )
        for item in meta.get("tasks") or []:
            if isinstance(item, dict) and "task id" in item:
                out.append(
                    {
                        "task": str(item["task id"]),
                        "attempt": item.get("lease attempt"),
                        "status": item.get("status"),
                    }
                )
    return out


def run_stats(daemon: Any, job_name: str) -> dict[str, Any]:
    """Runs, their durations and start latencies, and what they report per task."""
    records = daemon.run_records(job_name)
    durations = [
        r.end_time - r.start_time for r in records if r.start_time is not None and r.end_time
    ]
    latency = [
        r.start_time - r.create_timestamp.timestamp() for r in records if r.start_time is not None
    ]
    by_status: dict[str, int] = {}
    for r in records:
        by_status[r.dagster_run.status.value] = by_status.get(r.dagster_run.status.value, 0) + 1
    return {
        "records": records,
        "runs": len(records),
        "by_status": by_status,
        "median_run_s": statistics.median(durations) if durations else None,
        "median_start_latency_s": statistics.median(latency) if latency else None,
    }


def task_stats(daemon: Any, records: list[Any]) -> dict[str, Any]:
    attempts: dict[str, int] = {}
    runs_per_task: dict[str, set[str]] = {}
    lease_lost = 0
    for r in records:
        for item in _leases_reported(daemon, r.dagster_run.run_id):
            if item["status"] == "lease-lost":
                lease_lost += 1
                continue
            if isinstance(item["attempt"], int):
                attempts[item["task"]] = max(attempts.get(item["task"], 0), item["attempt"])
            runs_per_task.setdefault(item["task"], set()).add(r.dagster_run.run_id)
    return {
        "tasks_reported": len(attempts),
        "mean_attempt": statistics.mean(attempts.values()) if attempts else None,
        "max_attempt": max(attempts.values()) if attempts else None,
        "done_in_more_than_one_run": sum(1 for s in runs_per_task.values() if len(s) > 1),
        "lease_lost_reports": lease_lost,
    }


def drain_seconds(records: list[Any]) -> float | None:
    """From the first run's creation to the last run's end: the daemon's start and its
    first tick left out, which only flatters the runs measured."""
    created = [r.create_timestamp.timestamp() for r in records]
    ended = [r.end_time for r in records if r.end_time]
    return max(ended) - min(created) if created and ended else None


def tick_stats(daemon: Any, sensor: str) -> dict[str, Any]:
    ticks = daemon.sensor_ticks(sensor)
    spans = [t.end_timestamp - t.timestamp for t in ticks if t.end_timestamp]
    with_runs = [t for t in ticks if t.run_ids]
    return {
        "ticks": len(ticks),
        "with_runs": len(with_runs),
        "median_s": statistics.median(spans) if spans else None,
        "max_s": max(spans) if spans else None,
    }


def _daemon(home: Path, url: str, pg: dict[str, str] | None, **config: Any) -> Any:
    from builders.daemon import DaemonConfig, DaemonHarness

    # Run monitoring as shipped: the tests' two-second polls are not what operators run.
    return DaemonHarness(
        home, DaemonConfig(metastore_url=url, postgres=pg, fast_monitoring=False, **config)
    )


@dataclass
class InstanceDb:
    """Dagster's storage for one phase: None for SQLite, else DAGSTER_PG_* for the
    instance; ``server_sessions`` is set on exit (after the daemon and PgBouncer end)."""

    env: dict[str, str] | None
    server_sessions: int | None = None


# The instance kinds: SQLite under DAGSTER_HOME, dagster-postgres straight to
# PostgreSQL, and dagster-postgres through PgBouncer (deploy/pgbouncer/).
KINDS = {
    "sqlite": "sqlite",
    "postgres": "postgres",
    "pgbouncer": "postgres through PgBouncer",
}


@contextlib.contextmanager
def _instance_db(kind: str) -> Iterator[InstanceDb]:
    if kind == "sqlite":
        yield InstanceDb(None)
        return
    from sqlalchemy.engine import make_url

    from builders.pgbouncer import running_pgbouncer, server_sessions
    from builders.postgres import PG_ADMIN_URL

    with temp_database("daemon_dagster") as url:
        u = make_url(url)
        name = u.database or ""
        if kind == "pgbouncer":
            with running_pgbouncer(PG_ADMIN_URL, name) as bouncer:
                db = InstanceDb(bouncer.dagster_pg_env())
                yield db
        else:
            db = InstanceDb(
                {
                    "DAGSTER_PG_HOST": u.host or "127.0.0.1",
                    "DAGSTER_PG_PORT": str(u.port or 5432),
                    "DAGSTER_PG_USERNAME": u.username or "postgres",
                    "DAGSTER_PG_PASSWORD": u.password or "",
                    "DAGSTER_PG_DB": name,
                }
            )
            yield db
        db.server_sessions = server_sessions(PG_ADMIN_URL, name)


def backlog_phase(
    kind: str, name: str, size: dict[str, int], seed: Any, deadline_s: int, **config: Any
) -> dict[str, Any]:
    """Start a daemon, seed with ``seed(root, store)``, drain, measure."""
    with (
        tempfile.TemporaryDirectory(prefix=f"pp_daemon_{name}_") as tmp,
        _metastore() as (url, store),
        _instance_db(kind) as db,
    ):
        root = Path(tmp)
        daemon = _daemon(root / "home", url, db.env, **config)
        with ProcessCpu() as cpu, daemon:
            _started(daemon, "polaris_task_sweeper")
            fixture = seed(root, store)
            seconds, done = _wait_empty(daemon, store, deadline_s)
            left = store.count_tasks()
            time.sleep(2)  # the last runs write their end
            runs = run_stats(daemon, "polaris_task_job")
            records = runs.pop("records")
            tasks = task_stats(daemon, records)
            ticks = tick_stats(daemon, "polaris_task_sweeper")
            daemon.stop()
        phase = {
            "cpu": cpu.by_role(),
            "kind": kind,
            "fixture": fixture,
            "seconds": seconds,
            "drain_s": drain_seconds(records),
            "done": done,
            "tasks_left": left,
            "files_left": files_left(root),
            **runs,
            **tasks,
            "tick": ticks,
        }
    phase["server_sessions"] = db.server_sessions
    return phase


def floor_phase(kind: str, n: int, concurrent: int, executor: str | None = None) -> dict[str, Any]:
    """The trivial job's runs; ``executor`` is the floor location's (None: Dagster's default)."""
    from bench.daemon_floor_location import EXECUTOR_ENV, JOB_NAME, RUNS_ENV, SENSOR_NAME

    extra_env = {RUNS_ENV: str(n)}
    if executor is not None:
        extra_env[EXECUTOR_ENV] = executor

    with (
        tempfile.TemporaryDirectory(prefix="pp_daemon_floor_") as tmp,
        _metastore() as (url, _store),
        _instance_db(kind) as db,
    ):
        daemon = _daemon(
            Path(tmp) / "home",
            url,
            db.env,
            module="bench.daemon_floor_location",
            max_concurrent_runs=concurrent,
            extra_env=extra_env,
        )
        with ProcessCpu() as cpu, daemon:
            t0 = time.monotonic()
            runs = daemon.wait_for(
                lambda: (
                    len(daemon.runs(JOB_NAME)) >= n
                    and daemon.wait_runs_finished(timeout_s=600, job_name=JOB_NAME)
                ),
                timeout_s=900,
                what="the trivial runs",
                interval_s=1,
            )
            seconds = time.monotonic() - t0
            stats = run_stats(daemon, JOB_NAME)
            records = stats.pop("records")
            ticks = tick_stats(daemon, SENSOR_NAME)
        return {
            "seconds": seconds,
            "drain_s": drain_seconds(records),
            "runs": len(runs),
            **stats,
            "tick": ticks,
            "cpu": cpu.by_role(),
        }


# ------------------------------------------------------------------ the benchmark


def _mixed_seed(size: dict[str, int]) -> Any:
    return lambda root, store: seed_mixed(root, store, size)


def _fanout_seed(n: int) -> Any:
    def seed(root: Path, store: Any) -> dict[str, int]:
        created = store.now_ms() - OLD_MS
        tasks = orphaned_children(REALM, root / "wh", "fanout", n, created)
        insert_all(store, tasks)
        return {"tasks": len(tasks)}

    return seed


def _queue_seed(n: int) -> Any:
    def seed(root: Path, store: Any) -> dict[str, int]:
        created = store.now_ms() - OLD_MS
        tasks = []
        for i in range(n):
            location = root / "wh" / "ns" / f"q{i}"
            files = touch_files(location, 1)
            tasks.append(
                orphaned_batch(REALM, location, f"q{i}", files, f"entityCleanup_q{i}", created)
            )
        store.insert_tasks(tasks)
        return {"tasks": n}

    return seed


def cpu_per_run(e: dict[str, Any]) -> float | None:
    """CPU seconds of one run's own process, on average."""
    run = e["cpu"].get("run")
    return run["cpu_s"] / e["runs"] if run and e["runs"] else None


def _service_cpu(e: dict[str, Any]) -> float:
    """CPU seconds of the daemon and the code server over the phase."""
    return sum(e["cpu"].get(role, {}).get("cpu_s", 0.0) for role in ("daemon", "code server"))


def _all_cpu(e: dict[str, Any]) -> float:
    """CPU seconds of every process the phase started (the daemon's start included)."""
    return sum(role["cpu_s"] for role in e["cpu"].values())


def _per_min(e: dict[str, Any]) -> float:
    done = e["fixture"]["tasks"] - e["tasks_left"]
    return done / (e["seconds"] / 60) if e["seconds"] else 0.0


def _ceiling(what: str, cpu_per_run: float, tasks_per_run: float, cores: int, why: str) -> Figure:
    """The mixed backlog's rate if every run cost ``cpu_per_run`` on ``cores`` cores."""
    rate = cores * 60 / cpu_per_run * tasks_per_run
    return Figure(
        f"Dagster's ceiling for the mixed backlog, {what} (sqlite)",
        rate,
        "tasks/min",
        target=">= 100 tasks/min, or no job reaches the target here",
        met=rate >= 100,
        why=why,
    )


def _sessions_text(e: dict[str, Any]) -> str:
    """PostgreSQL sessions on Dagster's database over the phase, when it had one."""
    n = e.get("server_sessions")
    if n is None:
        return ""
    per_run = f", {n / e['runs']:.1f} per run" if e["runs"] else ""
    return f"; PostgreSQL sessions on Dagster's database: {n:,}{per_run}"


def _summary(e: dict[str, Any]) -> str:
    return (
        f"{e['fixture']['tasks'] - e['tasks_left']:,} of {e['fixture']['tasks']:,} tasks in "
        f"{e['seconds']:.0f} s{'' if e['done'] else ' (deadline reached)'}; "
        f"{e['runs']:,} runs ({', '.join(f'{k} {v}' for k, v in sorted(e['by_status'].items()))}); "
        f"{e['files_left']} files left"
    )


def _deployed_queue_text(conc: int) -> str:
    """The run queue and launcher the harness takes from deploy/dagster.yaml."""
    from builders.daemon import deployed_instance

    deployed = deployed_instance()
    queue = deployed["run_coordinator"]["config"]
    return (
        f"QueuedRunCoordinator as deploy/dagster.yaml (a look every "
        f"{queue['dequeue_interval_seconds']} s, {queue['dequeue_num_workers']} launches at "
        f"once) with max_concurrent_runs {conc}, {deployed['run_launcher']['class']}, "
        f"log level {deployed['python_logs']['python_log_level']}, run monitoring every "
        f"{deployed['run_monitoring']['poll_interval_seconds']} s"
    )


def run(quick: bool = False) -> BenchResult:
    from bench.daemon_floor_location import IN_PROCESS
    from builders.pgbouncer import pool_setting

    size = QUICK if quick else FULL
    conc = size["concurrent_runs"]
    result = BenchResult(
        name="daemon_e2e",
        title=TITLE,
        command="python -m bench daemon_e2e" + (" --quick" if quick else ""),
        scale="quick (a tenth)" if quick else "full",
        params={
            "mixed backlog": f"{size['dropped_tables']} dropped pyiceberg tables, "
            f"{size['orphan_tables']} tables each leaving {size['children_each']} orphaned "
            f"children, {size['batch']} independent BATCH tasks of 5 files",
            "fan-out": f"1 table leaving {size['fanout_children']:,} orphaned children",
            "queue": f"{size['queue_tasks']} BATCH tasks of 1 file, max_concurrent_runs 2, "
            f"lease {size['queue_lease_ms'] // 1000} s",
            "daemon": f"{_deployed_queue_text(conc)}, run retries 2, "
            f"sweep interval {size['sweep_interval_s']} s, lease 300 s",
            "PgBouncer": f"deploy/pgbouncer/pgbouncer.ini on a port of its own, pool_mode "
            f"{pool_setting('pool_mode')}, default_pool_size "
            f"{pool_setting('default_pool_size')} (deploy/pgbouncer/dagster-pool.ini)",
            "deadlines": f"{size['deadline_s']} s per backlog, {size['fanout_deadline_s']} s "
            "for the fan-out",
        },
    )
    # --quick keeps to SQLite (the default instance); the full run adds dagster-postgres,
    # straight to PostgreSQL and through PgBouncer.
    kinds = ["sqlite"] if quick else list(KINDS)
    mixed = {
        kind: backlog_phase(
            kind,
            "mixed",
            size,
            _mixed_seed(size),
            size["deadline_s"],
            max_concurrent_runs=conc,
            lease_timeout_ms=LEASE_MS,
            sweep_interval_s=size["sweep_interval_s"],
        )
        for kind in kinds
    }
    fan = backlog_phase(
        "sqlite",
        "fanout",
        size,
        _fanout_seed(size["fanout_children"]),
        size["fanout_deadline_s"],
        max_concurrent_runs=conc,
        lease_timeout_ms=LEASE_MS,
        sweep_interval_s=size["sweep_interval_s"],
    )
    queue = backlog_phase(
        "sqlite",
        "queue",
        size,
        _queue_seed(size["queue_tasks"]),
        size["deadline_s"],
        max_concurrent_runs=2,
        lease_timeout_ms=size["queue_lease_ms"],
        sweep_interval_s=size["sweep_interval_s"],
    )
    floor = floor_phase("sqlite", size["floor_runs"], conc)
    # As many runs as the SQLite phase launched: Dagster draining this backlog's runs
    # with nothing to do in them, the fastest any job could go on this host.
    floor_one = floor_phase(
        "sqlite", mixed["sqlite"]["runs"] or size["floor_runs"], conc, executor=IN_PROCESS
    )

    for kind, e in mixed.items():
        rate = _per_min(e)
        result.add(
            Figure(
                f"{KINDS[kind]} instance: mixed backlog, tasks per minute",
                rate,
                "tasks/min",
                target=">= 100 tasks/min",
                met=rate >= 100 and e["done"],
                why=_summary(e),
            ),
            Figure(
                f"{KINDS[kind]} instance: runs launched per task",
                e["runs"] / e["fixture"]["tasks"],
                why=f"attempts per task {fmt(e['mean_attempt'])} (max {e['max_attempt']}); "
                f"tasks done by more than one run: {e['done_in_more_than_one_run']}; "
                f"lease-lost reports: {e['lease_lost_reports']}{_sessions_text(e)}",
            ),
        )
    result.add(
        Figure(
            f"fan-out: runs for {size['fanout_children']:,} orphaned children",
            fan["runs"],
            "runs",
            target="<= 5 runs, < 180 s",
            met=fan["runs"] <= 5 and fan["done"] and fan["seconds"] < 180,
            why=_summary(fan),
        ),
        Figure(
            f"queue: runs per task, {size['queue_tasks']} tasks behind 2 slots",
            queue["runs"] / queue["fixture"]["tasks"],
            target="1 run and 1 attempt per task",
            met=queue["runs"] == queue["fixture"]["tasks"]
            and queue["max_attempt"] == 1
            and queue["done"],
            why=f"{_summary(queue)}; attempts per task {fmt(queue['mean_attempt'])} "
            f"(max {queue['max_attempt']}); lease-lost reports {queue['lease_lost_reports']}",
        ),
    )
    ours = mixed["sqlite"]["median_run_s"]
    base = floor["median_run_s"]
    if ours is not None and base:
        result.add(
            Figure(
                "per-run overhead: median run, start to end (sqlite)",
                ours,
                "s",
                baseline=base,
                ratio=ours / base,
                target="<= 2x the trivial job",
                met=ours / base <= 2,
                why=f"baseline: a trivial one-op job, {floor['runs']} runs through the same "
                f"daemon; start latency (queued to started) ours "
                f"{fmt(mixed['sqlite']['median_start_latency_s'], 's')}, trivial "
                f"{fmt(floor['median_start_latency_s'], 's')}",
            )
        )

    # What this host's cores allow for the SQLite phase's runs, ours and Dagster's floor.
    m = mixed["sqlite"]
    cores = os.cpu_count() or 1
    per_run = m["fixture"]["tasks"] / m["runs"] if m["runs"] else 0.0
    ours_cpu = cpu_per_run(m)
    base_cpu = cpu_per_run(floor)
    if ours_cpu is not None and base_cpu:
        ceiling = cores * 60 / ours_cpu
        result.add(
            Figure(
                "CPU per run, the run's own process (sqlite mixed backlog)",
                ours_cpu,
                "s",
                baseline=base_cpu,
                ratio=ours_cpu / base_cpu,
                why=f"baseline: the trivial job's run process. What it sets: {cores} cores / "
                f"{ours_cpu:.2f} s = at most {ceiling:.0f} runs/min, {ceiling * per_run:.0f} "
                f"tasks/min at this backlog's {per_run:.2f} tasks per run, before the daemon "
                f"and the code server ({_service_cpu(m):.0f} CPU s over the phase's "
                f"{m['seconds']:.0f} s)",
            )
        )

    floor_cpu = cpu_per_run(floor_one)
    if floor_cpu and m["runs"]:
        backlog = f"the backlog's {m['runs']} runs ({per_run:.2f} tasks per run)"
        all_in = _all_cpu(floor_one) / floor_one["runs"]
        result.add(
            _ceiling(
                "run processes alone",
                floor_cpu,
                per_run,
                cores,
                f"if each of {backlog} cost only the run process of a trivial one-op job run "
                f"in process ({floor_cpu:.2f} CPU s, {floor_one['runs']} runs), on {cores} "
                "cores, with the daemon and the code server free",
            ),
            _ceiling(
                "all in",
                all_in,
                per_run,
                cores,
                f"if each of {backlog} cost what a trivial one-op run in process costs with "
                f"the daemon, the code server and the log watchers: {all_in:.2f} CPU s "
                f"({floor_one['runs']} runs; the daemon's start is counted in)",
            ),
        )

    drain = floor_one["drain_s"]
    if drain and floor_one["runs"] == m["runs"]:
        rate = m["fixture"]["tasks"] / (drain / 60)
        result.add(
            Figure(
                "Dagster's floor, measured: the mixed backlog's runs as no-op runs (sqlite)",
                rate,
                "tasks/min",
                target=">= 100 tasks/min, or no job reaches the target here",
                met=rate >= 100,
                why=f"{floor_one['runs']} runs of a trivial one-op job in process (as many as "
                f"the backlog took), requested by a sensor and launched the same way, drained "
                f"in {drain:.0f} s from the first run's creation to the last one's end: at the "
                f"backlog's {per_run:.2f} tasks per run, no job drains its "
                f"{m['fixture']['tasks']:,} tasks faster on this host",
            )
        )

    rows = [
        "| phase | instance | tasks | wall s | tasks/min | runs | runs/task | attempts/task "
        "(max) | median run s | median queue wait s | ticks (with runs) | median / max tick s "
        "| CPU s per run process | daemon + code server CPU s | files left |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for label, e in [*(("mixed", m) for m in mixed.values()), ("fan-out", fan), ("queue", queue)]:
        t = e["tick"]
        rows.append(
            f"| {label} | {KINDS[e['kind']]} | {e['fixture']['tasks']:,} | {e['seconds']:.0f}"
            f"{'' if e['done'] else ' (cut)'} | {_per_min(e):.0f} | {e['runs']:,} | "
            f"{e['runs'] / e['fixture']['tasks']:.2f} | {fmt(e['mean_attempt'])} "
            f"({e['max_attempt']}) | {fmt(e['median_run_s'])} | "
            f"{fmt(e['median_start_latency_s'])} | {t['ticks']} ({t['with_runs']}) | "
            f"{fmt(t['median_s'])} / {fmt(t['max_s'])} | {fmt(cpu_per_run(e))} | "
            f"{_service_cpu(e):.0f} | {e['files_left']} |"
        )
    for label, f in (("floor: trivial job", floor), ("floor: trivial job, in process", floor_one)):
        t = f["tick"]
        rows.append(
            f"| {label} | sqlite | {f['runs']} runs | {f['seconds']:.0f} | "
            f"{f['runs'] / (f['seconds'] / 60):.0f} runs/min | {f['runs']} | {DASH_} | "
            f"{DASH_} | {fmt(f['median_run_s'])} | {fmt(f['median_start_latency_s'])} | "
            f"{t['ticks']} ({t['with_runs']}) | {fmt(t['median_s'])} / {fmt(t['max_s'])} | "
            f"{fmt(cpu_per_run(f))} | {_service_cpu(f):.0f} | {DASH_} |"
        )
    result.section("Phases", "\n".join(rows))
    result.section(
        "Method",
        "Each phase starts `dagster-daemon run -w <workspace>` (builders/daemon.py) on a "
        "fresh temporary DAGSTER_HOME and a fresh metastore database, waits for the sensor's "
        "first tick (the code location is loaded), then inserts the tasks and times until "
        "the metastore holds none. Runs are counted in the run storage; attempts are the "
        "lease attempts the runs' step outputs report per task; tick durations are the "
        "sensor ticks' own start and end. The trivial job is requested by a sensor of its "
        "own code location, once per run, through the same queue and launcher; it keeps "
        "Dagster's default executor, and is run a second time with the in-process executor "
        "(one process per run, as the task job), as many runs as the SQLite backlog took: "
        "their drain time, from the first run's creation to the last run's end, is "
        "Dagster's floor for the backlog on this host, and their CPU per run its ceiling. "
        "CPU is read from /proc five times a second for every process the phase started "
        "(bench/proc_cpu.py): a run's process is the one the code "
        "server spawns for it.",
    )
    if quick:
        result.notes.append(
            "Scaled down (`--quick`): a tenth of the issue's sizes, with deadlines; a phase "
            "marked *cut* reached its deadline, and its rate counts the tasks it finished."
        )
    return result


DASH_ = "\u2013"
