"""The polaris-pipeline demo: orphaned Polaris cleanup tasks, recovered by Dagster.

Runs on a fresh machine with nothing else installed or running. In ``.demo/``
(or ``$POLARIS_PIPELINE_DEMO_DIR``, or ``--dir``), wiped at start, it:

1. creates an embedded SQLite metastore with Polaris's ``entities`` table;
2. writes real Iceberg tables with pyiceberg in a local warehouse;
3. "drops" some of them with purge by writing the TASK rows Polaris would write:
   orphaned table cleanups (past the grace period, never run), one task a live
   Polaris server holds a lease on, one just dropped (within grace: Polaris may
   be running it right now), and one with a malformed payload; writes the catalog
   row over the warehouse, the live table's row, and leaves one dropped table's
   files with no task (a leak, which ``polaris-pipeline leaks`` finds);
4. evaluates the ``polaris_task_sweeper`` sensor as ``build_defs`` deploys it and
   executes each run it asks for (the task job of the same ``Definitions``) on a
   real Dagster instance, tick after tick until no run is requested;
5. reports what was recovered, what was dead-lettered, what was left alone,
   checks the files on disk, and prints how to open the Dagster UI on the data.

Usage: ``python demo.py [--dir DIR]`` (``make demo``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from polaris_pipeline.report.totals import OutcomeTotals

DEMO_DIR_ENV = "POLARIS_PIPELINE_DEMO_DIR"
REALM = "POLARIS"
LIVE_EXECUTOR = "polaris-server-1"
# Polaris's defaults: long enough to outlast the demo even on a loaded machine (a
# minute did not: the live Polaris lease and the fresh task's grace lapsed mid-demo).
LEASE_TIMEOUT_MS = 300_000
GRACE_MS = 300_000
ORPHAN_AGE_MS = 10 * 60_000
# The leaked table's files are this old, past the reclaim's default minimum age.
LEAK_AGE_DAYS = 30


@dataclass
class DemoTable:
    name: str
    role: str  # orphaned | live | fresh | kept | leaked
    location: str
    task_id: int | None = None
    files_before: int = 0
    files_after: int = 0


@dataclass
class RunReport:
    run_id: str
    task_label: str
    success: bool
    total: OutcomeTotals  # the run's steps added up, as the run report sensor adds them
    steps: int = 0
    error: str | None = None

    @property
    def deleted(self) -> int:
        return self.total.files_deleted


@dataclass
class Demo:
    root: Path
    tables: list[DemoTable] = field(default_factory=list)
    malformed_task_id: int = 0
    runs: list[RunReport] = field(default_factory=list)

    @property
    def db_path(self) -> Path:
        return self.root / "polaris.db"

    @property
    def metastore_url(self) -> str:
        return f"sqlite:///{self.db_path}"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse"

    @property
    def storage_config(self) -> Path:
        """The storage config of the demo's runs and of ``dagster dev``: deletes are
        confined to the warehouse."""
        return self.root / "storage.yaml"


def _quiet() -> None:
    """Keep the demo's output to its own report; every event still lands in the instance."""
    warnings.filterwarnings("ignore")
    logging.getLogger("polaris_pipeline").addHandler(logging.NullHandler())
    logging.getLogger("polaris_pipeline").propagate = False
    for name in ("dagster", "alembic", "pyiceberg"):
        logging.getLogger(name).setLevel(logging.ERROR)


