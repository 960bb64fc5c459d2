"""The sweeper and its runs through a real ``dagster-daemon`` (issue 15).

Each test starts ``dagster-daemon run`` over a temporary instance (QueuedRunCoordinator,
DefaultRunLauncher: a process per run, run retries, run monitoring) and the
repository's code location, against the session's PostgreSQL metastore, with
short leases (8 to 30 s) and a 1 s sweep cadence. Nothing is called in-process: the test
seeds rows and files, then watches the metastore, the files and the instance.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterRunStatus, RunsFilter
from dagster._core.scheduler.instigation import TickStatus

from builders.daemon import DaemonHarness, kill_tree
from builders.manifests import write_with_pyiceberg
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.model import NewTask, TaskState, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    ManifestCleanupPayload,
    TableIdentifier,
    batch_cleanup_task_name,
    encode_batch_cleanup,
    encode_manifest_cleanup,
    manifest_cleanup_task_name,
    task_properties,
)
from tests.reliability.faults import write_plan
from tests.support.daemon_fixtures import (
    existing,
    metastore_for,
    touch_files,
    write_storage_config,
)

pytestmark = pytest.mark.slow

REALM = "POLARIS"
NS = ("ns",)


def _batch(location: str, files: list[str], table: str = "t", parent: str | None = None) -> NewTask:
    """An orphaned BATCH_FILE_CLEANUP task of table ``ns.<table>`` over ``files``."""
    payload = BatchCleanupPayload(TableIdentifier(NS, table), tuple(files))
    name = batch_cleanup_task_name(parent, files) if parent else None
    task = batch_task(REALM, files, name=name, internal={"storageLocation": location})
    props = task_properties(TaskType.BATCH_FILE_CLEANUP, encode_batch_cleanup(payload))
    return NewTask(
        realm_id=task.realm_id,
        id=task.id,
        name=task.name,
        properties=props,
        internal_properties=task.internal_properties,
    )


def _manifest_child(
    root: Path, location: str, parent: str, table: str, n_files: int
) -> tuple[NewTask, list[str]]:
    """A MANIFEST_FILE_CLEANUP child of ``parent``: a pyiceberg manifest naming new files."""
    stem = uuid.uuid4().hex[:8]
    files = touch_files(root / "data" / stem, n_files)
    local = root / "metadata" / f"{stem}-m0.avro"
    local.parent.mkdir(parents=True, exist_ok=True)
    written = write_with_pyiceberg(str(local), files)
    uri = f"file://{local}"
    payload = ManifestCleanupPayload(TableIdentifier(NS, table), written.ref(uri))
    task = NewTask(
        realm_id=REALM,
        id=new_entity_id(),
        name=manifest_cleanup_task_name(parent, uri),
        properties=task_properties(
            TaskType.MANIFEST_FILE_CLEANUP, encode_manifest_cleanup(payload)
        ),
        internal_properties={"storageLocation": location},
    )
    return task, [*files, uri]


def _task_runs(daemon: DaemonHarness, task_id: int) -> list:
    return [r for r in daemon.runs() if r.tags.get("polaris/task_id") == str(task_id)]


# ------------------------------------------------------------------ 1. requeue


def _dead_after_one_run(
    tmp_path: Path, pg_url: str, start_daemon, lease_timeout_ms: int = 20_000
) -> tuple[DaemonHarness, Metastore, NewTask, list[str], Path]:
    """A task whose one attempt through the daemon was refused by the guard: dead.

    The lease is longer than a run's start here (about 10 s on a loaded 2-core
    host), so this part holds before and after the fix of issue 18 alike.
    """
    wh = tmp_path / "wh"
    files = touch_files(wh / "ns" / "t" / "metadata", 3)
    task = _batch(f"file://{wh}/ns/t", files)
    store = metastore_for(pg_url, max_attempts=1)
    store.insert_tasks([task])
    config = tmp_path / "storage.yaml"
    # Deletes confined elsewhere: the attempt is refused (a permanent failure).
    write_storage_config(config, [f"file://{tmp_path}/elsewhere"])
    daemon = start_daemon(
        metastore_url=pg_url,
        lease_timeout_ms=lease_timeout_ms,
        max_attempts=1,
        storage_config=str(config),
    )

    def dead() -> bool:
        row = store.get_task(REALM, task.id)
        return row is not None and row.state(store.now_ms(), store.policy) is TaskState.DEAD

    daemon.wait_for(dead, timeout_s=90, what="the task to be dead-lettered")
    runs = daemon.wait_runs_finished(timeout_s=30)
    assert [r.status for r in runs] == [DagsterRunStatus.FAILURE]
    assert existing(files) == files
    # The operator fixes the cause: deletes allowed under the warehouse.
    write_storage_config(config, [f"file://{wh}"])
    return daemon, store, task, files, config


def test_a_requeued_dead_task_runs_again_and_completes(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    daemon, store, task, files, _ = _dead_after_one_run(tmp_path, pg_url, start_daemon)
    assert store.requeue(REALM, task.id) is TaskState.ORPHANED

    daemon.wait_for(
        lambda: store.get_task(REALM, task.id) is None,
        timeout_s=60,
        what="the requeued task to run again and finish",
    )
    assert existing(files) == []
    # The row is deleted inside the run, which then still has its last events to write.
    daemon.wait_for(
        lambda: all(r.is_finished for r in _task_runs(daemon, task.id)) or None,
        timeout_s=60,
        what="the task's runs to finish",
    )
    runs = _task_runs(daemon, task.id)
    assert [r.status for r in runs] == [DagsterRunStatus.FAILURE, DagsterRunStatus.SUCCESS]
    keys = [r.tags.get("dagster/run_key") for r in runs]
    assert None not in keys and len(set(keys)) == 2, keys


# ------------------------------------------------------------ 2. re-execution


def test_reexecuting_the_failed_run_of_a_dead_task_retries_it_now(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    daemon, store, task, files, _ = _dead_after_one_run(tmp_path, pg_url, start_daemon)
    failed = daemon.runs()[0]

    new_id = daemon.reexecute(failed.run_id)
    run = daemon.wait_run_finished(new_id, timeout_s=90)
    log = daemon.run_log(new_id)
    assert run.status is DagsterRunStatus.SUCCESS, log
    assert store.get_task(REALM, task.id) is None
    assert existing(files) == []
    assert "nothing was deleted" not in log


def test_reexecuting_a_run_whose_task_another_executor_holds_fails_clearly(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    # A lease long enough that the other executor still holds the task when the
    # re-executed run starts.
    daemon, store, task, files, _ = _dead_after_one_run(
        tmp_path, pg_url, start_daemon, lease_timeout_ms=180_000
    )
    failed = daemon.runs()[0]
    assert store.requeue(REALM, task.id) is TaskState.ORPHANED
    # Another executor (a Polaris server) takes it before the re-execution starts.
    held = store.lease_task(REALM, task.id, "polaris-server-1")
    assert held is not None

    new_id = daemon.reexecute(failed.run_id)
    run = daemon.wait_run_finished(new_id, timeout_s=90)
    log = daemon.run_log(new_id)
    # Never a green run that did nothing: it fails, naming the holder.
    assert run.status is DagsterRunStatus.FAILURE, log
    assert "polaris-server-1" in log
    assert existing(files) == files
    row = store.get_task(REALM, task.id)
    assert row is not None and row.executor_id == "polaris-server-1"


# -------------------------------------------------------- 3. storage config typo


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("allowed_prefixes: [file:///wh\nlocations: {", "storage.yaml"),
        ("allowed_prefix: [file:///wh]\n", "unknown key 'allowed_prefix'"),
    ],
    ids=["invalid-yaml", "unknown-key"],
)
def test_a_storage_config_typo_leases_nothing_and_the_tick_says_why(
    tmp_path: Path, pg_url: str, start_daemon, content: str, expected: str
) -> None:
    files = touch_files(tmp_path / "wh" / "ns" / "t", 2)
    task = _batch(f"file://{tmp_path}/wh/ns/t", files)
    store = metastore_for(pg_url)
    store.insert_tasks([task])
    config = tmp_path / "storage.yaml"
    config.write_text(content, encoding="utf-8")
    daemon = start_daemon(metastore_url=pg_url, storage_config=str(config))

    def explained() -> object:
        for tick in daemon.sensor_ticks(limit=5):
            if tick.status is TickStatus.SKIPPED and expected in (tick.skip_reason or ""):
                return tick
        return None

    tick = daemon.wait_for(explained, timeout_s=60, what=f"a skipped tick naming {expected!r}")
    assert str(tmp_path / "storage.yaml") in (tick.skip_reason or "")
    row = store.get_task(REALM, task.id)
    assert row is not None and row.executor_id is None and row.attempt_count == 0
    assert daemon.runs() == []
    assert existing(files) == files


# ------------------------------------------------------------ 4. SIGKILL a run


def test_a_run_worker_killed_mid_task_is_retried_and_the_task_ends_done(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    # faulty:// is the local filesystem behind the reliability suite's fault plan:
    # every delete sleeps while the flag file exists, so the run is caught mid-task.
    files = touch_files(table / "metadata", 30, scheme="faulty")
    plan, flag = tmp_path / "plan.json", tmp_path / "slow-on"
    flag.write_text("")
    write_plan(
        plan,
        [
            {
                "op": "rm_file",
                "match": str(table),
                "kind": "delay",
                "seconds": 0.25,
                "while_exists": str(flag),
            }
        ],
    )
    task = _batch(f"faulty:/{table}", files)
    store = metastore_for(pg_url)
    store.insert_tasks([task])
    daemon = start_daemon(
        metastore_url=pg_url,
        module="tests.support.daemon_location",
        lease_timeout_ms=30_000,
        extra_env={"PP_REL_FAULT_PLAN": str(plan)},
    )

    daemon.wait_for(
        lambda: 0 < len(existing(files)) < len(files) - 2,
        timeout_s=90,
        what="the run to be deleting the task's files",
    )
    first = daemon.runs()[0]
    workers = {
        record.dagster_event.pid
        for record in daemon.instance.all_logs(first.run_id)
        if record.dagster_event is not None
        and record.dagster_event.pid
        and record.dagster_event.event_type
        in (DagsterEventType.RUN_START, DagsterEventType.STEP_START)
    }
    assert workers, daemon.diagnose()
    kill_tree(sorted(workers))
    left_at_kill = len(existing(files))
    flag.unlink()

    daemon.wait_for(
        lambda: store.get_task(REALM, task.id) is None,
        timeout_s=120,
        what="the retried run to finish the task",
    )
    assert left_at_kill > 0
    assert existing(files) == []
    runs = daemon.wait_runs_finished(timeout_s=30)
    assert runs[0].run_id == first.run_id and runs[0].status is DagsterRunStatus.FAILURE
    # The run retry itself finished the task: not a green retry that found the
    # dead worker's lease and did nothing, leaving a later sweep to do the work.
    assert len(runs) == 2, daemon.diagnose()
    retry = runs[1]
    assert retry.tags.get("dagster/parent_run_id") == first.run_id
    log = daemon.run_log(retry.run_id)
    assert retry.status is DagsterRunStatus.SUCCESS, log
    assert "nothing was deleted" not in log
    # The run worker says it took over the dead worker's lease, and who it is.
    assert (
        f"adopted this lineage's lease (attempt 1); the same attempt continues "
        f"(automatic run retry 1 of run {first.run_id})" in log
    ), log


# -------------------------------------------- 5. a table's orphaned children


def test_orphaned_children_of_one_table_are_one_run(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    wh = tmp_path / "wh"
    store = metastore_for(pg_url)
    # Two dropped tables whose Polaris purge died after creating children, parents
    # gone. Parent 4711's name is a prefix of parent 47110's: not the same table.
    groups: dict[str, list[NewTask]] = {}
    every_file: list[str] = []
    for parent, table, n_manifests in (
        ("entityCleanup_4711", "t", 3),
        ("entityCleanup_47110", "u", 2),
    ):
        root = wh / "ns" / table
        location = f"file://{root}"
        children = []
        for _ in range(n_manifests):
            child, paths = _manifest_child(root, location, parent, table, 4)
            children.append(child)
            every_file += paths
        old = touch_files(root / "metadata" / "old", 2)
        children.append(_batch(location, old, table=table, parent=parent))
        every_file += old
        groups[parent] = children
    # An independent orphan: a batch task of its own.
    lone_files = touch_files(wh / "ns" / "v" / "metadata", 2)
    lone = _batch(f"file://{wh}/ns/v", lone_files, table="v")
    every_file += lone_files
    store.insert_tasks([*groups["entityCleanup_4711"], *groups["entityCleanup_47110"], lone])
    daemon = start_daemon(metastore_url=pg_url, lease_timeout_ms=30_000)

    daemon.wait_for(lambda: store.count_tasks() == 0, timeout_s=120, what="every task done")
    runs = daemon.wait_runs_finished(timeout_s=30)
    assert existing(every_file) == []
    assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS] * 3, daemon.diagnose()
    # The UI's filter by table finds each group's run (its tags come from its children's
    # payloads: the group's run starts no task of its own).
    for table, parent in (("ns.t", "entityCleanup_4711"), ("ns.u", "entityCleanup_47110")):
        [found] = daemon.instance.get_runs(RunsFilter(tags={"polaris/table": table}))
        assert found.tags["polaris/orphans_of"] == parent, found.tags
        assert found.tags["polaris/table_location"] == f"file://{wh}/ns/{table.split('.')[1]}"


# ------------------------------------------- 6. a dropped table, its stages in one run


def test_a_dropped_table_runs_its_children_stage_by_stage_in_one_run(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    """The task job's graph is built from the engine's stage plan: through a real run
    worker, every stage's steps start only after the stage before it ended."""
    from builders import tables as built_tables
    from builders import tasks as built_tasks
    from polaris_pipeline.cleanup.stages import CHILD_STAGES

    catalog = built_tables.open_catalog(
        built_tables.local_warehouse_uri(tmp_path / "wh"), tmp_path / "catalog.db", name="d"
    )
    table = built_tables.build_table(catalog, ("ns", "dropped"), appends=2)
    files = [p for p in Path(table.location().removeprefix("file://")).rglob("*") if p.is_file()]
    store = metastore_for(pg_url)
    store.insert_tasks(
        [built_tasks.drop_table_task(table, realm_id=REALM, create_timestamp=store.now_ms())]
    )
    daemon = start_daemon(metastore_url=pg_url, lease_timeout_ms=30_000)

    daemon.wait_for(lambda: store.count_tasks() == 0, timeout_s=120, what="the table purged")
    (run,) = daemon.wait_runs_finished(timeout_s=30)
    assert run.status is DagsterRunStatus.SUCCESS, daemon.diagnose()
    assert [p for p in files if p.exists()] == []

    # Per stage of the plan, when its steps started and when its last one ended.
    starts: dict[str, list[float]] = {}
    ends: dict[str, list[float]] = {}
    for record in daemon.instance.all_logs(run.run_id):
        event = record.dagster_event
        if event is None or event.step_key is None:
            continue
        for stage in CHILD_STAGES:
            if event.step_key.startswith(f"run_{stage.name}_children"):
                if event.event_type is DagsterEventType.STEP_START:
                    starts.setdefault(stage.name, []).append(record.timestamp)
                elif event.event_type is DagsterEventType.STEP_SUCCESS:
                    ends.setdefault(stage.name, []).append(record.timestamp)
    assert list(starts) == [stage.name for stage in CHILD_STAGES]
    for before, after in itertools.pairwise(CHILD_STAGES):
        assert max(ends[before.name]) <= min(starts[after.name])

    # deploy/dagster.yaml's log level reaches the run worker: Dagster's DEBUG lines
    # (one per step output and input) are not stored, the task job's INFO lines are.
    logged = [r for r in daemon.instance.all_logs(run.run_id) if r.dagster_event is None]
    assert not [r.user_message for r in logged if r.level < logging.INFO]
    assert not [r.user_message for r in logged if r.user_message.startswith("Writing file at")]
    assert sum(" done: " in r.user_message for r in logged) > 1  # the table and its children
    # The children are the run's own from their creation: no adoption line for each.
    assert not [r.user_message for r in logged if "adopted this lineage" in r.user_message]
