"""``polaris_task_job`` scaled out on dagster-celery: the steps run in a Celery worker.

For real: RabbitMQ (``scripts/services.sh`` starts it), a Celery worker started
as a separate process (``celery -A dagster_celery.app worker`` with the settings
of ``deploy/celery/dagster_celery_config.py``), a persistent Dagster instance (``DAGSTER_HOME``
with ``dagster.yaml``, dagster-postgres storage) shared by this process (the run
worker, which orchestrates) and the Celery worker (which runs the steps), a
PostgreSQL metastore and a pyiceberg table on local files. The run is requested
by the sweeper of the ``celery_definitions`` code location and executed from the
same code pointer a run launcher would use.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    JobDefinition,
    SensorResult,
    build_sensor_context,
    execute_job,
)
from dagster._core.definitions.dependency import NodeHandle
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.run_coordinator import QueuedRunCoordinator
from sqlalchemy.engine import make_url

from builders import tasks as built_tasks
from polaris_pipeline.dagster import TASK_EXECUTOR_ENV
from polaris_pipeline.dagster.celery import (
    BACKEND_ENV,
    BROKER_ENV,
    IO_BASE_DIR_ENV,
    QUEUE_ENV,
    celery_executor_config,
)
from polaris_pipeline.dagster.contract import FINISH_STEP, JOB_NAME
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import URL_ENV, SettingsError, executor_settings
from tests.support.code_location import import_location
from tests.support.iceberg import Warehouse, table_files

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
WORKER_CONFIG_DIR = ROOT / "deploy" / "celery"  # dagster_celery_config.py
INSTANCE_CONFIG = ROOT / "deploy" / "celery" / "dagster.yaml"
BROKER_URL = os.environ.get("POLARIS_PIPELINE_TEST_BROKER", "pyamqp://guest:guest@127.0.0.1:5672//")
OLD_MS = 10 * 60_000
# dagster-celery registers its task again for every step it submits; Celery 5.7 warns.
pytestmark = pytest.mark.filterwarnings("ignore:Task name 'execute_plan' is already registered")
WORKER_LIFETIME_S = 150  # the worker is killed after this, whatever happens to the test
WORKER_READY_S = 60


# -- fixtures ----------------------------------------------------------------------


def _broker_reachable(url: str) -> bool:
    parsed = make_url(url.replace("pyamqp://", "amqp://", 1))
    try:
        with socket.create_connection((parsed.host or "127.0.0.1", parsed.port or 5672), 3):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def broker() -> str:
    if not _broker_reachable(BROKER_URL):
        pytest.fail(f"no broker at {BROKER_URL}: run scripts/services.sh (it starts RabbitMQ)")
    return BROKER_URL


@pytest.fixture
def dagster_home(tmp_path: Path) -> Path:
    """A DAGSTER_HOME with the deployment's own instance file, deploy/celery/dagster.yaml."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_CONFIG, home / "dagster.yaml")
    return home


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    name: str  # the Celery node name, <name>@<host>
    log: Path

    def pids(self) -> set[int]:
        """Every live process of the worker: its process group (the pool forks stay in it)."""
        pgid = os.getpgid(self.process.pid)
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == pgid:
                        found.add(int(entry.name))
                except ProcessLookupError:
                    continue
        return found

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Warm shutdown of the worker's whole process group, then a kill."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@pytest.fixture
def celery_env(
    broker: str,
    dagster_home: Path,
    dagster_pg_env: dict[str, str],
    metastore: Metastore,
    tmp_path: Path,
) -> dict[str, str]:
    """The environment of the code location, the run worker and the Celery worker alike."""
    return {
        **dagster_pg_env,
        URL_ENV: metastore.url.render_as_string(hide_password=False),
        # Step outputs where every worker reaches them (a shared volume in production).
        IO_BASE_DIR_ENV: str(tmp_path / "step-outputs"),
        BROKER_ENV: broker,
        TASK_EXECUTOR_ENV: "celery",
        # A queue of this test's own: no other worker on the broker takes its steps.
        QUEUE_ENV: f"polaris-test-{uuid.uuid4().hex[:10]}",
        "DAGSTER_HOME": str(dagster_home),
    }


