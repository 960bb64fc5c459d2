"""Test-side helpers of the reliability scenarios: sizes, worker processes, polling, files.

Sizes default to what the normal ``pytest`` run affords on two cores; every one can
be raised through an environment variable for a bigger manual run, e.g.::

    PP_REL_RACE_TASKS=50000 PP_REL_BIG_BATCH=1000000 .venv/bin/pytest tests/reliability
    .venv/bin/python -m tests.reliability.report
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import TaskPolicy
from tests.reliability import journal as jr

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@dataclass(frozen=True)
class Sizes:
    """Loads of the scenarios (environment variable: default)."""

    race_tasks: int = env_int("PP_REL_RACE_TASKS", 5000)
    race_sweepers: int = env_int("PP_REL_RACE_SWEEPERS", 4)
    manifest_entries: int = env_int("PP_REL_MANIFEST_ENTRIES", 200)
    db_fault_tasks: int = env_int("PP_REL_DB_FAULT_TASKS", 800)
    db_kills: int = env_int("PP_REL_DB_KILLS", 12)
    fault_tasks: int = env_int("PP_REL_FAULT_TASKS", 40)
    big_batch: int = env_int("PP_REL_BIG_BATCH", 100_000)
    long_path: int = env_int("PP_REL_LONG_PATH", 10_000)


SIZES = Sizes()


def pg_restart_enabled() -> bool:
    return os.environ.get("PP_RELIABILITY_PG_RESTART", "1") != "0"


def wait_for(
    predicate: Callable[[], T], timeout: float, *, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def url_of(store: Metastore) -> str:
    return store.url.render_as_string(hide_password=False)


# -- worker processes ------------------------------------------------------------------


@dataclass
class Worker:
    """A sweeper subprocess (``tests.reliability.worker``) and its files."""

    name: str
    proc: subprocess.Popen[bytes]
    journal: Path
    out: Path
    err: Path
    config: dict[str, Any]
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.name} still running after {timeout:.0f} s; stderr:\n"
                + self.stderr()[-3000:]
            ) from None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last words."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace") if self.out.exists() else ""

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace") if self.err.exists() else ""

    def events(self) -> list[dict[str, Any]]:
        return jr.load([self.journal])


@dataclass
class Workers:
    """Starts worker subprocesses and makes sure none outlives the test."""

    directory: Path
    started: list[Worker] = field(default_factory=list)

    def start(
        self,
        name: str,
        mode: str,
        *,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        **config: Any,
    ) -> Worker:
        n = len(self.started)
        base = self.directory / f"{n:02d}-{name}"
        cfg = {"name": name, "mode": mode, "journal": f"{base}.journal", **config}
        cfg_path = Path(f"{base}.json")
        cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
        out, err = Path(f"{base}.out"), Path(f"{base}.err")
        child_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        command = [*(prefix or []), sys.executable, "-m", "tests.reliability.worker", str(cfg_path)]
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen(command, cwd=REPO, env=child_env, stdout=o, stderr=e)
        worker = Worker(name, proc, Path(cfg["journal"]), out, err, cfg)
        self.started.append(worker)
        return worker

    def journals(self) -> list[Path]:
        return [w.journal for w in self.started]

    def events(self) -> list[dict[str, Any]]:
        return jr.load(self.journals())

    def close(self) -> None:
        for w in self.started:
            if w.alive():
                if w.stopped:
                    w.resume()
                w.kill()


# -- files -----------------------------------------------------------------------------


def touch_all(paths: Iterable[Path], content: bytes = b"x") -> None:
    made: set[Path] = set()
    for p in paths:
        if p.parent not in made:
            p.parent.mkdir(parents=True, exist_ok=True)
            made.add(p.parent)
        with open(p, "wb") as f:
            f.write(content)


def list_tree(root: Path) -> set[str]:
    """Every file (and symlink) under ``root`` as a ``file://`` URI."""
    out: set[str] = set()
    for dirpath, dirs, files in os.walk(root):
        for name in files:
            out.add("file://" + os.path.join(dirpath, name))
        for name in dirs:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                out.add("file://" + full)
    return out


def faketime_prefix(offset: str) -> list[str] | None:
    """``faketime`` command prefix when libfaketime is installed (monotonic left real)."""
    binary = shutil.which("faketime")
    return [binary, "-f", offset] if binary else None