def build_world(demo: Demo) -> None:
    from builders import entities as built_entities
    from builders import tables as built_tables
    from builders import tasks as built_tasks
    from builders.catalogs import catalog_entity
    from polaris_pipeline.metastore import Metastore, new_entity_id
    from polaris_pipeline.tasks.model import NewTask, Prop, TaskType

    store = Metastore(demo.metastore_url)
    store.init_schema()
    warehouse = built_tables.local_warehouse_uri(demo.warehouse)
    catalog = built_tables.open_catalog(warehouse, demo.root / "catalog.db", name="demo")
    demo.storage_config.write_text(f"allowed_prefixes:\n  - {warehouse}\n")
    catalog_id = catalog_entity(store, "demo", warehouse, realm_id=REALM)

    plans: list[tuple[str, str, dict[str, Any]]] = [
        ("orders", "orphaned", {"partitioned": True, "with_deletes": True}),
        ("events", "orphaned", {"with_statistics": True}),
        ("customers", "orphaned", {"appends": 2}),
        ("payments", "live", {"appends": 2}),
        ("clicks", "fresh", {"appends": 1}),
        ("inventory", "kept", {"appends": 2}),
        ("archive", "leaked", {"appends": 1}),
    ]
    now = store.now_ms()
    tasks: list[NewTask] = []
    for name, role, kwargs in plans:
        table = built_tables.build_table(catalog, ("sales", name), **kwargs)
        entry = DemoTable(f"sales.{name}", role, table.location())
        entry.files_before = len(built_tables.list_files(entry.location))
        demo.tables.append(entry)
        if role == "kept":
            built_entities.insert_live_table(store, REALM, catalog_id, name, table.location())
            continue
        if role == "leaked":
            # Dropped long ago, its task row gone with its files left behind.
            old = time.time() - LEAK_AGE_DAYS * 86_400
            for path in Path(demo.warehouse).rglob("*"):
                if str(path).startswith(entry.location.removeprefix("file://")):
                    os.utime(path, (old, old))
            continue
        created = now if role == "fresh" else now - ORPHAN_AGE_MS
        task = built_tasks.drop_table_task(table, realm_id=REALM, create_timestamp=created)
        if role == "live":
            # A Polaris server leased it a moment ago and is still running it.
            props = {
                **task.properties,
                Prop.EXECUTOR: LIVE_EXECUTOR,
                Prop.START_TIME: str(now),
                Prop.ATTEMPT_COUNT: "1",
            }
            task = dataclasses.replace(task, properties=props)
        entry.task_id = task.id
        tasks.append(task)

    malformed = NewTask(
        realm_id=REALM,
        id=new_entity_id(),
        name="entityCleanup_4711",
        properties={
            Prop.TASK_TYPE: str(int(TaskType.ENTITY_CLEANUP_SCHEDULER)),
            Prop.DATA: '{"catalogId": 1, "id": 4711, "name": "broken"',  # cut short
        },
        internal_properties={"storageLocation": f"{warehouse}/sales/broken"},
        create_timestamp=now - ORPHAN_AGE_MS,
    )
    demo.malformed_task_id = malformed.id
    tasks.append(malformed)
    store.insert_tasks(tasks)
    store.dispose()


def _instance(demo: Demo) -> Any:
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    demo.dagster_home.mkdir(parents=True, exist_ok=True)
    (demo.dagster_home / "dagster.yaml").write_text(
        "# Written by demo.py: the instance `dagster dev` opens with DAGSTER_HOME set here.\n"
        "telemetry:\n  enabled: false\n"
        "run_retries:\n  enabled: true\n"
    )
    return DagsterInstance.from_ref(InstanceRef.from_dir(str(demo.dagster_home)))


def _report_run(instance: Any, result: Any, label: str) -> RunReport:
    from polaris_pipeline.dagster.reporting import run_total

    report = RunReport(result.run_id, label, result.success, run_total(instance, result.run_id))
    for event in result.all_events:
        if event.is_step_success:
            report.steps += 1
        if event.is_step_failure:
            data = event.step_failure_data
            user = data.user_failure_data
            report.error = user.description if user is not None else data.error.message
    return report