@pytest.fixture
def worker(celery_env: dict[str, str], tmp_path: Path) -> Iterator[Worker]:
    """A Celery worker as production starts it, in a process group of its own.

    ``celery -A dagster_celery.app worker``: the app reads its settings from
    ``deploy/celery/dagster_celery_config.py`` (on PYTHONPATH), which reads the
    same environment as the run worker; the worker listens on the test's queue.
    """
    name = f"polaris-test-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "celery-worker.log"
    env = {
        **os.environ,
        **celery_env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(WORKER_CONFIG_DIR)]),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("POLARIS_PIPELINE_STORAGE_CONFIG", None)
    command = [
        # A bounded lifetime: `timeout` signals the whole group, should teardown never run.
        "timeout",
        "--kill-after=10",
        str(WORKER_LIFETIME_S),
        str(BIN / "celery"),
        "-A",
        "dagster_celery.app",
        "worker",
        "-Q",
        celery_env[QUEUE_ENV],
        "-I",
        "celery_definitions",  # the code location, imported when the worker starts
        "-n",
        f"{name}@%h",  # %h: the host name
        "--concurrency=2",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, killed as one at teardown
        )
    running = Worker(process, f"{name}@{socket.gethostname()}", log)
    try:
        deadline = time.monotonic() + WORKER_READY_S
        while " ready." not in running.output():
            if process.poll() is not None:
                pytest.fail(f"celery worker exited ({process.returncode}):\n{running.output()}")
            if time.monotonic() > deadline:
                pytest.fail(f"celery worker not ready in {WORKER_READY_S} s:\n{running.output()}")
            time.sleep(0.2)
        yield running
    finally:
        _stop(process)


# -- the job variant -----------------------------------------------------------------


def _shipped_celery_job() -> JobDefinition:
    """The task job as the Celery code location (celery_definitions.py) builds it."""
    from polaris_pipeline.dagster import TASK_EXECUTOR_ENV, build_defs_from_env

    return build_defs_from_env({TASK_EXECUTOR_ENV: "celery"}).get_job_def(JOB_NAME)


def _same_job_but_the_executor(celery_job: JobDefinition) -> None:
    assert celery_job.name == polaris_task_job.name == JOB_NAME
    assert celery_job.executor_def.name == "celery"
    assert polaris_task_job.executor_def.name == "in_process"  # one task's work: no fork per step
    # The same ops (not copies), wired the same way.
    ops = {d.name: d for d in polaris_task_job.graph.node_defs}
    assert {d.name: d for d in celery_job.graph.node_defs} == ops
    assert all(d is ops[d.name] for d in celery_job.graph.node_defs)
    assert celery_job.graph.dependencies == polaris_task_job.graph.dependencies
    assert dict(celery_job.tags) == dict(polaris_task_job.tags)
    assert celery_job.tags["dagster/max_retries"] == "2"
    for node in (
        "run_polaris_task",
        "run_manifest_children",
        "run_metadata_children",
        "run_current_metadata_children",
    ):
        handle = NodeHandle(node, None)
        assert celery_job.get_retry_policy_for_handle(
            handle
        ) == polaris_task_job.get_retry_policy_for_handle(handle)


def test_celery_job_is_the_task_job_with_another_executor() -> None:
    _same_job_but_the_executor(_shipped_celery_job())


def test_executor_config_names_the_variables_never_their_values() -> None:
    secret = "pyamqp://polaris:s3cret@rabbit:5672//"
    section = executor_settings({BROKER_ENV: secret, BACKEND_ENV: "redis://:pw@r/1"})
    config = celery_executor_config(section)
    assert config == {"broker": {"env": BROKER_ENV}, "backend": {"env": BACKEND_ENV}}
    assert "s3cret" not in repr(config) and "s3cret" not in repr(section)
    queued = celery_executor_config(executor_settings({QUEUE_ENV: " polaris "}))
    assert queued == {"config_source": {"task_default_queue": "polaris"}}
    # Blank is unset: dagster-celery's defaults.
    assert celery_executor_config(executor_settings({BROKER_ENV: " ", QUEUE_ENV: ""})) == {}


