"""Two Dagster deployments and Polaris itself sweep one PostgreSQL metastore: each task runs once.

Each deployment is its own process with its own Dagster instance (its own
DAGSTER_HOME, SQLite storage) and its own sensor loop: it evaluates
``polaris_task_sweeper`` with its own cursor and runs every requested run with
``execute_in_process`` on its instance, as a daemon plus run workers would.
Beside them a Polaris server is modelled by ``polaris_load_tasks`` (Polaris's
list-then-compare-and-set lease), which "runs" each task it leased by deleting
its files and then its row, unfenced, as Polaris does.

A few hundred batch cleanup tasks, each with files of its own. Leases are short
(a few seconds), so leases granted by one tick lapse while earlier runs of the
tick execute, and the three executors really compete for the same rows.

Afterwards: every row and every file is gone, and the journal (each deployment's
successful runs, by their ``polaris/task_id`` and ``polaris/attempt`` tags and the
step's outcome, plus the tasks Polaris ran) holds every task exactly once.

Run as a module (``python -m tests.test_two_deployments deploy ...``) this file
is one deployment's process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, delete

from builders.polaris_leaser import polaris_batch_files, polaris_load_tasks
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.schema import entities
from tests.support.dagster import dagster_home

ROOT = Path(__file__).resolve().parent.parent
REALM = "POLARIS"
N_TASKS = 300
FILES_PER_TASK = 2
LEASE_TIMEOUT_MS = 4_000  # short: leases of a tick may lapse while its earlier runs execute
MAX_RUNS_PER_TICK = 6
POLARIS_BATCH = 2  # tasks Polaris leases per round
POLARIS_PAUSE_S = 0.4  # between its rounds
OLD_MS = 10 * 60_000
READY_TIMEOUT_S = 60
RUN_DEADLINE_S = 100  # each deployment stops by itself after this
DEPLOYMENTS = ("deployment-a", "deployment-b")


# -- one deployment (runs in its own process) ----------------------------------------


def run_deployment(
    home: Path, metastore_url: str, allowed_prefix: str, go: Path, deadline_s: float
) -> None:
    """A sensor loop and its runs on the instance at ``home`` until no task is left."""
    from dagster import DagsterInstance, SensorResult, SkipReason, build_sensor_context

    from polaris_pipeline.dagster.resources import (
        PolarisMetastoreResource,
        PolarisStorageResource,
        SweeperSettings,
    )
    from polaris_pipeline.dagster.sweeper import SENSOR_NAME
    from polaris_pipeline.dagster.task_job import polaris_task_job
    from tests.support.dagster import deployed_sensor, sweeper_resources

    metastore = PolarisMetastoreResource(
        url=metastore_url, realms=[REALM], lease_timeout_ms=LEASE_TIMEOUT_MS, grace_ms=0
    )
    storage = PolarisStorageResource(allowed_prefixes=[allowed_prefix])
    # A short jittered cadence; a full tick (a backlog) sweeps again at once.
    sweeper = SweeperSettings(interval_seconds=0.3, jitter=0.5, max_runs_per_tick=MAX_RUNS_PER_TICK)
    store = metastore.get_metastore()
    with DagsterInstance.from_config(str(home)) as instance:
        (home / "ready").touch()
        while not go.exists():
            time.sleep(0.05)
        stop_at = time.monotonic() + deadline_s
        cursor: str | None = None
        ticks = runs = 0
        while time.monotonic() < stop_at:
            with build_sensor_context(
                instance=instance,
                cursor=cursor,
                resources=sweeper_resources(metastore, sweeper),
            ) as context:
                result = deployed_sensor(SENSOR_NAME)(context)
            ticks += 1
            requests = []
            if isinstance(result, SensorResult):
                cursor = result.cursor or cursor
                requests = list(result.run_requests or [])
            for request in requests:
                polaris_task_job.execute_in_process(
                    run_config=request.run_config,
                    tags=request.tags,
                    instance=instance,
                    resources={"metastore": metastore, "storage": storage},
                    raise_on_error=False,
                )
                runs += 1
            if not requests:
                if store.count_tasks([REALM]) == 0:
                    break
                assert isinstance(result, SensorResult | SkipReason)
                time.sleep(0.05)
        print(f"{home.name}: {ticks} tick(s), {runs} run(s)", flush=True)


def _main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.test_two_deployments")
    sub = parser.add_subparsers(dest="command", required=True)
    deploy = sub.add_parser("deploy", help="one deployment's sensor loop and runs")
    deploy.add_argument("--home", type=Path, required=True)
    deploy.add_argument("--metastore-url", required=True)
    deploy.add_argument("--allowed-prefix", required=True)
    deploy.add_argument("--go", type=Path, required=True)
    deploy.add_argument("--deadline-s", type=float, default=RUN_DEADLINE_S)
    args = parser.parse_args(argv)
    run_deployment(args.home, args.metastore_url, args.allowed_prefix, args.go, args.deadline_s)


# -- Polaris (a thread of the test process) --------------------------------------------


@dataclass
class PolarisServer:
    """Polaris's loadTasks, then its handler: delete the batch's files, then the row."""

    url: str
    executor_id: str = "polaris-server-1"
    ran: list[dict[str, Any]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        engine = create_engine(self.url)
        try:
            while not self.stop.is_set():
                leased = polaris_load_tasks(
                    engine, REALM, self.executor_id, POLARIS_BATCH, timeout_ms=LEASE_TIMEOUT_MS
                )
                for task_id, attempt in leased:
                    self._execute(engine, task_id, attempt)
                self.stop.wait(POLARIS_PAUSE_S)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            engine.dispose()

    def _execute(self, engine: Any, task_id: int, attempt: int) -> None:
        files = polaris_batch_files(engine, REALM, task_id)
        # Leased by us a moment ago: nothing else may have removed the row.
        assert files is not None, f"task {task_id} vanished while leased"
        present = 0
        for uri in files:
            try:
                os.remove(uri.removeprefix("file://"))
                present += 1
            except FileNotFoundError:
                pass  # Polaris logs and skips a missing file
        with engine.begin() as conn:
            conn.execute(
                delete(entities).where(entities.c.realm_id == REALM, entities.c.id == task_id)
            )
        self.ran.append({"task_id": task_id, "attempt": attempt, "deleted": present})


# -- the test ---------------------------------------------------------------------------


pytestmark = [pytest.mark.lease_policy(lease_timeout_ms=LEASE_TIMEOUT_MS), pytest.mark.slow]


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Subprocesses started by the test; each group is killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        _stop_group(process)


def _seed(metastore: Metastore, root: Path) -> tuple[set[int], list[Path]]:
    now = metastore.now_ms()
    tasks, paths = [], []
    for i in range(N_TASKS):
        location = root / "ns" / f"t{i}"
        (location / "metadata").mkdir(parents=True)
        files = [location / "metadata" / f"snap-{i}-{j}.avro" for j in range(FILES_PER_TASK)]
        for f in files:
            f.write_bytes(b"x" * 64)
        paths.extend(files)
        tasks.append(
            batch_task(
                REALM,
                [f"file://{f}" for f in files],
                internal={"storageLocation": f"file://{location}"},
                create_timestamp=now - OLD_MS,
            )
        )
    metastore.insert_tasks(tasks)
    return {t.id for t in tasks}, paths


def _count(value: object) -> int:
    """A file count from a run's output metadata (typed there as any metadata value)."""
    assert isinstance(value, int), f"not a count: {value!r}"
    return value