def sweep(demo: Demo, out: Any) -> None:
    from dagster import SensorResult, SkipReason, build_sensor_context

    from polaris_pipeline.dagster import (
        PolarisMetastoreResource,
        PolarisStorageResource,
        SweeperSettings,
        build_defs,
    )
    from polaris_pipeline.dagster.contract import JOB_NAME
    from polaris_pipeline.dagster.sweeper import SENSOR_NAME

    metastore = PolarisMetastoreResource(
        url=demo.metastore_url, lease_timeout_ms=LEASE_TIMEOUT_MS, grace_ms=GRACE_MS
    )
    storage = PolarisStorageResource(config_path=str(demo.storage_config))
    # No wait between sweeps: the demo drives the ticks itself.
    sweeper = SweeperSettings(interval_seconds=0, jitter=0)
    # The sensor and the job a deployment runs, with the demo's resources bound.
    defs = build_defs(metastore=metastore, storage=storage, sweeper=sweeper)
    sweeper_sensor = defs.resolve_sensor_def(SENSOR_NAME)
    task_job = defs.resolve_job_def(JOB_NAME)
    resources = defs.resources or {}
    # Evaluated by hand, a sensor gets only the resources its context is given.
    sensor_resources = {key: resources[key] for key in sweeper_sensor.required_resource_keys}
    instance = _instance(demo)
    labels = {t.task_id: t.name for t in demo.tables if t.task_id is not None}
    labels[demo.malformed_task_id] = "malformed task"
    # Dagster's console logger would print every event; the instance keeps them all.
    quiet_loggers = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}

    cursor: str | None = None
    tick = 0
    while tick < 20:
        tick += 1
        with build_sensor_context(
            instance=instance,
            cursor=cursor,
            resources=sensor_resources,
        ) as context:
            # The sensor logs its lease line to the console; this report says it instead.
            context.log.setLevel(logging.WARNING)
            evaluation = sweeper_sensor(context)
        assert isinstance(evaluation, SensorResult | SkipReason)
        if isinstance(evaluation, SkipReason):
            print(f"Sweeper tick {tick}: skipped: {evaluation.skip_message}", file=out)
            break
        cursor = evaluation.cursor
        requests = list(evaluation.run_requests or [])
        if not requests:
            reason = evaluation.skip_reason.skip_message if evaluation.skip_reason else ""
            print(f"Sweeper tick {tick}: no run requested: {reason}", file=out)
            break
        print(f"Sweeper tick {tick}: requested {len(requests)} run(s), one per task", file=out)
        for request in requests:
            task_id = int(request.tags["polaris/task_id"])
            label = labels.get(task_id, f"task {task_id}")
            result = task_job.execute_in_process(
                run_config={**request.run_config, **quiet_loggers},
                tags=request.tags,
                instance=instance,
                raise_on_error=False,
            )
            report = _report_run(instance, result, label)
            demo.runs.append(report)
            if report.success:
                print(
                    f"  run {report.run_id[:8]}  {label:<16} SUCCESS in {report.steps} steps: "
                    f"{report.total.line()}",
                    file=out,
                )
            else:
                print(f"  run {report.run_id[:8]}  {label:<16} FAILURE  {report.error}", file=out)
    instance.dispose()


def demo_tables_uri(path: Path) -> str:
    from builders.tables import local_warehouse_uri

    return local_warehouse_uri(path)


