"""The soak: a Polaris-like writer keeps dropping tables while the deployment sweeps.

    .venv/bin/python -m bench.soak --instance postgres --minutes 30   # the published run
    .venv/bin/python -m bench.soak_report                             # docs/soak.md + PNG

A real ``dagster-daemon run`` (``builders/daemon.py``: deploy/dagster.yaml's
queue, launcher and run monitoring) with the repository's code location, over a
PostgreSQL metastore made for the run; Dagster's own storage is SQLite under
DAGSTER_HOME or a dagster-postgres database made for the run. The writer
(``builders/polaris_writer.py``) writes one event every ``event_interval_s``
for ``minutes``; then it stops and the deployment is given ``drain_s`` to finish.

The run retention job is on (``POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS`` and
``_FAILURE_DAYS`` = 1, the smallest the settings take: whole days; its schedule
every minute). To see it act within minutes, the soak backdates the
``update_timestamp`` of each finished run by one day once the run has been
finished ``retention_age_s`` (as tests/test_retention.py gives ages: Dagster has
no API to age a run): retention then selects it at its next tick. Nothing else is
changed; what is measured is the deployment's own behaviour.

Read while it runs (``bench/soak_probe.py``): every task row once a second, and
every ``sample_s`` the backlog by state, the RSS of the daemon and the code
server, the sweeper sensor's cursor size, the runs, the load average; Dagster's
rows and bytes every ``db_sample_s``. Results go to
``bench/results/soak/<instance>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from dagster import DagsterInstance
from dagster._core.definitions.run_request import InstigatorType
from sqlalchemy.engine import make_url

from bench.common import machine, temp_database
from bench.soak_probe import (
    RowHistory,
    RowWatcher,
    RunBook,
    dagster_rows,
    overlapping_holders,
    service_rss,
)
from builders.daemon import SENSOR_NAME, DaemonConfig, DaemonHarness
from builders.polaris_writer import UNHANDLED_KINDS, Event, PolarisWriter, wait_until
from builders.runs import set_run_updated
from polaris_pipeline.dagster.contract import TAG_TOTAL
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import TaskPolicy, TaskState

T = TypeVar("T")
RESULTS_DIR = Path(__file__).resolve().parent / "results" / "soak"
DAY_S = 86_400
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
# States a task of the writer may be in at the end without being lost.
IN_PROGRESS = (TaskState.PENDING, TaskState.ORPHANED, TaskState.LEASED, TaskState.BACKING_OFF)


@dataclass
class SoakConfig:
    instance: str = "postgres"  # Dagster's storage: "postgres" or "sqlite"
    minutes: float = 30.0
    event_interval_s: float = 10.0
    lease_timeout_ms: int = 60_000
    grace_ms: int = 20_000
    sweep_interval_s: float = 5.0
    max_concurrent_runs: int = 4
    retention_age_s: float = 240.0
    drain_s: float = 240.0
    # The drain also ends once no task has finished for this long: a stalled deployment
    # fails at once, a slow one that still progresses gets the whole ``drain_s``.
    stall_s: float = 180.0
    sample_s: float = 5.0
    db_sample_s: float = 30.0


def retention_env() -> dict[str, str]:
    """Retention on at the settings' smallest ages, its schedule every minute."""
    return {
        "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "1",
        "POLARIS_PIPELINE_RETENTION_FAILURE_DAYS": "1",
        "POLARIS_PIPELINE_RETENTION_CRON": "* * * * *",
    }


def backdate(instance: DagsterInstance, run_id: str, ended: float) -> float:
    """Set the run's last update to one day before it ended (naive UTC, as Dagster keeps
    it); returns that time."""
    stamp = datetime.fromtimestamp(ended, UTC) - timedelta(days=1, minutes=1)
    set_run_updated(instance, run_id, stamp)
    return stamp.timestamp()


def still_aged(updated: float | None, ended: float) -> bool:
    """Whether a run last updated at ``updated`` still has the age ``backdate`` gave it
    (nothing updated it since, such as the report sensor's tag)."""
    return updated is not None and updated < ended - DAY_S / 2


def cursor_size(instance: DagsterInstance, name: str = SENSOR_NAME) -> int | None:
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.instigator_name == name:
            data = state.instigator_data
            return len(getattr(data, "cursor", None) or "")
    return None