def _journal(home: Path) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The deployment's successful runs that executed their task; and every run's outcome."""
    from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

    executed: list[dict[str, Any]] = []
    outcomes: dict[str, int] = defaultdict(int)
    with DagsterInstance.from_config(str(home)) as instance:
        for run in instance.get_runs():
            if run.status is not DagsterRunStatus.SUCCESS:
                outcomes[f"run {run.status.value.lower()}"] += 1
                continue
            [output] = [
                entry.dagster_event.step_output_data
                for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_OUTPUT)
                if entry.dagster_event is not None
                and entry.dagster_event.step_key == "run_polaris_task"
                and entry.dagster_event.step_output_data.output_name == "outcome"
            ]
            meta = {key: value.value for key, value in output.metadata.items()}
            status = str(meta["status"])
            # "done" with file counts: the handler ran. "done" without them: the row
            # was gone when the run looked (someone else ran it); "already-done" and
            # "lease-lost": the run did nothing.
            ran = status == "done" and "files deleted" in meta
            outcomes[status if ran or status != "done" else "done (already gone)"] += 1
            if ran:
                executed.append(
                    {
                        "task_id": int(run.tags["polaris/task_id"]),
                        "attempt": int(run.tags["polaris/attempt"]),
                        "run_id": run.run_id,
                        "deleted": _count(meta["files deleted"]),
                        "already_gone": _count(meta["files already gone"]),
                    }
                )
    return executed, dict(outcomes)


@pytest.mark.timeout(170)
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_two_deployments_and_polaris_run_every_task_exactly_once(
    metastore: Metastore, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    root = tmp_path / "wh"
    task_ids, paths = _seed(metastore, root)
    url = metastore.url.render_as_string(hide_password=False)
    go = tmp_path / "go"
    homes = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    for name in DEPLOYMENTS:
        home = dagster_home(tmp_path / name)
        homes.append(home)
        log = (tmp_path / f"{name}.log").open("wb")
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.test_two_deployments",
                    "deploy",
                    "--home",
                    str(home),
                    "--metastore-url",
                    url,
                    "--allowed-prefix",
                    f"file://{root}",
                    "--go",
                    str(go),
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        log.close()

    def logs() -> str:
        return "\n".join(
            f"--- {name}\n" + (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
            for name in DEPLOYMENTS
        )

    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all((home / "ready").exists() for home in homes):
        if any(p.poll() is not None for p in processes):
            pytest.fail(f"a deployment exited before it was ready:\n{logs()}")
        if time.monotonic() > deadline:
            pytest.fail(f"deployments not ready in {READY_TIMEOUT_S} s:\n{logs()}")
        time.sleep(0.1)

    # All three start together.
    polaris = PolarisServer(url)
    thread = threading.Thread(target=polaris.run, name="polaris", daemon=True)
    started = time.monotonic()
    go.touch()
    thread.start()
    try:
        for process in processes:
            process.wait(timeout=RUN_DEADLINE_S + 15)
    finally:
        polaris.stop.set()
        thread.join(timeout=10)
    elapsed = time.monotonic() - started
    assert not polaris.errors, polaris.errors
    assert all(p.returncode == 0 for p in processes), logs()

    # Everything is gone: every row, every file.
    assert metastore.count_tasks() == 0, f"{metastore.count_tasks()} task(s) left\n{logs()}"
    left = [p for p in paths if p.exists()]
    assert not left, f"{len(left)} file(s) left, e.g. {left[:3]}"

    # The journal: who executed which task (a run that found its task gone or its lease
    # lost did nothing and is not an execution).
    executions: dict[int, list[str]] = defaultdict(list)
    journal: list[tuple[str, dict[str, Any]]] = []
    summary: dict[str, dict[str, int]] = {}
    for name, home in zip(DEPLOYMENTS, homes, strict=True):
        executed, outcomes = _journal(home)
        summary[name] = outcomes
        assert not any(k.startswith("run ") for k in outcomes), (name, outcomes)  # none failed
        for entry in executed:
            executions[entry["task_id"]].append(
                f"{name} run {entry['run_id']} (attempt {entry['attempt']})"
            )
            journal.append((name, entry))
    for entry in polaris.ran:
        executions[entry["task_id"]].append(f"polaris (attempt {entry['attempt']})")
        journal.append(("polaris", entry))
    summary["polaris"] = {"done": len(polaris.ran)}
    print(f"\n{N_TASKS} tasks in {elapsed:.1f} s: {summary}")

    twice = {task: who for task, who in executions.items() if len(who) > 1}
    assert not twice, f"{len(twice)} task(s) executed more than once: {list(twice.items())[:3]}"
    assert set(executions) == task_ids  # every task executed, so exactly once
    # The files agree: every execution found all of its task's files still there, so
    # nobody had run that task before it.
    for who, entry in journal:
        assert entry["deleted"] == FILES_PER_TASK, (who, entry)
        assert entry.get("already_gone", 0) == 0, (who, entry)
    # All three really took part.
    for name in DEPLOYMENTS:
        assert summary[name].get("done", 0) > 0, summary
    assert polaris.ran, summary


if __name__ == "__main__":
    _main(sys.argv[1:])