def iter_chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- PostgreSQL and policies ------------------------------------------------------------


@dataclass
class RelDb:
    """One PostgreSQL database of one test."""

    name: str
    url: str  # as the pipeline connects: the admin, or the restricted role (as_pipeline)
    admin_url: str

    def admin(self) -> Any:
        return create_engine(self.admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)

    def terminate_connections(self, *, application: str | None = None) -> int:
        """``pg_terminate_backend`` every connection to this database but our own."""
        engine = self.admin()
        try:
            with engine.connect() as conn:
                sql = (
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :db AND pid <> pg_backend_pid()"
                )
                params: dict[str, Any] = {"db": self.name}
                if application is not None:
                    sql += " AND application_name = :app"
                    params["app"] = application
                return int(conn.execute(text(sql), params).scalar_one())
        finally:
            engine.dispose()

    def busy_backends(self) -> int:
        """Connections to this database inside a transaction or a statement (but ours)."""
        engine = self.admin()
        try:
            with engine.connect() as conn:
                return int(
                    conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = :db "
                            "AND pid <> pg_backend_pid() AND state <> 'idle'"
                        ),
                        {"db": self.name},
                    ).scalar_one()
                )
        finally:
            engine.dispose()

    def execute(self, sql: str, **params: Any) -> None:
        """``sql`` in this database as the admin (grants, rows the pipeline may not write)."""
        url = make_url(self.admin_url).set(database=self.name)
        engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(text(sql), params)
        finally:
            engine.dispose()


@dataclass(frozen=True)
class PgRole:
    user: str
    password: str
    url: str  # with the password in it

    def spellings(self) -> list[str]:
        """The password as written and as URL-encoded: neither may ever be printed."""
        from urllib.parse import quote, quote_plus

        return sorted({self.password, quote(self.password, safe=""), quote_plus(self.password)})


def rel_policy(**overrides: Any) -> TaskPolicy:
    """Short timings for tests: 2 s leases, no grace, fast backoff."""
    values: dict[str, Any] = {
        "lease_timeout_ms": 2_000,
        "grace_ms": 0,
        "max_attempts": 8,
        "backoff_base_ms": 200,
        "backoff_max_ms": 1_000,
    }
    values.update(overrides)
    return TaskPolicy(**values)


def policy_dict(policy: TaskPolicy) -> dict[str, Any]:
    return asdict(policy)


# -- scenario records ------------------------------------------------------------------


@dataclass
class Scenario:
    """What one scenario did and found; the report is built from these."""

    number: int
    title: str
    test: str
    load: str = ""
    fault: str = ""
    lost: dict[str, int] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    outcome: str = "unknown"
    failure: str | None = None
    seconds: float = 0.0
    line: int = 0  # where the test is defined: the report keeps the source's order
    # Shown by the report only when the scenario fails: the known cause and the fix proposed.
    if_failed: list[str] = field(default_factory=list)

    def check(self, description: str) -> None:
        """Record one verified property (call after its assert)."""
        self.checks.append(description)

    def losses(self, **counts: int) -> None:
        self.lost.update({k: int(v) for k, v in counts.items()})


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float
    maxrss_kb: int
    events: list[dict[str, Any]]


def sweep_once(workers: Workers, url: str, *extra: str, journal: bool = True) -> Run:
    """One `polaris-pipeline sweep` in a worker process, with no grace period."""
    argv = ["sweep", "--metastore", url, "--grace-ms", "0", *extra]
    started = time.monotonic()
    w = workers.start("cli", "cli", argv=argv, journal_deletes=journal)
    code = w.wait(400)
    seconds = time.monotonic() - started
    events = w.events()
    exits = jr.of_kind(events, "exit")
    rss = int(exits[-1]["maxrss_kb"]) if exits else -1
    return Run(code, w.stdout(), w.stderr(), seconds, rss, events)


def left_over(store: Metastore, limit: int = 8) -> str:
    """The tasks still in the table, with state, attempts and last error (for failures)."""
    now, rows = store.tasks_with_state()
    lines = [f"{len(rows)} task(s) left at db time {now}:"]
    for task, state in rows[:limit]:
        error = (task.last_error or task.properties_error or "")[:160]
        lines.append(
            f"  {task.label}: {state.value}, {task.attempt_count} attempt(s), "
            f"executor {task.executor_id}, error {error!r}"
        )
    return "\n".join(lines)