class Sampler:
    """The periodic reads (see the module docstring), in a thread; also the backdating."""

    def __init__(
        self, cfg: SoakConfig, daemon: DaemonHarness, url: str, pg: Mapping[str, str] | None
    ) -> None:
        self.cfg = cfg
        self.daemon = daemon
        self.pg = pg
        self.store = Metastore(
            url, policy=TaskPolicy(lease_timeout_ms=cfg.lease_timeout_ms, grace_ms=cfg.grace_ms)
        )
        self.book = RunBook()
        self.backdated: dict[str, float] = {}
        self.backdated_again = 0
        self.samples: list[dict[str, Any]] = []
        self.db: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.t0 = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.store.dispose()

    def _loop(self) -> None:
        next_db = 0.0
        while True:
            try:
                self.sample()
                if time.time() >= next_db:
                    next_db = time.time() + self.cfg.db_sample_s
                    self.db_sample()
            except Exception as exc:  # kept and reported: a read failing is not the soak failing
                self.errors.append(f"{time.time() - self.t0:.0f} s: {type(exc).__name__}: {exc}")
            if self._stop.wait(self.cfg.sample_s):
                return

    def sample(self) -> None:
        instance = self.daemon.instance
        states: Counter[str] = Counter()
        for counts in self.store.count_by_state().values():
            for state, n in counts.items():
                states[str(state)] += n
        self.book.poll(instance)
        self._backdate(instance)
        self.samples.append(
            {
                "t": time.time() - self.t0,
                "load": list(os.getloadavg()),
                "backlog": dict(states),
                "rss": service_rss(self.daemon.pid),
                "cursor": cursor_size(instance),
                "runs_now": instance.get_runs_count(),
                "runs_seen": len(self.book.runs),
            }
        )

    def _backdate(self, instance: DagsterInstance) -> None:
        now = time.time()
        for run_id, info in self.book.runs.items():
            if info.status not in FINISHED or info.end is None:
                continue
            if now - info.end < self.cfg.retention_age_s:
                continue
            # Once, unless the run was updated since (the report sensor tagging it late):
            # then it is a day old again only a day after that update.
            if run_id in self.backdated:
                if still_aged(info.updated, info.end):
                    continue
                self.backdated_again += 1
            # Counted now, every event of the run written, just before it may go.
            info.events = len(instance.get_records_for_run(run_id, limit=1_000_000).records)
            info.updated = backdate(instance, run_id, info.end)
            # When the new age was committed: a retention run started later sees it.
            self.backdated[run_id] = time.time() - self.t0

    def db_sample(self) -> None:
        rows = dagster_rows(self.daemon.home, self.pg)
        self.db.append({"t": time.time() - self.t0, **rows})


# ------------------------------------------------------------------ accounting


def _event_of_name(name: str) -> str:
    """The parent name a task's name starts with (``entityCleanup_<id>``)."""
    return "_".join(name.split("_", 2)[:2])


def account(
    events: list[Event],
    rows: Mapping[tuple[str, int], RowHistory],
    present: list[tuple[Any, TaskState]],
    writer: PolarisWriter,
) -> dict[str, Any]:
    """Where every task and event of the writer is (see ``check``)."""
    by_id = {tid: e for e in events for tid in e.task_ids}
    by_prefix = {e.prefix: e for e in events if e.hostile is None}
    left: dict[int, list[tuple[Any, TaskState]]] = {}
    children_left = 0
    for row, state in present:
        event = by_id.get(row.id) or by_prefix.get(_event_of_name(row.name))
        if event is not None:
            left.setdefault(event.n, []).append((row, state))
            if row.id not in by_id:
                children_left += 1
    present_ids = {row.id: state for row, state in present}
    tasks: Counter[str] = Counter()
    for tid, event in by_id.items():
        if event.hostile is not None:
            continue
        now_in = present_ids.get(tid)
        tasks["done" if now_in is None else str(now_in)] += 1
    hostile: Counter[str] = Counter()
    lost: list[dict[str, Any]] = []
    wrongly_dead: list[int] = []
    kept_deleted: list[str] = []
    for e in events:
        mine = left.get(e.n, [])
        if e.hostile is not None:
            kept_deleted += writer.kept_missing(e)
            hostile_state = present_ids.get(e.task_ids[0])
            expected = (
                {TaskState.UNHANDLED}
                if e.hostile in UNHANDLED_KINDS
                else {TaskState.DEAD, TaskState.BACKING_OFF}
            )
            if hostile_state is None:
                hostile["row gone (wrong)"] += 1
            elif hostile_state in expected:
                hostile[str(hostile_state)] += 1
            else:
                hostile[f"{hostile_state} (waiting)"] += 1
            continue
        wrongly_dead += [row.id for row, state in mine if state is TaskState.DEAD]
        files_left = writer.files_left(e)
        if not mine and files_left:
            lost.append({"event": e.n, "kind": e.kind, "files_left": len(files_left)})
    seen_children = sum(
        1 for h in rows.values() if h.task_id not in by_id and _event_of_name(h.name) in by_prefix
    )
    return {
        "events": len(events),
        "events_by_kind": dict(Counter(e.kind for e in events)),
        "writer_tasks": sum(len(e.task_ids) for e in events if e.hostile is None),
        "writer_tasks_by_state": dict(tasks),
        "hostile_rows": sum(1 for e in events if e.hostile is not None),
        "hostile_by_state": dict(hostile),
        "hostile_by_kind": dict(Counter(e.hostile for e in events if e.hostile)),
        "children_seen": seen_children,
        "children_left": children_left,
        "events_in_progress": sum(1 for e in events if e.hostile is None and left.get(e.n)),
        "lost": lost,
        "wrongly_dead": wrongly_dead,
        "kept_files_deleted": kept_deleted,
    }