def report(demo: Demo, out: Any) -> bool:
    from builders import tables as built_tables
    from polaris_pipeline.dagster.resources import clear_metastore_cache
    from polaris_pipeline.metastore import Metastore
    from polaris_pipeline.report.totals import OutcomeTotals

    clear_metastore_cache()
    store = Metastore(demo.metastore_url)
    remaining = {t.id: t for t in store.list_tasks()}
    ok = True

    for table in demo.tables:
        table.files_after = len(built_tables.list_files(table.location))

    purged = [t for t in demo.tables if t.role == "orphaned"]
    succeeded = [r for r in demo.runs if r.success]
    total = sum((run.total for run in succeeded), OutcomeTotals())
    print("\nRecovered (orphaned cleanups Polaris never finished):", file=out)
    for t in purged:
        gone = t.files_after == 0 and t.task_id not in remaining
        ok = ok and gone
        state = "purged, task done" if gone else "NOT purged"
        print(
            f"  {t.name:<16} {t.files_before:>3} files before, {t.files_after} after: {state}",
            file=out,
        )
    print(f"  {len(purged)} table(s) purged in {len(succeeded)} run(s): {total.line()}", file=out)

    print("\nRefused and dead-lettered at once (a payload that cannot heal):", file=out)
    bad = remaining.get(demo.malformed_task_id)
    if bad is None:
        ok = False
        print("  the malformed task is missing from the metastore", file=out)
    else:
        ok = ok and bad.status == "dead" and bad.failure_permanent and bool(bad.last_error)
        print(f"  {bad.last_error}", file=out)
        print(
            f"  attempt {bad.attempt_count} recorded in the row (lastAttemptRunId="
            f"{bad.properties.get('lastAttemptRunId', '?')}); a permanent failure is not "
            f"retried: fix the row, then `polaris-pipeline tasks requeue {bad.id}`",
            file=out,
        )

    print("\nLeft alone:", file=out)
    for t in demo.tables:
        if t.role not in ("live", "fresh"):
            continue
        row = remaining.get(t.task_id or 0)
        intact = row is not None and t.files_after == t.files_before
        ok = ok and intact
        if t.role == "live":
            why = f"leased by a live Polaris ({row.executor_id if row else '?'}), lease not expired"
        else:
            why = "dropped just now, within the grace period (Polaris may be running it)"
        print(
            f"  {t.name:<16} task {t.task_id} still in the metastore: {why}; "
            f"{t.files_after}/{t.files_before} files still there",
            file=out,
        )
    for t in demo.tables:
        if t.role in ("kept", "leaked"):
            intact = t.files_after == t.files_before
            ok = ok and intact
            why = "not dropped" if t.role == "kept" else "leaked (no task names it)"
            print(
                f"  {t.name:<16} {why}: {t.files_after}/{t.files_before} files untouched",
                file=out,
            )

    total_before = sum(t.files_before for t in demo.tables)
    total_after = sum(t.files_after for t in demo.tables)
    verdict = "as expected" if ok else "NOT as expected"
    print(
        f"\nFiles in the warehouse: {total_before} before, {total_after} after: {verdict}.",
        file=out,
    )
    store.dispose()
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--dir",
        default=os.environ.get(DEMO_DIR_ENV) or ".demo",
        help=f"where the demo lives; wiped at start (default ${DEMO_DIR_ENV} or .demo)",
    )
    args = parser.parse_args(argv)
    _quiet()
    root = Path(args.dir).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    demo = Demo(root)
    out = sys.stdout
    started = time.monotonic()

    print(f"polaris-pipeline demo in {root}", file=out)
    build_world(demo)
    dropped = [t for t in demo.tables if t.task_id is not None]
    print(
        f"Wrote {len(demo.tables)} Iceberg tables with pyiceberg "
        f"({sum(t.files_before for t in demo.tables)} files) and dropped {len(dropped)} with "
        "purge, plus one malformed cleanup task:",
        file=out,
    )
    roles = {
        "orphaned": "orphaned: Polaris wrote the cleanup task 10 min ago and never finished it",
        "live": f"a live Polaris ({LIVE_EXECUTOR}) leased its task a moment ago",
        "fresh": "dropped just now: within the grace period",
        "kept": "not dropped",
        "leaked": f"dropped {LEAK_AGE_DAYS} days ago, its task gone, its files left: a leak",
    }
    for t in demo.tables:
        print(f"  {t.name:<16} {t.files_before:>3} files  {roles[t.role]}", file=out)
    print("", file=out)

    sweep(demo, out)
    ok = report(demo, out)

    print(f"\nDone in {time.monotonic() - started:.1f} s.", file=out)
    print("Open the Dagster UI on the same data (runs, their logs and metadata):", file=out)
    print(
        f"  DAGSTER_HOME={demo.dagster_home} POLARIS_METASTORE_URL={demo.metastore_url} "
        f"POLARIS_PIPELINE_STORAGE_CONFIG={demo.storage_config} "
        # Under `dagster dev` the sweeper starts only when told to (docs/dagster.md).
        "POLARIS_PIPELINE_SWEEPER_AUTOSTART=true .venv/bin/dagster dev -w workspace.yaml",
        file=out,
    )
    leaked = next(t for t in demo.tables if t.role == "leaked")
    cli = (
        f".venv/bin/polaris-pipeline leaks --metastore {demo.metastore_url} "
        f"--storage-config {demo.storage_config}"
    )
    print("Find the leaked table's files, then reclaim them:", file=out)
    print(f"  {cli}", file=out)
    print(f"  {cli} --reclaim {leaked.location}", file=out)
    print(
        "The sweeper sensor runs there too: the live and the fresh task are swept once "
        "their lease and grace period lapse (5 minutes by default).",
        file=out,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
