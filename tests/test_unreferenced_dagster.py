"""The unreferenced phase in the task job: a last step after the last stage, and its event."""

from __future__ import annotations

from typing import Any

import pytest
from dagster import AssetRecordsFilter, DagsterInstance
from pyiceberg.table import Table

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.dagster.contract import FINISH_STEP
from polaris_pipeline.dagster.realm_backfill import polaris_realm_backfill_job
from polaris_pipeline.dagster.reporting import report_run
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.dagster import metastore_resource, realm_run_config, run_task_job
from tests.support.iceberg import BUILT_NEIGHBOUR, BUILT_TABLE, Warehouse
from tests.support.unreferenced import add_unreferenced, live_entity, settle


def _run(
    store: Metastore,
    wh: Warehouse,
    instance: DagsterInstance,
    *,
    allow_shared_location: bool = False,
    **resource: Any,
) -> tuple[Table, set[str], set[str], Any]:
    """``allow_shared_location``: the operator's override, so that the referenced purge
    goes on past a live entity at the location (never the unreferenced phase)."""
    table = wh.catalog.load_table(BUILT_TABLE)
    neighbour = wh.built_files(BUILT_NEIGHBOUR)
    unreferenced = add_unreferenced(table, wh.resolver)
    settle(wh.resolver, table.location())
    task = built_tasks.drop_table_task(table)
    if allow_shared_location:
        task.properties[Prop.ALLOW_SHARED_LOCATION] = "true"
    store.insert_tasks([task])
    result = run_task_job(store, instance, task.id, [wh.uri], **resource)
    return table, neighbour, unreferenced, result


def test_delete_mode_runs_last_and_the_tables_event_says_what_went(
    store: Metastore, built_local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    table, neighbour, unreferenced, result = _run(
        store, built_local_warehouse, instance, unreferenced="delete"
    )

    assert result.success
    finished = result.output_for_node(FINISH_STEP)
    assert finished["status"] == "done"
    assert f"{len(unreferenced)} files" in finished["unreferenced"]
    assert built_tables.list_files(table.location()) == set()
    assert all(built_local_warehouse.exists(f) for f in neighbour)
    assert store.list_tasks() == []
    # The finish step comes after every child step.
    steps = [e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"]
    assert steps[-1] == FINISH_STEP

    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    total = report_run(instance, run)
    assert dict(total.tasks) == {"done": 1}  # the table counted once
    [key] = [k for k in instance.get_asset_keys() if k.path[0] == "polaris"]
    [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=5).records
    event = record.asset_materialization
    assert event is not None
    assert f"unreferenced under {table.location()}: {len(unreferenced)} files" in (
        event.description or ""
    )
    assert "deleted, 0 kept as newer than the drop" in str(event.metadata["unreferenced"].value)


def test_report_mode_is_the_default_and_deletes_nothing(
    store: Metastore, built_local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    table, _, unreferenced, result = _run(store, built_local_warehouse, instance)

    assert result.success
    assert "would go" in result.output_for_node(FINISH_STEP)["unreferenced"]
    assert built_tables.list_files(table.location()) == unreferenced
    assert store.list_tasks() == []


def test_a_realm_override_turns_it_off(
    store: Metastore, built_local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    overrides: dict[str, Any] = {"realm_overrides": {"POLARIS": {"unreferenced": "off"}}}
    table, _, unreferenced, result = _run(
        store, built_local_warehouse, instance, unreferenced="delete", **overrides
    )

    assert result.success
    skipped = [e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"]
    assert FINISH_STEP in skipped  # the root completed the table itself
    assert built_tables.list_files(table.location()) == unreferenced
    assert store.list_tasks() == []


def test_an_overlap_is_a_recorded_refusal_not_a_failure(
    store: Metastore, built_local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    live_entity(store, f"{built_local_warehouse.uri}/ns/t", name="recreated")
    table, _, unreferenced, result = _run(
        store, built_local_warehouse, instance, allow_shared_location=True, unreferenced="delete"
    )

    assert result.success
    line = result.output_for_node(FINISH_STEP)["unreferenced"]
    assert "refused, overlap with live table-like 'recreated'" in line
    assert built_tables.list_files(table.location()) >= unreferenced
    assert store.list_tasks() == []


@pytest.mark.parametrize(
    ("resource", "deleted"),
    [
        ({"unreferenced": "delete"}, True),
        ({"unreferenced": "report"}, False),
        (
            {"unreferenced": "report", "realm_overrides": {"POLARIS": {"unreferenced": "delete"}}},
            True,
        ),
    ],
    ids=["delete", "report", "realm-override-delete"],
)
def test_the_realm_backfill_runs_the_deployments_unreferenced_mode(
    store: Metastore,
    built_local_warehouse: Warehouse,
    instance: DagsterInstance,
    resource: dict[str, Any],
    deleted: bool,
) -> None:
    """The realm backfill's Runner takes the mode from the metastore resource's policy, as
    the task job's does: it once built its Runner without it and ran with ``off``."""
    wh = built_local_warehouse
    table = wh.catalog.load_table(BUILT_TABLE)
    unreferenced = add_unreferenced(table, wh.resolver)
    settle(wh.resolver, table.location())
    store.insert_tasks([built_tasks.drop_table_task(table)])

    result = polaris_realm_backfill_job.execute_in_process(
        run_config=realm_run_config("POLARIS"),
        instance=instance,
        resources={
            "metastore": metastore_resource(store, **resource),
            "storage": PolarisStorageResource(allowed_prefixes=[wh.uri]),
        },
        raise_on_error=False,
    )

    assert result.success
    assert store.list_tasks() == []
    left = built_tables.list_files(table.location())
    assert left == (set() if deleted else unreferenced)