def latencies(
    events: list[Event], rows: Mapping[tuple[str, int], RowHistory], cfg: SoakConfig, t0: float
) -> list[dict[str, Any]]:
    """Per finished event: from when all its work was available to its last row's end."""
    gone: dict[str, float] = {}
    by_id = {tid: e for e in events for tid in e.task_ids}
    prefixes = {e.prefix for e in events if e.hostile is None}
    unfinished: set[str] = set()
    for h in rows.values():
        event = by_id.get(h.task_id)
        prefix = event.prefix if event is not None else _event_of_name(h.name)
        if prefix not in prefixes:
            continue
        if h.gone_at is None:
            unfinished.add(prefix)
        else:
            gone[prefix] = max(gone.get(prefix, 0.0), h.gone_at)
    out = []
    for e in events:
        if e.hostile is not None or e.prefix in unfinished or e.prefix not in gone:
            continue
        available = e.created_ms / 1000 + cfg.grace_ms / 1000
        if e.dead_lease_ms is not None:
            available = max(available, (e.dead_lease_ms + cfg.lease_timeout_ms) / 1000)
        out.append(
            {
                "t": gone[e.prefix] - t0,
                "kind": e.kind,
                "latency_s": max(0.0, gone[e.prefix] - available),
            }
        )
    return out


def _only_hostile_left(store: Metastore, writer: PolarisWriter) -> bool:
    hostile = {e.task_ids[0] for e in writer.events if e.hostile is not None}
    return all(row.id in hostile for row in store.list_tasks())


def _drain(cfg: SoakConfig, store: Metastore, writer: PolarisWriter) -> None:
    """Wait until only hostile rows are left, for at most ``cfg.drain_s``, and no longer
    than ``cfg.stall_s`` after the row count last changed."""
    now = time.monotonic()
    drain_until, last_progress = now + cfg.drain_s, now
    left = _retrying(store.count_tasks)
    while time.monotonic() < drain_until and time.monotonic() - last_progress < cfg.stall_s:
        if _retrying(lambda: _only_hostile_left(store, writer)):
            return
        time.sleep(2)
        count = _retrying(store.count_tasks)
        if count != left:  # rows gone, or children a purge wrote: the deployment acts
            left, last_progress = count, time.monotonic()


def _retrying(read: Callable[[], T], attempts: int = 30) -> T:
    """``read()``, again every 5 s while it fails: PostgreSQL restarted by other work."""
    for attempt in range(attempts):
        try:
            return read()
        except Exception:
            if attempt == attempts - 1:
                raise
            time.sleep(5)
    raise AssertionError("unreachable")


