"""A real ``dagster-daemon`` over a temporary DAGSTER_HOME, for tests and the daemon benchmark.

``DaemonHarness`` writes a ``dagster.yaml`` (the run queue, run launcher and
log level as ``deploy/dagster.yaml`` ships them, but for the total of runs in
progress; the DefaultRunLauncher there is one process per run; run retries;
run monitoring with short intervals unless the deployed ones are asked for;
SQLite storage or dagster-postgres) and a ``workspace.yaml`` that
loads a code location module (the repository's ``definitions`` by default) with
the repository root as working directory, then starts ``dagster-daemon run``
in a session of its own, so stopping it reaches the code server, the run
workers and their step processes too.

The test process opens the same instance (``instance``) to read runs, tags and
sensor ticks, and waits on conditions with a bound (``wait_for``); a timeout
fails with the daemon's log tail and the runs it knows.

No pytest import: ``bench/daemon_e2e.py`` uses this module too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import InstigatorTick
from dagster._core.storage.dagster_run import RunRecord

REPO_ROOT = Path(__file__).resolve().parents[1]
# The instance file operators copy: its run queue settings are the harness's too.
DEPLOYED_INSTANCE = REPO_ROOT / "deploy" / "dagster.yaml"
DAEMON_BIN = Path(sys.executable).with_name("dagster-daemon")
SENSOR_NAME = "polaris_task_sweeper"
TASK_JOB = "polaris_task_job"
# Statuses of a run that will not change any more.
FINISHED = frozenset(
    {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
)

T = TypeVar("T")


@dataclass
class DaemonConfig:
    """What the instance and the code location are given."""

    metastore_url: str
    max_concurrent_runs: int = 4
    lease_timeout_ms: int = 10_000
    grace_ms: int = 0
    max_attempts: int | None = None
    storage_config: str | None = None
    sweep_interval_s: float = 1.0
    sweep_jitter: float = 0.0
    # DAGSTER_PG_* of a database for the instance (tests.support.dagster.dagster_pg_env);
    # None keeps Dagster's SQLite storage under DAGSTER_HOME.
    postgres: Mapping[str, str] | None = None
    # The code location module, importable from the repository root.
    module: str = "definitions"
    run_retries: int = 2
    # Run monitoring with intervals of seconds, so that tests see a run that never
    # started at once (a started run's dead worker is not seen by the default
    # launcher); False keeps deploy/dagster.yaml's (the benchmark: what operators run).
    fast_monitoring: bool = True
    extra_env: Mapping[str, str] = field(default_factory=dict)


def _postgres_storage(pg: Mapping[str, str]) -> dict[str, Any]:
    # Written out, not as {env: ...}: the test process opens the instance too.
    db: dict[str, Any] = {
        "scheme": "postgresql+psycopg2",
        "hostname": pg["DAGSTER_PG_HOST"],
        "port": int(pg["DAGSTER_PG_PORT"]),
        "username": pg["DAGSTER_PG_USERNAME"],
        "db_name": pg["DAGSTER_PG_DB"],
    }
    if pg.get("DAGSTER_PG_PASSWORD"):
        db["password"] = pg["DAGSTER_PG_PASSWORD"]
    return {"postgres": {"postgres_db": db}}


# Short intervals: a worker that never starts, or dies, is noticed in seconds.
_FAST_MONITORING = {"enabled": True, "start_timeout_seconds": 120, "poll_interval_seconds": 2}


def deployed_instance() -> dict[str, Any]:
    """``deploy/dagster.yaml`` as shipped."""
    doc: dict[str, Any] = yaml.safe_load(DEPLOYED_INSTANCE.read_text(encoding="utf-8"))
    return doc


def instance_yaml(config: DaemonConfig) -> dict[str, Any]:
    """The ``dagster.yaml`` of the harness (see the module docstring)."""
    deployed = deployed_instance()
    queue = deployed["run_coordinator"]
    # The shipped queue (interval, parallel launches, the per-realm cap), with the
    # test's own total: what a test or the benchmark measures is what operators run.
    queue["config"] = {**queue["config"], "max_concurrent_runs": config.max_concurrent_runs}
    doc: dict[str, Any] = {
        "run_coordinator": queue,
        "python_logs": deployed["python_logs"],
        "run_launcher": deployed["run_launcher"],
        "run_retries": {"enabled": True, "max_retries": config.run_retries},
        "run_monitoring": _FAST_MONITORING
        if config.fast_monitoring
        else deployed["run_monitoring"],
        "telemetry": {"enabled": False},
    }
    if config.postgres is not None:
        doc["storage"] = _postgres_storage(config.postgres)
    return doc


def workspace_yaml(module: str) -> dict[str, Any]:
    return {
        "load_from": [
            {"python_module": {"module_name": module, "working_directory": str(REPO_ROOT)}}
        ]
    }


def daemon_env(config: DaemonConfig, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    env.update(
        {
            "DAGSTER_HOME": str(home),
            "POLARIS_METASTORE_URL": config.metastore_url,
            "POLARIS_PIPELINE_LEASE_TIMEOUT_MS": str(config.lease_timeout_ms),
            "POLARIS_PIPELINE_GRACE_MS": str(config.grace_ms),
            "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS": str(config.sweep_interval_s),
            "POLARIS_PIPELINE_SWEEPER_JITTER": str(config.sweep_jitter),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if config.max_attempts is not None:
        env["POLARIS_PIPELINE_MAX_ATTEMPTS"] = str(config.max_attempts)
    if config.storage_config is not None:
        env["POLARIS_PIPELINE_STORAGE_CONFIG"] = config.storage_config
    env.update(config.extra_env)
    return env


def _children_of() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (no psutil)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: split after it.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    tree = _children_of()
    out: list[int] = []
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(tree.get(child, []))
    return out


def kill_tree(pids: Sequence[int]) -> None:
    """SIGKILL ``pids`` and everything below them (descendants first read, then killed)."""
    every: list[int] = []
    for pid in pids:
        every.extend([pid, *descendants(pid)])
    for pid in every:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class DaemonHarness:
    """One ``dagster-daemon run`` and the instance it serves; a context manager."""

    def __init__(self, home: Path, config: DaemonConfig) -> None:
        self.home = home
        self.config = config
        self.log_path = home / "daemon.log"
        self.workspace = home / "workspace.yaml"
        self._proc: subprocess.Popen[bytes] | None = None
        self._instance: DagsterInstance | None = None

    # -- lifecycle ----------------------------------------------------------------

    def write_files(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml(self.config)))
        self.workspace.write_text(yaml.safe_dump(workspace_yaml(self.config.module)))

    def env(self) -> dict[str, str]:
        return daemon_env(self.config, self.home)

    def start(self) -> DaemonHarness:
        self.write_files()
        # Create and stamp the instance's storage here, once: the daemon and its code
        # server each open the instance as they start, and two processes stamping new
        # SQLite databases at once can leave one failing in alembic (seen in CI: the
        # code server died before serving, so the sensor never ticked).
        self.instance.get_runs_count()
        log = open(self.log_path, "ab")  # noqa: SIM115  # closed with the process, in stop()
        self._proc = subprocess.Popen(
            [str(DAEMON_BIN), "run", "-w", str(self.workspace)],
            cwd=REPO_ROOT,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None, "daemon not started"
        return self._proc.pid

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the daemon (it stops its code server), then SIGKILL whatever is left."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        # Read before the daemon goes: its children are re-parented when it exits.
        below = descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_tree([p for p in below if _alive(p)])
        proc.wait(timeout=10)
        if self._instance is not None:
            self._instance.dispose()
            self._instance = None

    def __enter__(self) -> DaemonHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the instance -------------------------------------------------------------

    @property
    def instance(self) -> DagsterInstance:
        if self._instance is None:
            self._instance = DagsterInstance.from_config(str(self.home))
        return self._instance

    def runs(self, job_name: str | None = TASK_JOB) -> list[DagsterRun]:
        """Runs of ``job_name`` (every job with None), oldest first."""
        filters = RunsFilter(job_name=job_name) if job_name else None
        return list(reversed(self.instance.get_runs(filters=filters)))

    def run_records(self, job_name: str | None = TASK_JOB) -> list[RunRecord]:
        """Run records (with create, start and end times), oldest first."""
        filters = RunsFilter(job_name=job_name) if job_name else None
        return list(reversed(self.instance.get_run_records(filters=filters)))

    def run_statuses(self, job_name: str | None = TASK_JOB) -> dict[str, DagsterRunStatus]:
        return {run.run_id: run.status for run in self.runs(job_name)}

    def sensor_ticks(
        self, name: str = SENSOR_NAME, limit: int | None = None
    ) -> list[InstigatorTick]:
        """The sensor's ticks, newest first (none before its first evaluation)."""
        for state in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            if state.instigator_name == name:
                return list(
                    self.instance.get_ticks(
                        state.instigator_origin_id, state.selector_id, limit=limit
                    )
                )
        return []

    def run_log(self, run_id: str) -> str:
        """Every message of a run's event log, one a line (for assertions and failures)."""
        records = self.instance.all_logs(run_id)
        return "\n".join(r.user_message or "" for r in records)

    def run_pids(self, run_id: str) -> set[int]:
        """The processes that wrote events of the run: its worker and its step processes."""
        pids: set[int] = set()
        for record in self.instance.all_logs(run_id):
            event = record.dagster_event
            if event is not None and event.pid:
                pids.add(event.pid)
        return pids

    def output_metadata(self, run_id: str, step_key: str, output: str) -> dict[str, Any]:
        """The metadata of one step output of a run, as plain values."""
        from dagster import DagsterEventType

        for record in self.instance.all_logs(run_id, of_type=DagsterEventType.STEP_OUTPUT):
            event = record.dagster_event
            if event is None or event.step_key != step_key:
                continue
            data = event.step_output_data
            if data.output_name == output:
                return {k: getattr(v, "value", v) for k, v in data.metadata.items()}
        return {}

    def reexecute(self, run_id: str, *, from_failure: bool = False) -> str:
        """Re-execute a run as the UI's buttons do; returns the new run's id.

        The UI's ``launchRunReexecution`` in short: the job from the code location,
        a re-execution run with the parent's tags, submitted to the run
        coordinator (the queue the daemon drains). The code server this starts
        gets the daemon's environment.
        """
        from dagster._core.definitions.selector import JobSubsetSelector
        from dagster._core.execution.plan.resume_retry import ReexecutionStrategy
        from dagster._core.remote_representation.external import RemoteJob  # noqa: F401
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import WorkspaceFileTarget

        parent = self.instance.get_run_by_id(run_id)
        assert parent is not None and parent.remote_job_origin is not None
        origin = parent.remote_job_origin.repository_origin
        strategy = (
            ReexecutionStrategy.FROM_FAILURE if from_failure else ReexecutionStrategy.ALL_STEPS
        )
        saved = dict(os.environ)
        os.environ.update(self.env())
        try:
            target = WorkspaceFileTarget(paths=[str(self.workspace)])
            with WorkspaceProcessContext(self.instance, target) as process:
                request = process.create_request_context()
                location = request.get_code_location(origin.code_location_origin.location_name)
                remote_job = location.get_job(
                    JobSubsetSelector(
                        location_name=location.name,
                        repository_name=origin.repository_name,
                        job_name=parent.job_name,
                        op_selection=None,
                    )
                )
                run = self.instance.create_reexecuted_run(
                    parent_run=parent,
                    request_context=request,
                    code_location=location,
                    remote_job=remote_job,
                    strategy=strategy,
                    use_parent_run_tags=True,
                )
                self.instance.submit_run(run.run_id, request)
                return run.run_id
        finally:
            os.environ.clear()
            os.environ.update(saved)

    # -- waiting ------------------------------------------------------------------

    def wait_for(
        self,
        condition: Callable[[], T | None],
        *,
        timeout_s: float,
        what: str,
        interval_s: float = 0.5,
    ) -> T:
        """``condition()``'s first truthy value, polled until ``timeout_s``.

        On timeout, or when the daemon died, fails with what was awaited, the
        runs and the tail of the daemon's log.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            value = condition()
            if value:
                return value
            if self._proc is not None and self._proc.poll() is not None:
                raise AssertionError(
                    f"dagster-daemon exited while waiting for {what}\n{self.diagnose()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.diagnose()}"
                )
            time.sleep(interval_s)

    def wait_runs_finished(self, *, timeout_s: float, job_name: str = TASK_JOB) -> list[DagsterRun]:
        def all_done() -> list[DagsterRun] | None:
            runs = self.runs(job_name)
            return runs if runs and all(r.status in FINISHED for r in runs) else None

        return self.wait_for(
            all_done, timeout_s=timeout_s, what=f"every run of {job_name} to finish"
        )

    def wait_run_finished(self, run_id: str, *, timeout_s: float) -> DagsterRun:
        def finished() -> DagsterRun | None:
            run = self.instance.get_run_by_id(run_id)
            return run if run is not None and run.is_finished else None

        return self.wait_for(finished, timeout_s=timeout_s, what=f"run {run_id} to finish")

    def diagnose(self, tail_lines: int = 40) -> str:
        runs = self.runs(None)
        # Counts first, then only the runs that did not succeed: a soak's hundreds of
        # green runs would push what matters past the report's truncation.
        by_status = Counter(r.status.value for r in runs)
        others = [
            (r.run_id[:8], r.job_name, r.status.value) for r in runs if r.status.value != "SUCCESS"
        ]
        lines = [f"runs by status: {dict(by_status)}; not succeeded: {others[:30]}"]
        ticks = self.sensor_ticks(limit=3)
        for tick in ticks:
            lines.append(
                f"tick {tick.status.value}: skip={tick.skip_reason!r} "
                f"error={tick.error.message.strip() if tick.error else None!r}"
            )
        try:
            log = self.log_path.read_text(errors="replace").splitlines()[-tail_lines:]
        except OSError:
            log = []
        return "\n".join([*lines, "daemon log tail:", *log])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = [
    "FINISHED",
    "REPO_ROOT",
    "SENSOR_NAME",
    "TASK_JOB",
    "DaemonConfig",
    "DaemonHarness",
    "descendants",
    "instance_yaml",
    "kill_tree",
]
