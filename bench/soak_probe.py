"""What the soak reads while it runs: task rows, processes, Dagster's storage.

- ``RowWatcher``: every task row of the metastore once a second: when each row
  was first and last seen, its state, and per lease attempt the executor, the
  first and last lease start seen and the recorded end (the rows' executor
  history, judged by ``overlapping_holders``);
- ``service_rss``: resident memory of the daemon and its code server (roles from
  ``bench.proc_cpu.role_of``), and how many run processes are alive;
- ``dagster_rows``: rows and bytes of Dagster's storage, for a SQLite
  DAGSTER_HOME (every ``*.db`` file under it) or a dagster-postgres database;
- ``RunBook``: the runs of the instance as last seen (create, start, end,
  status), kept after the retention job deletes them.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, LiteralString

from dagster import DagsterInstance
from sqlalchemy import URL

from bench.common import pg_connect
from bench.proc_cpu import role_of
from builders.daemon import descendants
from polaris_pipeline.dagster.contract import PRIORITY_TAG
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop

RUN_EXECUTOR = ":run:"


# ------------------------------------------------------------------ task rows


@dataclass
class Attempt:
    executor: str
    first_start: int
    last_start: int
    end: int | None = None
    status: str | None = None
    executors: set[str] = field(default_factory=set)


@dataclass
class RowHistory:
    realm: str
    task_id: int
    name: str
    first_seen: float
    last_seen: float
    state: str
    gone_at: float | None = None
    attempts: dict[int, Attempt] = field(default_factory=dict)
    error: str | None = None


class RowWatcher:
    """Reads every task row each ``interval_s`` in a thread of its own until ``stop``."""

    def __init__(self, url: str, policy: Any, interval_s: float = 1.0) -> None:
        self.store = Metastore(url, policy=policy)
        self.interval_s = interval_s
        self.rows: dict[tuple[str, int], RowHistory] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-rows", daemon=True)
        self.errors = 0

    def start(self) -> RowWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.store.dispose()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # a database hiccup: the next look catches up
                self.errors += 1

    def sample(self) -> None:
        _, rows = self.store.tasks_with_state()
        t = time.time()
        seen: set[tuple[str, int]] = set()
        with self.lock:
            for row, state in rows:
                key = (row.realm_id, row.id)
                seen.add(key)
                h = self.rows.get(key)
                if h is None:
                    h = self.rows[key] = RowHistory(row.realm_id, row.id, row.name, t, t, state)
                h.last_seen, h.state, h.gone_at = t, str(state), None
                h.error = row.last_error
                self._attempt(h, row.properties)
            for key, h in self.rows.items():
                if key not in seen and h.gone_at is None:
                    h.gone_at = t

    @staticmethod
    def _attempt(h: RowHistory, props: Mapping[str, str]) -> None:
        executor = props.get(Prop.EXECUTOR) or ""
        if not executor:
            return
        try:
            n = int(props.get(Prop.ATTEMPT_COUNT) or 0)
            start = int(props.get(Prop.START_TIME) or 0)
        except ValueError:
            return
        a = h.attempts.get(n)
        if a is None:
            a = h.attempts[n] = Attempt(executor, start, start)
        a.executors.add(executor)
        a.executor = executor
        a.last_start = max(a.last_start, start)
        end = props.get(Prop.END_TIME)
        if end and end.isdigit():
            a.end = int(end)
            a.status = props.get(Prop.STATUS)

    def snapshot(self) -> dict[tuple[str, int], RowHistory]:
        with self.lock:
            return dict(self.rows)


def run_id_of(executor: str) -> str | None:
    """The Dagster run of a task job's executor id (``<prefix>:run:<run id>``)."""
    return executor.rsplit(RUN_EXECUTOR, 1)[1] if RUN_EXECUTOR in executor else None


def overlapping_holders(
    rows: Mapping[tuple[str, int], RowHistory],
    run_ends: Mapping[str, float],
    lease_timeout_ms: int,
    tolerance_ms: int = 1000,
) -> list[dict[str, Any]]:
    """Tasks a second holder leased while the one before still held it.

    Attempt N+1 by another executor is a violation when it started before
    attempt N ended: its recorded end (a failure), else the end of its run (a
    Dagster run's executor), else its lease's lapse (last start seen + lease
    timeout: a Polaris executor that died). One attempt changing hands is
    counted too (a hand-over within one attempt; the soak kills nothing).
    """
    found: list[dict[str, Any]] = []
    for h in rows.values():
        attempts = sorted(h.attempts.items())
        for n, a in attempts:
            if len(a.executors) > 1:
                found.append({"task": h.task_id, "attempt": n, "why": "hand-over in one attempt"})
        for (n1, a1), (n2, a2) in itertools.pairwise(attempts):
            if a1.executor == a2.executor:
                continue
            released = a1.last_start + lease_timeout_ms
            run = run_id_of(a1.executor)
            if a1.end is not None:
                released = a1.end
            elif run is not None and run in run_ends:
                released = min(released, int(run_ends[run] * 1000))
            if a2.first_start < released - tolerance_ms:
                found.append(
                    {
                        "task": h.task_id,
                        "attempts": [n1, n2],
                        "executors": [a1.executor, a2.executor],
                        "overlap_ms": released - a2.first_start,
                    }
                )
    return found


