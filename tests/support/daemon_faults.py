"""Faults around a real ``dagster-daemon``: the pieces the daemon fault scenarios share.

- ``FaultDaemon``: a ``DaemonHarness`` that can be SIGKILLed and started again over the
  same DAGSTER_HOME, finds its own code server among its descendants, and loads the
  journaled code location (``tests.support.daemon_journal_location``);
- ``TcpProxy``: 127.0.0.1:<port> forwarded to a server; ``close()`` refuses new
  connections and cuts live ones (the service is unreachable), ``open()`` restores it;
- ``Backlog``: orphaned BATCH tasks over slow ``faulty://`` (local) files, with
  neighbour files beside each table that must survive; ``check_backlog`` asserts the
  end state of a scenario and records it;
- ``overlapping_processes``: from the journal, tasks whose files two processes were
  deleting at overlapping times (a run and its retry share one executor id and
  attempt, so the holder is the process, not the lease).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterRun, DagsterRunStatus

from builders.daemon import DaemonConfig, DaemonHarness, descendants, kill_tree
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, TaskPolicy
from tests.reliability import journal as jr
from tests.reliability.faults import write_plan
from tests.reliability.harness import Scenario, left_over
from tests.support.daemon_fixtures import existing, touch_files
from tests.support.daemon_journal_location import JOURNAL_DIR_ENV

JOURNALED_LOCATION = "tests.support.daemon_journal_location"
REALM = "POLARIS"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class FaultDaemon(DaemonHarness):
    """A daemon harness whose daemon and code server a test may kill and start again."""

    def __init__(self, home: Path, config: DaemonConfig, journal_dir: Path) -> None:
        journal_dir.mkdir(parents=True, exist_ok=True)
        config.extra_env = {**config.extra_env, JOURNAL_DIR_ENV: str(journal_dir)}
        super().__init__(home, config)
        self.journal_dir = journal_dir
        # Processes left by a killed daemon (its code server, run workers): ended on stop.
        self._left: list[int] = []

    def kill_daemon(self) -> list[int]:
        """SIGKILL ``dagster-daemon`` itself (not its children); returns what it left running."""
        proc = self._proc
        assert proc is not None, "daemon not started"
        below = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self._proc = None
        self._left += below
        return below

    def code_servers(self) -> list[int]:
        """The ``dagster api grpc`` processes the daemon started for its workspace."""
        if self._proc is None:
            return []
        return [
            pid
            for pid in descendants(self._proc.pid)
            if " api grpc" in _cmdline(pid) and "dagster" in _cmdline(pid)
        ]

    def stop(self, timeout_s: float = 20.0) -> None:
        super().stop(timeout_s)
        kill_tree([p for p in self._left if _alive(p)])
        self._left = []

    def events(self) -> list[dict[str, Any]]:
        """Every journal line of every process that loaded the code location."""
        return jr.load(sorted(self.journal_dir.glob("*.jsonl")))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------ TCP proxy


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; closed, the port refuses connections."""

    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = port
        self._listener: socket.socket | None = None
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.connections = 0

    def open(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def close(self) -> None:
        """Stop listening and reset every live connection: the service is unreachable."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            live, self._live = self._live, set()
        for sock in live:
            with contextlib.suppress(OSError):
                # RST, not FIN: what a client sees when the far end is gone.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                sock.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._live |= {client, upstream}
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()
            with self._lock:
                self._live -= {src, dst}


# ------------------------------------------------------------------ the backlog


@dataclass
class Backlog:
    """Orphaned batch tasks over files of their own, and neighbours that must stay.

    ``present(uris)``: those of ``uris`` that still exist (local files by default).
    """

    tasks: list[NewTask]
    files: list[str]
    neighbours: list[str] = field(default_factory=list)
    present: Callable[[list[str]], list[str]] = existing

    def neighbours_gone(self) -> list[str]:
        return sorted(set(self.neighbours) - set(self.present(self.neighbours)))


def slow_backlog(root: Path, n: int, files_each: int, delay_s: float) -> tuple[Backlog, Path]:
    """``n`` orphaned BATCH tasks over ``faulty://`` files under ``root``, each delete
    ``delay_s`` slow (a fault plan: tasks stay in flight for a while); returns the
    backlog and the plan file (``PP_REL_FAULT_PLAN`` of the daemon)."""
    tasks: list[NewTask] = []
    files: list[str] = []
    neighbours: list[str] = []
    for i in range(n):
        table = root / "wh" / "ns" / f"t{i}"
        uris = touch_files(table / "data", files_each, scheme="faulty")
        files += uris
        # A neighbour table whose name extends the dropped one's, and a file beside it.
        for keep in (root / "wh" / "ns" / f"t{i}_keep" / "data", table.parent / f"t{i}_files"):
            neighbours += touch_files(keep, 1)
        tasks.append(batch_task(REALM, uris, internal={"storageLocation": f"faulty:/{table}"}))
    plan = root / "fault-plan.json"
    rule = {"op": "rm_file", "match": f"{root}/wh/", "kind": "delay", "seconds": delay_s}
    write_plan(plan, [rule])
    return Backlog(tasks, files, neighbours), plan


def overlapping_processes(events: Iterable[dict[str, Any]]) -> list[str]:
    """Tasks whose files two processes deleted during overlapping spans.

    A process's span on a task runs from its first ``begin`` to its last ``end``
    (its last ``begin`` when it died before saying). Two step processes of one run
    never share a task; a run, its retries and other runs do not overlap unless two
    of them work the task at once.
    """
    spans: dict[tuple[str, int], dict[int, list[int]]] = defaultdict(dict)
    for d in jr.deletions(events):
        span = spans[(d.realm, d.task)].setdefault(d.pid, [d.t0, d.t1 or d.t0])
        span[0] = min(span[0], d.t0)
        span[1] = max(span[1], d.t1 or d.t0)
    problems = []
    for (realm, task), by_pid in spans.items():
        latest_end, latest_pid = -1, None
        for pid, (start, end) in sorted(by_pid.items(), key=lambda kv: kv[1][0]):
            if latest_pid is not None and start < latest_end:
                problems.append(f"{realm}/{task}: pid {pid} began while pid {latest_pid} deleted")
            if end > latest_end:
                latest_end, latest_pid = end, pid
    return problems


def attempts_per_task(events: Iterable[dict[str, Any]]) -> dict[int, set[int]]:
    """Task id -> the attempt numbers the runs executed it under (journal ``exec`` lines)."""
    out: dict[int, set[int]] = defaultdict(set)
    for e in jr.of_kind(events, "exec"):
        out[int(e["task"])].add(int(e["attempt"]))
    return out


def check_backlog(
    scenario: Scenario, daemon: FaultDaemon, store: Metastore, backlog: Backlog
) -> list[dict[str, Any]]:
    """The end state every daemon fault scenario proves; returns the journal's events."""
    events = daemon.events()
    dels = jr.deletions(events)
    left = backlog.present(backlog.files)
    wanted = set(backlog.files)
    foreign = sorted({d.uri for d in dels if d.result == "deleted"} - wanted)
    overlapping = overlapping_processes(events)
    twice = sorted(
        uri for uri, n in Counter(d.uri for d in dels if d.result == "deleted").items() if n > 1
    )
    changed = backlog.neighbours_gone()
    remaining = store.count_tasks()
    scenario.losses(
        tasks_lost=remaining,
        files_left_behind=len(left),
        files_wrongly_deleted=len(foreign) + len(changed),
        concurrent_holders=len(overlapping),
    )
    scenario.metrics["processes_that_deleted"] = len({d.pid for d in dels})
    scenario.metrics["files_deleted_twice"] = len(twice)
    assert remaining == 0, left_over(store) + "\n" + daemon.diagnose()
    assert not left, left[:5]
    scenario.check("every task finished: the task table is empty and every listed file is gone")
    assert not foreign and not changed, (foreign[:5], changed[:5])
    scenario.check(
        "the neighbours' files (a table whose name extends the dropped one's, a file "
        "beside each table) are untouched, and nothing outside the tasks' lists was deleted"
    )
    assert not overlapping, overlapping[:5]
    scenario.check(
        "no two processes deleted one task's files at overlapping times (the journal each "
        "run worker and step process writes around every delete)"
    )
    assert not twice, twice[:5]
    scenario.check("no file was deleted twice: no task's work was done again")
    return events


def failure_reasons(daemon: DaemonHarness, runs: Iterable[DagsterRun]) -> dict[str, int]:
    """Why runs failed: their first error line (engine event or run failure), digits
    and ids masked, with how many runs gave it."""
    reasons: Counter[str] = Counter()
    for run in runs:
        text = "(no message)"
        for record in daemon.instance.all_logs(run.run_id):
            event = record.dagster_event
            if event is None or event.event_type not in _FAILURE_EVENTS:
                continue
            text = (record.user_message or event.message or "").strip().splitlines()[0]
            if event.event_type is DagsterEventType.RUN_FAILURE or "rror" in text:
                break
        reasons[re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+", "N", text)[:200]] += 1
    return dict(reasons)


def op_retries(daemon: DaemonHarness, runs: Iterable[DagsterRun]) -> int:
    """Steps retried inside their run (the task job's op retry policy)."""
    return sum(
        len(daemon.instance.all_logs(r.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY))
        for r in runs
    )


_FAILURE_EVENTS = frozenset(
    {DagsterEventType.ENGINE_EVENT, DagsterEventType.RUN_FAILURE, DagsterEventType.STEP_FAILURE}
)


def lineage_root(run: DagsterRun) -> str:
    """The first run of ``run``'s lineage: its run retries share its executor id."""
    return run.tags.get("dagster/root_run_id") or run.run_id


def abandoned_lineages(runs: Iterable[DagsterRun], events: Iterable[dict[str, Any]]) -> list[str]:
    """Failed runs whose lineage executed a task (a journal ``exec`` line under its
    executor id) and never finished: a lease left to lapse, an attempt spent."""
    runs = list(runs)
    executed = {e["executor"].rsplit(":", 1)[-1] for e in jr.of_kind(events, "exec")}
    finished = {lineage_root(r) for r in runs if r.status is DagsterRunStatus.SUCCESS}
    return [
        r.run_id
        for r in runs
        if r.status is DagsterRunStatus.FAILURE
        and lineage_root(r) in executed
        and lineage_root(r) not in finished
    ]


def outage_survived_ms(policy: TaskPolicy) -> int:
    """The longest storage outage after which every task still has an attempt left.

    A task that fails every attempt from the outage's first moment is dead-lettered
    at its ``max_attempts``-th failure; before that it waits at least the backoff
    without jitter after each earlier failure (``TaskPolicy.backoff_ms(k, 0)``).
    In-run op retries and the storage client's own retries only make it longer.
    """
    return sum(policy.backoff_ms(k, 0.0) for k in range(1, policy.max_attempts))


@contextlib.contextmanager
def fault_daemons(tmp_path: Path) -> Iterator[Callable[..., FaultDaemon]]:
    """``start(**DaemonConfig fields)`` over the journaled code location; all stopped after."""
    started: list[FaultDaemon] = []

    def start(**config: Any) -> FaultDaemon:
        config.setdefault("module", JOURNALED_LOCATION)
        daemon = FaultDaemon(
            tmp_path / f"dagster_home_{len(started)}", DaemonConfig(**config), tmp_path / "journal"
        )
        started.append(daemon)
        daemon.start()
        return daemon

    try:
        yield start
    finally:
        for daemon in started:
            # Short: the scenario is judged; what is left is killed with its session.
            daemon.stop(timeout_s=5)


def wait_quietly(condition: Any, timeout_s: float, interval_s: float = 0.5) -> Any:
    """``condition()``'s first truthy value; an exception (a database down) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = condition()
            if value:
                return value
        time.sleep(interval_s)
    return None


__all__ = [
    "JOURNALED_LOCATION",
    "REALM",
    "Backlog",
    "FaultDaemon",
    "TcpProxy",
    "abandoned_lineages",
    "attempts_per_task",
    "check_backlog",
    "failure_reasons",
    "fault_daemons",
    "lineage_root",
    "op_retries",
    "outage_survived_ms",
    "overlapping_processes",
    "slow_backlog",
    "wait_quietly",
]
