"""Seed a directory for the browser test: the demo, a dead-lettered task, the backlog.

Run as ``python -m tests.browser.seed DIR FACTS.json`` (a process of its own:
the demo quiets logging process-wide). In DIR, wiped first:

1. the demo (``demo.py``'s own steps): a SQLite metastore with real Iceberg
   tables dropped with purge, the sweeper sensor and one ``polaris_task_job`` run
   per lease on the Dagster instance in ``DIR/dagster_home``: three orphaned
   tables purged, a malformed task failed (once or twice), a task leased by a live Polaris
   and one within the grace period left alone;
2. a dropped table's batch task that names a file outside the table, swept
   with ``max_attempts=1`` (the policy the UI's code location gets too): its run
   fails on the guard and dead-letters it;
3. the backlog asset and its checks as the code location's sweeper and its
   watch report them (one tick each, stored as the daemon stores them): counts
   by state, and the dead-letter check failing.

FACTS.json says what the test should find in the UI (ids, counts, messages).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

REALM = "POLARIS"
# One attempt: the demo's malformed task (it fails once or twice, depending on
# how fast the demo's second tick comes) is dead-lettered as well, so the live
# sensor finds nothing to sweep and its ticks are the same on every machine.
MAX_ATTEMPTS = 1
# Polaris's default is 5 minutes; an hour keeps the live lease (and the grace of
# the task dropped just now) valid however slow the machine running the test is.
LEASE_TIMEOUT_MS = 3_600_000
DEAD_TASK_NAME = "entityCleanup_outside_its_table"


def _dead_letter(demo: Any, instance: Any, facts: dict[str, Any]) -> None:
    """A batch naming a file outside its table: the guard refuses it; one attempt, dead."""
    from dagster import SensorResult, build_sensor_context

    from polaris_pipeline.dagster.resources import (
        PolarisMetastoreResource,
        PolarisStorageResource,
        SweeperSettings,
    )
    from polaris_pipeline.dagster.sweeper import SENSOR_NAME
    from polaris_pipeline.dagster.task_job import polaris_task_job
    from polaris_pipeline.metastore import Metastore
    from polaris_pipeline.tasks.model import NewTask, Prop
    from tests.support.dagster import deployed_sensor, sweeper_resources

    store = Metastore(demo.metastore_url)
    now = store.now_ms()
    from demo import demo_tables_uri

    warehouse = demo_tables_uri(demo.warehouse)
    location = f"{warehouse}/sales/abandoned"
    outside = demo.root / "not-the-table.txt"
    outside.write_text("not part of any table")
    task = NewTask(
        realm_id=REALM,
        id=4_200_000_000_000_000_042,
        name=DEAD_TASK_NAME,
        properties={
            Prop.TASK_TYPE: "3",
            Prop.DATA: json.dumps(
                {
                    "tableId": {"namespace": ["sales"], "name": "abandoned"},
                    "batchFiles": [str(outside)],
                    "type": "TABLE_METADATA",
                }
            ),
        },
        internal_properties={"storageLocation": location},
        create_timestamp=now - 3_700_000,
    )
    store.insert_tasks([task])
    store.dispose()

    metastore = PolarisMetastoreResource(
        url=demo.metastore_url, max_attempts=MAX_ATTEMPTS, lease_timeout_ms=LEASE_TIMEOUT_MS
    )
    storage = PolarisStorageResource(allowed_prefixes=[warehouse])
    with build_sensor_context(
        instance=instance,
        resources=sweeper_resources(
            metastore, SweeperSettings(interval_seconds=0), storage=storage
        ),
    ) as context:
        evaluation = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(evaluation, SensorResult), evaluation
    requests = list(evaluation.run_requests or [])
    assert [r.tags["polaris/task_id"] for r in requests] == [str(task.id)], requests
    result = polaris_task_job.execute_in_process(
        run_config={
            **requests[0].run_config,
            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
        },
        tags=requests[0].tags,
        instance=instance,
        resources={"metastore": metastore, "storage": storage},
        raise_on_error=False,
    )
    assert not result.success
    assert outside.exists()
    facts["dead_task"] = {"id": str(task.id), "run_id": result.run_id, "path": str(outside)}


def _backlog(demo: Any, instance: Any, facts: dict[str, Any]) -> None:
    """The backlog asset and its checks, as the sweeper and its watch report them.

    One tick of each of the code location's sensors, their asset events stored
    as the daemon stores them (no run).
    """
    from dagster import (
        AssetCheckEvaluation,
        AssetMaterialization,
        SensorResult,
        build_sensor_context,
    )

    from polaris_pipeline.dagster.backlog import WATCH_NAME
    from polaris_pipeline.dagster.sweeper import SENSOR_NAME

    os.environ["POLARIS_METASTORE_URL"] = demo.metastore_url
    os.environ["POLARIS_PIPELINE_MAX_ATTEMPTS"] = str(MAX_ATTEMPTS)
    os.environ["POLARIS_PIPELINE_LEASE_TIMEOUT_MS"] = str(LEASE_TIMEOUT_MS)
    from definitions import defs

    repo = defs.get_repository_def()
    checks: dict[str, bool] = {}
    counts: dict[str, Any] = {}
    for name in (SENSOR_NAME, WATCH_NAME):
        with build_sensor_context(instance=instance, resources=defs.resources) as context:
            result = repo.get_sensor_def(name)(context)
        assert isinstance(result, SensorResult), result
        assert not result.run_requests, result.run_requests
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
            if isinstance(event, AssetCheckEvaluation):
                checks[event.check_name] = event.passed
            elif isinstance(event, AssetMaterialization):
                counts = {k: v.value for k, v in event.metadata.items()}
    facts["backlog"] = {"checks": checks, "metadata": counts}


def main(argv: list[str]) -> int:
    root, facts_path = Path(argv[0]).resolve(), Path(argv[1])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import demo as demo_module

    demo_module._quiet()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    demo = demo_module.Demo(root)
    out = io.StringIO()
    demo_module.build_world(demo)
    demo_module.sweep(demo, out)
    ok = demo_module.report(demo, out)
    print(out.getvalue())
    # The demo's own verdict is tests/test_demo.py's to judge; the UI is judged here
    # on what the instance holds (the facts below).
    if not ok:
        print("note: the demo's report did not end as it expects", file=sys.stderr)

    facts: dict[str, Any] = {
        "metastore_url": demo.metastore_url,
        "dagster_home": str(demo.dagster_home),
        "max_attempts": MAX_ATTEMPTS,
        "lease_timeout_ms": LEASE_TIMEOUT_MS,
        "tables": [
            {
                "name": t.name,
                "role": t.role,
                "task_id": str(t.task_id) if t.task_id else None,
                "files_before": t.files_before,
                "files_after": t.files_after,
            }
            for t in demo.tables
        ],
        "malformed_task_id": str(demo.malformed_task_id),
        "runs": [
            {
                "run_id": r.run_id,
                "label": r.task_label,
                "success": r.success,
                "deleted": r.deleted,
                "error": r.error,
            }
            for r in demo.runs
        ],
    }
    instance = demo_module._instance(demo)
    try:
        _dead_letter(demo, instance, facts)
        _backlog(demo, instance, facts)
    finally:
        instance.dispose()
    facts_path.write_text(json.dumps(facts, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