def test_an_unknown_executor_is_refused_naming_its_variable() -> None:
    from polaris_pipeline.dagster import TASK_EXECUTOR_ENV, build_defs_from_env

    with pytest.raises(SettingsError, match=f"^{TASK_EXECUTOR_ENV}='kubernetes': "):
        build_defs_from_env({TASK_EXECUTOR_ENV: "kubernetes"})


def test_celery_location_is_the_main_location_with_the_task_job_on_celery(
    tmp_path: Path,
) -> None:
    from polaris_pipeline.dagster import TASK_EXECUTOR_ENV, build_defs_from_env

    base = build_defs_from_env({})
    defs = build_defs_from_env({TASK_EXECUTOR_ENV: "celery", IO_BASE_DIR_ENV: str(tmp_path)})
    assert sorted(j.name for j in defs.jobs or []) == sorted(j.name for j in base.jobs or [])
    assert [s.name for s in defs.sensors or []] == [s.name for s in base.sensors or []]
    assert [s.name for s in defs.schedules or []] == [s.name for s in base.schedules or []]
    assert len(list(defs.assets or [])) == len(list(base.assets or []))
    for job in base.jobs or []:
        executor = defs.resolve_job_def(job.name).executor_def.name
        unchanged = base.resolve_job_def(job.name).executor_def.name
        assert executor == ("celery" if job.name == JOB_NAME else unchanged), job.name
    assert defs.resolve_sensor_def(SENSOR_NAME).job_name == JOB_NAME
    io_manager = (defs.resources or {})["io_manager"]
    assert io_manager.base_dir == str(tmp_path)
    without_dir = build_defs_from_env({TASK_EXECUTOR_ENV: "celery"})
    assert "io_manager" not in (without_dir.resources or {})


def test_worker_config_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(WORKER_CONFIG_DIR))
    monkeypatch.setenv(BROKER_ENV, "pyamqp://polaris:pw@rabbit:5672//")
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    sys.modules.pop("dagster_celery_config", None)
    try:
        config = importlib.import_module("dagster_celery_config")
        settings = {k: v for k, v in vars(config).items() if not k.startswith("_")}
        assert settings == {
            "broker_url": "pyamqp://polaris:pw@rabbit:5672//",
            "result_backend": "rpc://",
            "worker_prefetch_multiplier": 1,
        }
        monkeypatch.delenv(BROKER_ENV)
        with pytest.raises(KeyError, match=BROKER_ENV):
            importlib.reload(config)  # no broker, no worker
    finally:
        sys.modules.pop("dagster_celery_config", None)