# ------------------------------------------------------------------ processes


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def service_rss(daemon_pid: int) -> dict[str, Any]:
    """RSS in MB of the daemon and of its code server; the live run processes.

    The daemon replaces its gRPC code server from time to time (a new one starts,
    the old one stops once idle): "code server" is the largest one alive, the
    one serving; "code servers" counts them, with their pids.
    """
    servers: dict[int, float] = {}
    runs = 0
    for pid in descendants(daemon_pid):
        role = role_of(_cmdline(pid))
        if role == "code server":
            servers[pid] = _rss_mb(pid) or 0.0
        elif role == "run":
            runs += 1
    return {
        "daemon": _rss_mb(daemon_pid) or 0.0,
        "code server": max(servers.values(), default=0.0),
        "code servers": len(servers),
        "code server pids": sorted(servers),
        "code servers total": sum(servers.values()),
        "runs": runs,
    }


# ------------------------------------------------------------------ Dagster's storage


def _sqlite_count(path: Path, table: str) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            return int(row[0])
    except sqlite3.Error:
        return 0


def _sqlite_rows(home: Path) -> dict[str, int]:
    """Rows and bytes of a SQLite instance under DAGSTER_HOME."""
    files = [p for p in home.rglob("*.db*") if p.is_file()]
    runs_db = home / "history" / "runs.db"
    out = {
        "runs": _sqlite_count(runs_db, "runs"),
        "run_tags": _sqlite_count(runs_db, "run_tags"),
        "event_logs": 0,
        "runless_events": 0,
        "db_files": len([p for p in files if p.suffix == ".db"]),
        "bytes": sum(p.stat().st_size for p in files),
    }
    for path in (home / "history" / "runs").glob("*.db"):
        if path.name == "index.db":
            continue
        out["event_logs"] += _sqlite_count(path, "event_logs")
    index = home / "history" / "runs" / "index.db"
    # The index holds the asset events (also in their run's file) and the runless ones.
    try:
        with sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(
                "SELECT count(*) FROM event_logs WHERE run_id = '' OR run_id IS NULL"
            ).fetchone()
            out["runless_events"] = int(row[0])
    except sqlite3.Error:
        pass
    return out


def _pg_rows(env: Mapping[str, str]) -> dict[str, int]:
    url = URL.create(
        "postgresql",
        username=env["DAGSTER_PG_USERNAME"],
        password=env.get("DAGSTER_PG_PASSWORD") or None,
        host=env["DAGSTER_PG_HOST"],
        port=int(env["DAGSTER_PG_PORT"]),
        database=env["DAGSTER_PG_DB"],
    )
    with pg_connect(url.render_as_string(hide_password=False)) as conn:

        def one(sql: LiteralString) -> int:
            row = conn.execute(sql).fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        return {
            "runs": one("SELECT count(*) FROM runs"),
            "run_tags": one("SELECT count(*) FROM run_tags"),
            "event_logs": one("SELECT count(*) FROM event_logs WHERE run_id <> ''"),
            "runless_events": one(
                "SELECT count(*) FROM event_logs WHERE run_id = '' OR run_id IS NULL"
            ),
            "bytes": one("SELECT pg_database_size(current_database())"),
        }


def compute_logs(home: Path) -> dict[str, int]:
    """Files of the runs' compute logs under DAGSTER_HOME/storage (outside any database:
    ``DagsterInstance.delete_run`` leaves them)."""
    files = [p for p in (home / "storage").rglob("*") if p.is_file()]
    return {
        "compute_log_files": len(files),
        "compute_log_bytes": sum(p.stat().st_size for p in files),
    }


def dagster_rows(home: Path, pg: Mapping[str, str] | None) -> dict[str, int]:
    """Rows (runs, run_tags, run-bound and runless event_logs) and bytes of the instance,
    and its compute logs."""
    rows = _pg_rows(pg) if pg is not None else _sqlite_rows(home)
    return {**rows, **compute_logs(home)}


# ------------------------------------------------------------------ runs


@dataclass
class RunInfo:
    job: str
    created: float
    start: float | None
    end: float | None
    status: str
    events: int | None = None  # counted when it is backdated (all its events written)
    tags: int | None = None
    updated: float | None = None  # its last update (what the retention ages it by)
    priority: str | None = None  # its dagster/priority tag (the run queue's order)


class RunBook:
    """Every run seen, kept past its deletion: ``poll`` reads the newest ``limit``."""

    def __init__(self) -> None:
        self.runs: dict[str, RunInfo] = {}

    def poll(self, instance: DagsterInstance, limit: int = 300) -> None:
        for r in instance.get_run_records(limit=limit):
            run = r.dagster_run
            self.runs[run.run_id] = RunInfo(
                job=run.job_name,
                created=r.create_timestamp.timestamp(),
                start=r.start_time,
                end=r.end_time,
                status=run.status.value,
                events=self.runs[run.run_id].events if run.run_id in self.runs else None,
                tags=len(run.tags),
                updated=r.update_timestamp.timestamp(),
                priority=run.tags.get(PRIORITY_TAG),
            )

    def ends(self) -> dict[str, float]:
        return {k: v.end for k, v in self.runs.items() if v.end is not None}
