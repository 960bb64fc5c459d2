"""End to end through Dagster: 1,000 orphaned tasks, first sensor tick to all done.

One realm of a PostgreSQL metastore holds 1,000 orphaned tasks of every type,
over real files in a local warehouse:

- 1 dropped table whose snapshot names 2,000 manifests (the in-run fan-out: its
  run creates 2,000 manifest children and runs them as mapped steps);
- small dropped tables built by pyiceberg (appends, overwrite, delete: several
  snapshots, manifests, metadata files);
- MANIFEST_FILE_CLEANUP tasks (a pyiceberg-written manifest naming 10 files);
- BATCH_FILE_CLEANUP tasks (5 files each).

The sweeper sensor is evaluated with ``build_sensor_context`` (its cursor
carried from tick to tick, as the daemon does) and every run it requests is
executed with ``execute_in_process`` on the same Dagster instance, until the
metastore holds no task. This is done twice: on a SQLite-backed instance and on
a dagster-postgres-backed one. Dagster's per-run overhead is measured apart: a
trivial one-op job, our job on a task that has nothing to do, and the engine
alone (lease + ``Runner.execute``) on the same kind of task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from bench.common import (
    DeployedSweeper,
    connection_lost,
    deployed_sweeper,
    temp_database,
    wait_for_database,
)
from bench.report import BenchResult, Figure, fmt
from builders.orphans import orphaned_task

if TYPE_CHECKING:
    from polaris_pipeline.tasks.model import NewTask

TITLE = "8. In process (secondary): Dagster end to end: orphaned tasks, first tick to all done"
FULL = {
    "tasks": 1_000,
    "fanout_manifests": 2_000,
    "small_tables": 9,
    "overhead_runs": 20,
}
# A quarter of the full size: the full run takes well over 10 minutes per instance on
# a small shared host (see the doc), so `--quick` is the scaled-down measurement.
QUICK = {
    "tasks": 250,
    "fanout_manifests": 500,
    "small_tables": 5,
    "overhead_runs": 10,
}
OLD_MS = 3_600_000
REALM = "POLARIS"
NO_TELEMETRY = {"telemetry": {"enabled": False}}
# Dagster's console logger at WARNING for every run (ours and the trivial job alike).
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


# ------------------------------------------------------------------ fixtures


def _touch(path: str) -> None:
    local = path.removeprefix("file://")
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with open(local, "wb") as f:
        f.write(b"PAR1")


def _fanout_table(catalog: Any, name: str, n_manifests: int, files_each: int) -> Any:
    """A table whose current snapshot lists ``n_manifests`` manifests; returns its DropSpec."""
    import pyarrow as pa
    from pyiceberg.exceptions import NamespaceAlreadyExistsError
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
        write_manifest_list,
    )
    from pyiceberg.serializers import ToOutputFile
    from pyiceberg.typedef import Record

    from builders.tables import ARROW_SCHEMA, PARTITION_SPEC, TABLE_SCHEMA
    from builders.tasks import DropSpec

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(("ns",))
    table = catalog.create_table(
        ("ns", name),
        schema=TABLE_SCHEMA,
        partition_spec=PARTITION_SPEC,
        properties={"format-version": "2"},
    )
    table.append(
        pa.table({"id": [1, 2], "category": ["a", "b"], "value": [1.0, 2.0]}, schema=ARROW_SCHEMA)
    )
    table = catalog.load_table(("ns", name))
    snap = table.current_snapshot()
    assert snap is not None
    io, location = table.io, table.location()
    manifests = list(snap.manifests(io))
    for i in range(n_manifests - len(manifests)):
        uri = f"{location}/metadata/fanout-{i:05d}-m0.avro"
        with write_manifest(
            format_version=2,
            spec=table.spec(),
            schema=table.schema(),
            output_file=io.new_output(uri),
            snapshot_id=snap.snapshot_id,
            avro_compression="deflate",
        ) as writer:
            for j in range(files_each):
                path = f"{location}/data/category=a/fanout-{i:05d}-{j}.parquet"
                _touch(path)
                data_file = DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=path,
                    file_format=FileFormat.PARQUET,
                    partition=Record("a"),
                    record_count=1,
                    file_size_in_bytes=4,
                )
                data_file.spec_id = table.spec().spec_id
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=snap.snapshot_id,
                        sequence_number=snap.sequence_number,
                        file_sequence_number=snap.sequence_number,
                        data_file=data_file,
                    )
                )
        manifests.append(writer.to_manifest_file())
    list_uri = f"{location}/metadata/snap-{snap.snapshot_id}-fanout.avro"
    with write_manifest_list(
        format_version=2,
        output_file=io.new_output(list_uri),
        snapshot_id=snap.snapshot_id,
        parent_snapshot_id=snap.parent_snapshot_id,
        sequence_number=snap.sequence_number or 1,
        avro_compression="deflate",
    ) as list_writer:
        list_writer.add_manifests(manifests)
    new_snap = snap.model_copy(update={"manifest_list": list_uri})
    metadata = table.metadata.model_copy(
        update={
            "snapshots": [
                new_snap if s.snapshot_id == snap.snapshot_id else s
                for s in table.metadata.snapshots
            ]
        }
    )
    metadata_uri = f"{location}/metadata/00099-{uuid.uuid4()}.metadata.json"
    ToOutputFile.table_metadata(metadata, io.new_output(metadata_uri))
    return DropSpec(
        namespace=("ns",),
        name=name,
        metadata_location=metadata_uri,
        location=location,
        table_properties=dict(table.properties),
    )


def build_fixture(root: Path, store: Any, size: dict[str, int]) -> dict[str, Any]:
    """Files and the 1,000 orphaned tasks that clean them up; returns what was made."""
    from builders import tables as built_tables
    from builders import tasks as built_tasks
    from builders.manifests import write_with_pyiceberg
    from polaris_pipeline.tasks.model import TaskType
    from polaris_pipeline.tasks.payloads import (
        BatchCleanupPayload,
        ManifestCleanupPayload,
        TableIdentifier,
        encode_batch_cleanup,
        encode_manifest_cleanup,
    )

    warehouse = built_tables.local_warehouse_uri(root / "wh")
    catalog = built_tables.open_catalog(warehouse, root / "catalog.db", name="bench")
    created = store.now_ms() - OLD_MS
    tasks: list[NewTask] = []

    spec = _fanout_table(catalog, "fanout", size["fanout_manifests"], 2)
    tasks.append(built_tasks.drop_task(spec, realm_id=REALM, create_timestamp=created))
    for i in range(size["small_tables"]):
        table = built_tables.build_table(catalog, ("ns", f"small_{i}"), appends=1)
        tasks.append(built_tasks.drop_table_task(table, realm_id=REALM, create_timestamp=created))
    remaining = size["tasks"] - len(tasks)
    n_manifest_tasks = remaining // 2
    n_batch_tasks = remaining - n_manifest_tasks
    files = 0
    for i in range(n_manifest_tasks):
        location = f"{warehouse}/ns/m_{i}"
        paths = [f"{location}/data/f-{j}.parquet" for j in range(10)]
        for p in paths:
            _touch(p)
        files += len(paths)
        local = str(root / "wh" / "ns" / f"m_{i}" / "metadata" / "m0.avro")
        os.makedirs(os.path.dirname(local), exist_ok=True)
        written = write_with_pyiceberg(local, paths)
        uri = "file://" + local
        payload = ManifestCleanupPayload(TableIdentifier(("ns",), f"m_{i}"), written.ref(uri))
        name = f"entityCleanup_{i}_{uri}_{uuid.uuid4()}"
        data = encode_manifest_cleanup(payload)
        tasks.append(
            orphaned_task(REALM, name, TaskType.MANIFEST_FILE_CLEANUP, data, location, created)
        )
    for i in range(n_batch_tasks):
        location = f"{warehouse}/ns/b_{i}"
        paths = [f"{location}/metadata/{j:05d}-{uuid.uuid4()}.metadata.json" for j in range(5)]
        for p in paths:
            _touch(p)
        files += len(paths)
        payload_b = BatchCleanupPayload(TableIdentifier(("ns",), f"b_{i}"), tuple(paths))
        name = f"entityCleanup_{i}_[{', '.join(paths)}]_{uuid.uuid4()}"
        data = encode_batch_cleanup(payload_b)
        tasks.append(
            orphaned_task(REALM, name, TaskType.BATCH_FILE_CLEANUP, data, location, created)
        )
    for start in range(0, len(tasks), 500):
        store.insert_tasks(tasks[start : start + 500])
    return {
        "warehouse": warehouse,
        "tasks": len(tasks),
        "tables": 1 + size["small_tables"],
        "manifest_tasks": n_manifest_tasks,
        "batch_tasks": n_batch_tasks,
        "loose_files": files,
        "fanout_manifests": size["fanout_manifests"],
    }


# ------------------------------------------------------------------ instances


def _sqlite_instance(home: Path) -> Any:
    from dagster import DagsterInstance

    home.mkdir(parents=True, exist_ok=True)
    return DagsterInstance.local_temp(str(home), overrides=NO_TELEMETRY)


def _postgres_instance(home: Path, url: str) -> Any:
    from dagster import DagsterInstance

    home.mkdir(parents=True, exist_ok=True)
    # dagster-postgres talks psycopg2.
    pg = make_url(url).set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
    return DagsterInstance.local_temp(
        str(home), overrides={**NO_TELEMETRY, "storage": {"postgres": {"postgres_url": pg}}}
    )


# ------------------------------------------------------------------ driving


def _quiet_dagster() -> None:
    """Sensor log lines (one per tick) would drown the benchmark's own output.

    Every sensor context builds a fresh console logger at INFO; build it at WARNING.
    """
    from dagster._core.definitions import instigation_logger
    from dagster._utils.log import create_console_logger

    def at_warning(name: str, level: Any) -> logging.Logger:
        return create_console_logger(name, logging.WARNING)

    instigation_logger.create_console_logger = at_warning


def _tick(instance: Any, sweeper: DeployedSweeper, cursor: str | None) -> tuple[list, Any, float]:
    from dagster import SensorResult, build_sensor_context

    t0 = time.perf_counter()
    with build_sensor_context(
        instance=instance, resources=sweeper.resources, cursor=cursor
    ) as context:
        result = sweeper.sensor(context)
    seconds = time.perf_counter() - t0
    if isinstance(result, SensorResult):
        return list(result.run_requests or []), result.cursor or cursor, seconds
    return [], cursor, seconds


def _execute(job: Any, request: Any, instance: Any, resources: dict[str, Any]) -> Any:
    return job.execute_in_process(
        run_config={**request.run_config, **QUIET},
        tags=request.tags,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )


def drive(store: Any, instance: Any, metastore: Any, storage: Any, *, label: str) -> dict[str, Any]:
    """Sensor ticks and runs until no task is left; every figure of one end-to-end pass."""
    from polaris_pipeline.dagster.resources import SweeperSettings
    from polaris_pipeline.dagster.task_job import polaris_task_job

    sweeper = deployed_sweeper(metastore, SweeperSettings(interval_seconds=0), storage)
    run_resources = {"metastore": metastore, "storage": storage}
    cursor: str | None = None
    ticks: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    while True:
        requests, cursor, tick_s = _tick(instance, sweeper, cursor)
        ticks.append({"seconds": tick_s, "requests": len(requests)})
        if not requests:
            if store.count_tasks() == 0:
                break
            if len(ticks) > 3 and all(t["requests"] == 0 for t in ticks[-3:]):
                break  # tasks left that no tick leases (failed and backing off): reported
            continue
        for request in requests:
            r0 = time.perf_counter()
            result = _execute(polaris_task_job, request, instance, run_resources)
            steps = sum(1 for e in result.all_events if e.event_type_value == "STEP_SUCCESS")
            try:
                attempt = int(result.output_for_node("run_polaris_task", "outcome")["attempt"])
            except Exception:
                attempt = 0
            runs.append(
                {
                    "seconds": time.perf_counter() - r0,
                    "success": result.success,
                    "steps": steps,
                    "type": request.tags.get("polaris/task_type"),
                    # The run leases its task when it starts (attempt 1 for a fresh
                    # orphan): a higher attempt means an earlier lease of it lapsed.
                    "released": attempt > 1,
                }
            )
        print(
            f"  {label}: tick {len(ticks)} requested {len(requests)} run(s); "
            f"{len(runs)} runs so far, {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "ticks": ticks,
        "runs": runs,
        "tasks_left": store.count_tasks(),
    }


# ------------------------------------------------------------------ overhead


def overhead(store: Any, instance: Any, metastore: Any, storage: Any, n: int) -> dict[str, Any]:
    """Seconds per run: a trivial job, our job on a no-op task, the engine alone."""
    from dagster import job, op

    from builders.tasks import batch_task
    from polaris_pipeline.dagster.resources import SweeperSettings
    from polaris_pipeline.dagster.task_job import polaris_task_job
    from polaris_pipeline.execution.runner import Runner

    @op
    def nothing() -> None:
        return None

    @job
    def trivial() -> None:
        nothing()

    def noop_tasks(count: int) -> None:
        created = store.now_ms() - OLD_MS
        store.insert_tasks([batch_task(REALM, [], create_timestamp=created) for _ in range(count)])

    trivial.execute_in_process(instance=instance, run_config=QUIET)  # warm up
    t_trivial = []
    for _ in range(n):
        t0 = time.perf_counter()
        trivial.execute_in_process(instance=instance, run_config=QUIET)
        t_trivial.append(time.perf_counter() - t0)

    noop_tasks(n + 1)
    sweeper = deployed_sweeper(metastore, SweeperSettings(interval_seconds=0), storage)
    requests, _, _ = _tick(instance, sweeper, None)
    run_resources = {"metastore": metastore, "storage": storage}
    _execute(polaris_task_job, requests[0], instance, run_resources)  # warm up
    t_ours = []
    for request in requests[1:]:
        t0 = time.perf_counter()
        result = _execute(polaris_task_job, request, instance, run_resources)
        t_ours.append(time.perf_counter() - t0)
        assert result.success

    noop_tasks(n)
    t_engine = []
    with Runner(store, storage.get_config(), resolver=storage.get_resolver()) as runner:
        leases = runner.lease(n, [REALM])
        for lease in leases:
            t0 = time.perf_counter()
            outcome = runner.execute(lease)
            t_engine.append(time.perf_counter() - t0)
            assert outcome.ok
    return {
        "trivial_s": statistics.median(t_trivial),
        "ours_noop_s": statistics.median(t_ours),
        "engine_noop_s": statistics.median(t_engine),
        "n": n,
    }


# ------------------------------------------------------------------------ main


def _one_instance(kind: str, size: dict[str, int], dagster_pg: str | None) -> dict[str, Any]:
    from polaris_pipeline.dagster.resources import (
        PolarisMetastoreResource,
        PolarisStorageResource,
        clear_metastore_cache,
        clear_storage_cache,
    )
    from polaris_pipeline.metastore import Metastore

    with (
        temp_database(f"e2e_{kind}") as url,
        tempfile.TemporaryDirectory(prefix=f"pp-bench-e2e-{kind}-") as tmp,
    ):
        root = Path(tmp)
        store = Metastore(url)
        store.init_schema()
        t0 = time.perf_counter()
        fixture = build_fixture(root, store, size)
        print(f"  {kind}: fixture built in {time.perf_counter() - t0:.0f} s: {fixture}", flush=True)
        metastore = PolarisMetastoreResource(url=url)
        storage = PolarisStorageResource(allowed_prefixes=[fixture["warehouse"]])
        home = root / "dagster_home"
        instance = (
            _sqlite_instance(home)
            if kind == "sqlite"
            else _postgres_instance(home, dagster_pg or "")
        )
        try:
            with instance:
                e2e = drive(store, instance, metastore, storage, label=kind)
                e2e["loose_files_left"] = sum(
                    1
                    for p in (root / "wh").rglob("*")
                    if p.is_file() and ("/ns/m_" in str(p) or "/ns/b_" in str(p))
                )
                e2e["overhead"] = overhead(
                    store, instance, metastore, storage, size["overhead_runs"]
                )
        finally:
            clear_metastore_cache()
            clear_storage_cache()
            store.dispose()
        e2e["fixture"] = fixture
        return e2e


def run(quick: bool = False) -> BenchResult:
    from polaris_pipeline.dagster.contract import CHILDREN_PER_STEP

    size = QUICK if quick else FULL
    _quiet_dagster()
    result = BenchResult(
        name="dagster_e2e",
        title=TITLE,
        command="python -m bench dagster_e2e" + (" --quick" if quick else ""),
        scale="quick" if quick else "full",
        params={
            "tasks": f"{size['tasks']:,} orphaned, one realm",
            "the fan-out table": f"1 dropped table whose snapshot names "
            f"{size['fanout_manifests']:,} manifests (2 data files each)",
            "small tables": f"{size['small_tables']} dropped pyiceberg tables",
            "other tasks": "half MANIFEST_FILE_CLEANUP (10 files each), half "
            "BATCH_FILE_CLEANUP (5 files each)",
            "children per step": f"{CHILDREN_PER_STEP} (the task job's default)",
            "executor": "execute_in_process (Dagster's in-process executor; one run at a time)",
            "sweeper": "interval 0 (a tick as soon as the previous runs finished), "
            "max_runs_per_tick 200",
        },
    )
    outcomes: dict[str, dict[str, Any]] = {}
    for kind in ("sqlite", "postgres"):
        # Each half on its own: losing the PostgreSQL server (a shared host) redoes
        # only that half.
        for attempt in range(3):
            try:
                with temp_database("dagster_storage") as dagster_pg:
                    outcomes[kind] = _one_instance(kind, size, dagster_pg)
                break
            except Exception as exc:
                if attempt == 2 or not connection_lost(exc):
                    raise
                print(f"  {kind}: lost the database ({type(exc).__name__}); again", flush=True)
                result.notes.append(
                    f"The {kind} half was run again after the PostgreSQL server went away "
                    "mid-run (the host is shared with tests that restart it)."
                )
                wait_for_database()

    for kind, e in outcomes.items():
        runs = e["runs"]
        n_tasks = e["fixture"]["tasks"]
        minutes = e["seconds"] / 60
        fan = max(runs, key=lambda r: r["steps"]) if runs else {"steps": 0, "seconds": 0}
        ok = e["tasks_left"] == 0 and all(r["success"] for r in runs)
        result.add(
            Figure(
                f"{kind} instance: tasks finished per minute",
                n_tasks / minutes,
                "tasks/min",
                why=f"{n_tasks:,} tasks in {e['seconds']:.0f} s; {len(runs):,} runs launched, "
                f"{len(e['ticks'])} ticks; tasks left {e['tasks_left']}; "
                f"all runs succeeded: {'yes' if all(r['success'] for r in runs) else 'NO'}",
                met=None,
            ),
            Figure(
                f"{kind} instance: the fan-out run ({e['fixture']['fanout_manifests']:,} "
                "manifests)",
                fan["seconds"],
                "s",
                why=f"{fan['steps']:,} steps in one run ({CHILDREN_PER_STEP} child tasks to a "
                f"mapped step): {fan['seconds'] / max(1, fan['steps']) * 1000:.0f} ms per step",
            ),
        )
        o = e["overhead"]
        result.add(
            Figure(
                f"{kind} instance: seconds per run, our job on a no-op task",
                o["ours_noop_s"],
                "s",
                baseline=o["trivial_s"],
                ratio=o["ours_noop_s"] / o["trivial_s"],
                why=f"baseline: a trivial one-op job; the engine alone on the same task: "
                f"{fmt(o['engine_noop_s'] * 1000, 'ms')} (median of {o['n']})",
            )
        )
        if not ok:
            result.notes.append(f"**{kind}: not every task finished**: {e['tasks_left']} left.")

    if quick:
        estimates = []
        for kind, e in outcomes.items():
            runs = e["runs"]
            fan = max(runs, key=lambda r: r["steps"])
            others = [r for r in runs if r is not fan]
            per_step = fan["seconds"] / max(1, fan["steps"])
            per_run = statistics.mean(r["seconds"] for r in others) if others else 0.0
            fan_steps = -(-FULL["fanout_manifests"] // CHILDREN_PER_STEP) + 5
            full_s = (FULL["tasks"] - 1) * per_run + fan_steps * per_step
            estimates.append(f"{kind} about {full_s / 60:.0f} min")
        result.notes.append(
            f"Scaled down (`--quick`): {size['tasks']:,} tasks and a "
            f"{size['fanout_manifests']:,}-manifest table instead of 1,000 and 2,000. At the "
            "per-run and per-step times measured here, the full size would take "
            + ", ".join(estimates)
            + " on this host; `python -m bench dagster_e2e` runs it."
        )

    rows = [
        "| instance | tasks | wall s | tasks/min | runs | ticks | median run s | "
        "runs by type | fan-out run s (steps) | re-leased after expiry | loose files left |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for kind, e in outcomes.items():
        runs = e["runs"]
        by_type: dict[str, int] = {}
        for r in runs:
            by_type[r["type"]] = by_type.get(r["type"], 0) + 1
        fan = max(runs, key=lambda r: r["steps"])
        rows.append(
            f"| {kind} | {e['fixture']['tasks']:,} | {e['seconds']:.0f} | "
            f"{e['fixture']['tasks'] / (e['seconds'] / 60):.0f} | {len(runs):,} | "
            f"{len(e['ticks'])} | {statistics.median(r['seconds'] for r in runs):.2f} | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(by_type.items()))} | "
            f"{fan['seconds']:.0f} ({fan['steps']:,}) | "
            f"{sum(1 for r in runs if r.get('released'))} | {e['loose_files_left']} |"
        )
    result.section("End to end", "\n".join(rows))
    over = [
        "| instance | trivial one-op job | our job, no-op task | engine alone, no-op task |",
        "|---|---:|---:|---:|",
    ]
    for kind, e in outcomes.items():
        o = e["overhead"]
        over.append(
            f"| {kind} | {o['trivial_s'] * 1000:.0f} ms | {o['ours_noop_s'] * 1000:.0f} ms | "
            f"{o['engine_noop_s'] * 1000:.0f} ms |"
        )
    result.section(
        "Per-run overhead (median seconds per run)",
        "\n".join(over)
        + "\n\nThe engine alone is `Runner.execute` on a BATCH_FILE_CLEANUP task with no "
        "files (read the row, fence, record the result, delete the row). Our job adds "
        "Dagster's run and step bookkeeping (run storage, event log, the job's seven ops of "
        "which one runs for a task without children) and the run's lease take-over and "
        "heartbeat renewal.",
    )
    result.section(
        "Method",
        "Both instances use the same fixture, rebuilt for each (a fresh metastore database, "
        "fresh files). The clock runs from the first sensor evaluation to the tick that finds "
        "the metastore empty; every run requested is executed before the next tick. Runs "
        "execute in-process (`execute_in_process`), one at a time, so this measures the work "
        "and Dagster's bookkeeping, not parallelism; the deployed job uses the multiprocess "
        "executor or in-process one as configured, and a daemon whose run queue can run "
        "several runs at once (bench/daemon_e2e.py measures that). Each run leases its "
        "task when it starts; an attempt above 1 means an earlier lease of the task "
        "lapsed, which the *re-leased after expiry* column counts.",
    )
    return result
