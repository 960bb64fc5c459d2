"""The shared-location refusal and its override, where an operator sees them: the CLI's
line and ``--json``, ``tasks show`` and ``tasks requeue --allow-shared-location``, the
Dagster task job's step and run, and the run-failure alert."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    ExecuteInProcessResult,
    build_run_status_sensor_context,
)

from builders import tasks as built_tasks
from polaris_pipeline.dagster.alerts import Alert, build_polaris_failure_alert
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.model import Prop
from tests.support.cli import POLICY_FLAGS, run, url_of
from tests.support.dagster import run_task_job
from tests.support.iceberg import Warehouse, table_files
from tests.support.unreferenced import live_entity


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLARIS_PIPELINE_UNREFERENCED", "POLARIS_PIPELINE_STORAGE_CONFIG", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def _shared(
    store: Metastore, wh: Warehouse, *, allow_shared_location: bool = False
) -> tuple[int, set[str]]:
    """A dropped table that a live table of realm OTHER was registered over; (task id,
    the files they share). ``allow_shared_location``: the operator's override on its row."""
    table = wh.build("t", appends=2)
    task = built_tasks.drop_table_task(table)
    if allow_shared_location:
        task.properties[Prop.ALLOW_SHARED_LOCATION] = "true"
    store.insert_tasks([task])
    live_entity(
        store,
        table.location(),
        name="registered",
        realm_id="OTHER",
        catalog_id=9,
        internal_properties={"metadata-location": table.metadata_location},
    )
    return task.id, table_files(table)


def _exist(files: set[str]) -> bool:
    return all(Path(split_uri(f)[1]).exists() for f in files)


def test_the_cli_shows_the_refusal_and_the_override_lets_the_purge_go_on(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    task_id, files = _shared(metastore, local_warehouse)
    url = url_of(metastore)

    code, out = run("sweep", "--metastore", url, *POLICY_FLAGS, "--json")

    assert code != 0, out
    [record] = json.loads(out)["outcomes"]
    assert record["status"] == "dead" and record["permanent"] is True
    assert "'registered' (OTHER/" in record["error"] and "catalog id 9" in record["error"]
    assert record["shared_location_overridden"] is None
    # The hint names this task, ready to paste.
    hint = f"`polaris-pipeline tasks requeue {task_id} --realm POLARIS --allow-shared-location`"
    assert hint in record["error"], record["error"]
    assert _exist(files)

    code, out = run("tasks", "show", str(task_id), "--metastore", url, *POLICY_FLAGS, "--json")
    assert code == 0, out
    shown = json.loads(out)
    assert shown["state"] == "dead" and "'registered'" in json.dumps(shown)

    code, out = run("tasks", "requeue", str(task_id), "--metastore", url, "--allow-shared-location")
    assert code == 0 and "shared-location guard is overridden" in out, out
    row = metastore.get_task("POLARIS", task_id)
    assert row is not None and row.properties[Prop.ALLOW_SHARED_LOCATION] == "true"
    code, out = run("tasks", "show", str(task_id), "--metastore", url, *POLICY_FLAGS)
    assert code == 0 and "shared-location guard overridden by an operator" in out, out
    code, out = run("tasks", "list", "--metastore", url, *POLICY_FLAGS, "--json")
    assert [t["shared_location_allowed"] for t in json.loads(out)] == [True]

    code, out = run("sweep", "--metastore", url, *POLICY_FLAGS)

    assert code == 0, out
    assert "shared-location guard overridden: overlap with live table-like 'registered'" in out
    assert not any(Path(split_uri(f)[1]).exists() for f in files)
    assert metastore.list_tasks() == []


def test_the_cli_line_of_a_refusal_names_the_live_table(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    task_id, files = _shared(metastore, local_warehouse)

    code, out = run("tasks", "run", str(task_id), "--metastore", url_of(metastore), *POLICY_FLAGS)

    assert code != 0
    assert "permanent failure, not retried" in out and "'registered'" in out, out
    assert _exist(files)
    # As for any dead task: discard removes only unhandled ones, and changes nothing here.
    code, out = run("tasks", "discard", str(task_id), "--metastore", url_of(metastore))
    assert code == 2 and "not unhandled" in out, out
    row = metastore.get_task("POLARIS", task_id)
    assert row is not None and row.status == "dead"


def _job(
    store: Metastore, wh: Warehouse, instance: DagsterInstance, task_id: int
) -> ExecuteInProcessResult:
    return run_task_job(store, instance, task_id, [wh.uri])


def test_the_task_job_fails_with_the_refusal_and_the_alert_names_the_live_table(
    store: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    task_id, files = _shared(store, local_warehouse)

    result = _job(store, local_warehouse, instance, task_id)

    assert not result.success
    assert _exist(files)
    row = store.get_task("POLARIS", task_id)
    assert row is not None and row.status == "dead" and row.failure_permanent
    assert row.last_error is not None and "'registered'" in row.last_error
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error
    assert error is not None and "'registered'" in error.message
    run_record = instance.get_run_by_id(result.run_id)
    assert run_record is not None and run_record.status is DagsterRunStatus.FAILURE

    [run_failure] = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    sent: list[Alert] = []
    sensor = build_polaris_failure_alert(sent.append)
    context = build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_instance=instance,
        dagster_run=run_record,
        dagster_event=run_failure,
    ).for_run_failure()
    sensor(context)
    [alert] = sent
    assert "'registered'" in alert.body and "OTHER/" in alert.body, alert.body


def test_the_task_job_with_the_override_purges_and_its_metadata_says_so(
    store: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    task_id, files = _shared(store, local_warehouse, allow_shared_location=True)
    row = store.get_task("POLARIS", task_id)
    assert row is not None

    result = run_task_job(
        store, instance, task_id, [local_warehouse.uri], entity_version=row.entity_version
    )

    assert result.success
    assert not any(Path(split_uri(f)[1]).exists() for f in files)
    overridden = [
        entry.value
        for event in result.all_events
        if event.event_type_value == "STEP_OUTPUT"
        for key, entry in event.step_output_data.metadata.items()
        if key == "shared-location guard overridden"
    ]
    assert overridden and "'registered'" in str(overridden[0]), overridden


def test_the_dry_run_says_the_table_would_be_refused_and_changes_nothing(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    task_id, files = _shared(metastore, local_warehouse)

    code, out = run("sweep", "--dry-run", "--json", "--metastore", url_of(metastore), *POLICY_FLAGS)

    assert code == 1, out  # the task would fail: the dry run exits as the sweep would
    assert json.loads(out)["would_fail"] == 1
    [doc] = json.loads(out)["tasks"]
    assert "SharedLocationRefusal" in doc["error"] and "'registered'" in doc["error"], doc
    assert _exist(files)
    row = metastore.get_task("POLARIS", task_id)
    assert row is not None and row.attempt_count == 0 and row.status is None