def run_soak(
    cfg: SoakConfig,
    work: Path,
    metastore_url: str,
    dagster_pg: Mapping[str, str] | None,
    log: Any = print,
) -> dict[str, Any]:
    """Run one soak phase (see the module docstring); returns its results."""
    policy = TaskPolicy(lease_timeout_ms=cfg.lease_timeout_ms, grace_ms=cfg.grace_ms)
    store = Metastore(metastore_url, policy=policy)
    store.init_schema()
    writer = PolarisWriter(store, work)
    daemon = DaemonHarness(
        work / "home",
        DaemonConfig(
            metastore_url=metastore_url,
            postgres=dagster_pg,
            max_concurrent_runs=cfg.max_concurrent_runs,
            lease_timeout_ms=cfg.lease_timeout_ms,
            grace_ms=cfg.grace_ms,
            sweep_interval_s=cfg.sweep_interval_s,
            fast_monitoring=False,
            extra_env=retention_env(),
        ),
    )
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with daemon:
        daemon.wait_for(
            lambda: daemon.sensor_ticks(limit=1), timeout_s=300, what="the sweeper's first tick"
        )
        watcher = RowWatcher(metastore_url, policy).start()
        sampler = Sampler(cfg, daemon, metastore_url, dagster_pg).start()
        t0 = sampler.t0
        end = time.monotonic() + cfg.minutes * 60
        next_event = time.monotonic()
        while time.monotonic() < end:
            try:
                event = writer.step()
            except Exception as exc:  # the server restarted under the writer: go on
                sampler.errors.append(f"writer: {type(exc).__name__}: {exc}"[:300])
                next_event += cfg.event_interval_s
                wait_until(next_event)
                continue
            if event.n % 20 == 0:
                log(
                    f"{time.time() - t0:6.0f} s: event {event.n} ({event.kind}); "
                    f"{store.count_tasks()} rows; load {os.getloadavg()[0]:.1f}"
                )
            next_event += cfg.event_interval_s
            wait_until(next_event)
        writer_end = time.time() - t0
        _, present = _retrying(store.tasks_with_state)
        at_writer_end = account(writer.events, watcher.snapshot(), present, writer)
        log(f"writer stopped at {writer_end:.0f} s: {json.dumps(at_writer_end)[:400]}")
        _drain(cfg, store, writer)
        drained = time.time() - t0
        time.sleep(2 * cfg.sample_s)  # the last runs' ends, one more sample
        watcher.sample()
        sampler.stop()
        watcher.stop()
        _, present = _retrying(store.tasks_with_state)
        rows = watcher.snapshot()
        final = account(writer.events, rows, present, writer)
        sampler.book.poll(daemon.instance)
        ticks = [
            {
                "t": tick.timestamp - t0,
                "s": tick.end_timestamp - tick.timestamp,
                "status": tick.status.value,
                "runs": len(tick.run_ids),
            }
            for tick in daemon.sensor_ticks()
            if tick.end_timestamp
        ]
        overlaps = overlapping_holders(rows, sampler.book.ends(), cfg.lease_timeout_ms)
        runs = {k: asdict(v) for k, v in sampler.book.runs.items()}
        # Each run left, with its last update and whether the report sensor tagged it.
        present_runs = {
            r.dagster_run.run_id: {
                "updated": r.update_timestamp.timestamp(),
                "reported": TAG_TOTAL in r.dagster_run.tags,
            }
            for r in daemon.instance.get_run_records()
        }
        ended_at = time.time()
        log_tail = daemon.diagnose(tail_lines=5)
    store.dispose()
    return {
        "config": asdict(cfg),
        "started": started,
        "machine": machine(),
        "writer_end_s": writer_end,
        "drained_s": drained,
        "at_writer_end": at_writer_end,
        "final": final,
        "events": [e.to_dict() for e in writer.events],
        "latencies": latencies(writer.events, rows, cfg, t0),
        "samples": sampler.samples,
        "db": sampler.db,
        "ticks": sorted(ticks, key=lambda x: x["t"]),
        "runs": runs,
        "backdated": sampler.backdated,
        "backdated_again": sampler.backdated_again,
        "present_runs": present_runs,
        "t0": t0,
        "ended_at": ended_at,
        "overlaps": overlaps,
        "task_rows_seen": len(rows),
        "gone_times": sorted(h.gone_at - t0 for h in rows.values() if h.gone_at is not None),
        "watcher_errors": watcher.errors,
        "sampler_errors": sampler.errors[:20],
        "daemon": log_tail,
    }


@contextlib.contextmanager
def _dagster_pg(instance: str) -> Iterator[dict[str, str] | None]:
    if instance == "sqlite":
        yield None
        return
    with temp_database("soak_dagster") as url:
        u = make_url(url)
        yield {
            "DAGSTER_PG_HOST": u.host or "127.0.0.1",
            "DAGSTER_PG_PORT": str(u.port or 5432),
            "DAGSTER_PG_USERNAME": u.username or "postgres",
            "DAGSTER_PG_PASSWORD": u.password or "",
            "DAGSTER_PG_DB": u.database or "",
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--instance", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--event-interval", type=float, default=SoakConfig.event_interval_s)
    parser.add_argument("--retention-age", type=float, default=SoakConfig.retention_age_s)
    parser.add_argument("--drain", type=float, default=SoakConfig.drain_s)
    parser.add_argument("--out", type=Path, default=None, help="results JSON file")
    args = parser.parse_args(argv)
    cfg = SoakConfig(
        instance=args.instance,
        minutes=args.minutes,
        event_interval_s=args.event_interval,
        retention_age_s=args.retention_age,
        drain_s=args.drain,
    )
    out = args.out or RESULTS_DIR / f"{args.instance}.json"
    # A SIGTERM unwinds: the daemon is stopped and the databases dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with (
        tempfile.TemporaryDirectory(prefix=f"pp_soak_{args.instance}_") as tmp,
        temp_database("soak_metastore") as url,
        _dagster_pg(args.instance) as pg,
    ):
        result = run_soak(cfg, Path(tmp), url, pg, log=lambda m: print(m, flush=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print(f"wrote {out}: final {json.dumps(result['final'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