# -- a table cleanup fanned out over a Celery worker ----------------------------------


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_table_cleanup_steps_run_in_the_celery_worker(
    metastore: Metastore,
    local_warehouse: Warehouse,
    celery_env: dict[str, str],
    worker: Worker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    victim = local_warehouse.build("victim", appends=1)
    neighbour = local_warehouse.build("neighbour", appends=1)
    victim_files = table_files(victim)
    assert victim_files and all(local_warehouse.exists(f) for f in victim_files)
    neighbour_files = sorted(table_files(neighbour))
    task = built_tasks.drop_table_task(
        victim, realm_id="POLARIS", create_timestamp=metastore.now_ms() - OLD_MS
    )
    metastore.insert_tasks([task])

    for key, value in celery_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POLARIS_PIPELINE_STORAGE_CONFIG", raising=False)
    # Read this test's environment (IO base dir) even if an earlier test imported the
    # location: its modules read the environment when they load.
    celery_definitions = import_location(monkeypatch, "celery_definitions")
    # The code location as a run launcher loads it: module celery_definitions, attribute defs.

    repository = ReconstructableRepository.for_module(
        "celery_definitions", "defs", working_directory=str(ROOT)
    )
    recon_job = repository.get_reconstructable_job(JOB_NAME)

    with DagsterInstance.from_config(celery_env["DAGSTER_HOME"]) as instance:
        # The deployment's instance file is the one in use: PostgreSQL, queue, retries, monitoring.
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert instance.run_retries_enabled and instance.run_monitoring_enabled
        coordinator = instance.run_coordinator
        assert type(coordinator) is QueuedRunCoordinator
        # Queued runs are launched in parallel, as deploy/dagster.yaml does.
        assert coordinator.dequeue_use_threads and coordinator.dequeue_num_workers == 4
        assert coordinator.dequeue_interval_seconds == 1
        resources = dict(celery_definitions.defs.resources or {})
        with build_sensor_context(instance=instance, resources=resources) as context:
            tick = celery_definitions.defs.resolve_sensor_def(SENSOR_NAME)(context)
        assert isinstance(tick, SensorResult)
        [request] = tick.run_requests or []
        assert request.run_key == f"POLARIS:{task.id}:1"

        # One child per step, so the table's few manifests fan out to several Celery steps.
        run_config = copy.deepcopy(request.run_config)
        run_config["ops"]["run_polaris_task"]["config"]["children_per_step"] = 1
        started = time.monotonic()
        with execute_job(
            recon_job, instance=instance, run_config=run_config, tags=request.tags
        ) as result:
            elapsed = time.monotonic() - started
            print(f"\ncelery run: {elapsed:.1f} s")
            assert result.success, worker.output()[-5000:]
            root = result.output_for_node("run_polaris_task", "outcome")
            manifests = result.output_for_node("run_manifest_children")
            later = result.output_for_node("run_metadata_children")
            final = result.output_for_node("run_current_metadata_children")
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.status is DagsterRunStatus.SUCCESS
        assert run.tags["polaris/task_id"] == str(task.id)
        logs = instance.all_logs(result.run_id)

    # The table is gone, its neighbour intact, the task and all its children done.
    left = sorted(f for f in victim_files if local_warehouse.exists(f))
    assert not left, f"{len(left)} file(s) of the dropped table remain, e.g. {left[:3]}"
    assert all(local_warehouse.exists(f) for f in neighbour_files)
    assert metastore.list_tasks() == []
    assert root["children"] == len(manifests) + len(later) + len(final)
    assert root["status"] == "done" and len(final) == 1
    assert len(manifests) >= 2 and later  # the in-run fan-out: several Celery steps

    # Every step ran in the Celery worker: its processes, its node name, not this process.
    starts = {
        entry.dagster_event.step_key: entry.dagster_event.pid
        for entry in logs
        if entry.dagster_event is not None
        and entry.dagster_event.event_type == DagsterEventType.STEP_START
    }
    expected_steps = (
        {"run_polaris_task", "release_metadata_children", "release_current_metadata_children"}
        | {FINISH_STEP}  # the table's last step: its unreferenced-files phase
        | {f"run_manifest_children[{key}]" for key in manifests}
        | {f"run_metadata_children[{key}]" for key in later}
        | {f"run_current_metadata_children[{key}]" for key in final}
    )
    assert set(starts) == expected_steps
    worker_pids = worker.pids()
    assert os.getpid() not in worker_pids
    assert all(pid != os.getpid() for pid in starts.values())
    assert set(starts.values()) <= worker_pids, (starts, worker_pids)
    # The worker's "Executing steps ... in celery worker" event names the Celery node.
    taken_by = {
        entry.dagster_event.step_key: entry.dagster_event.engine_event_data.metadata[
            "Celery worker"
        ].value
        for entry in logs
        if entry.dagster_event is not None
        and entry.dagster_event.event_type == DagsterEventType.ENGINE_EVENT
        and "Celery worker" in entry.dagster_event.engine_event_data.metadata
    }
    assert taken_by == dict.fromkeys(expected_steps, worker.name)
    queued = [
        entry.user_message
        for entry in logs
        if entry.user_message.startswith("Submitting celery task for step")
    ]
    assert len(queued) == len(expected_steps)
    assert all(f'to queue "{celery_env[QUEUE_ENV]}"' in message for message in queued)
    # Every step's outputs went to the shared place (<base>/<run id>/<step key>/...): the
    # children read their leases from there, written by another worker process.
    stored = Path(celery_env[IO_BASE_DIR_ENV]) / result.run_id
    assert {p.name for p in stored.iterdir()} == expected_steps
    # The worker's own log shows it received and ran the steps.
    output = worker.output()
    assert output.count("Task execute_plan[") >= 2 * len(expected_steps)  # received, succeeded
    assert "run_metadata_children[" in output
