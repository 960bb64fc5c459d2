"""The leak report as a Dagster asset: its metadata per catalog, its check, its schedule."""

from __future__ import annotations

from typing import Any

import pytest
from dagster import DagsterInstance, DefaultScheduleStatus, materialize

from builders.catalogs import catalog_entity
from polaris_pipeline.dagster import LeakSettings, PolarisStorageResource, polaris_leaked_roots
from polaris_pipeline.dagster.definitions import build_defs_from_env
from polaris_pipeline.dagster.leaks import LEAKS_CHECK, LEAKS_JOB, LEAKS_SCHEDULE
from polaris_pipeline.metastore import Metastore
from tests.support.dagster import metastore_resource
from tests.support.iceberg import Warehouse
from tests.support.unreferenced import live_entity


def _materialize(store: Metastore, max_bytes: int, instance: DagsterInstance) -> Any:
    result = materialize(
        [polaris_leaked_roots],
        instance=instance,
        resources={
            "metastore": metastore_resource(store),
            "storage": PolarisStorageResource(),
            "leaks": LeakSettings(max_bytes=max_bytes),
        },
    )
    assert result.success
    [materialization] = result.asset_materializations_for_node(polaris_leaked_roots.op.name)
    [check] = result.get_asset_check_evaluations()
    return {k: v.value for k, v in materialization.metadata.items()}, check


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
def test_the_asset_records_bytes_per_catalog_and_its_check_warns_above_the_threshold(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    live = local_warehouse.build("live", appends=1)
    live_entity(metastore, live.location(), name="live")
    dropped = local_warehouse.build("dropped", appends=1)
    meta, check = _materialize(metastore, 1, instance)
    assert meta["roots"] == 1 and meta["POLARIS/cat/roots"] == 1
    assert meta["POLARIS/cat/leaked_bytes"] == meta["leaked_bytes"] > 1
    assert "oldest_leak" in meta and meta["partial"] is False
    [largest] = meta["largest_roots"]
    assert largest["uuid"] == str(dropped.metadata.table_uuid)
    assert check.check_name == LEAKS_CHECK and not check.passed
    assert check.severity.value == "WARN"

    _, under = _materialize(metastore, meta["leaked_bytes"], instance)
    assert under.passed


def test_the_schedule_is_stopped_by_default_and_reads_its_settings() -> None:
    repo = build_defs_from_env(
        {"POLARIS_PIPELINE_LEAK_CRON": "0 6 * * 1", "POLARIS_PIPELINE_LEAK_MAX_BYTES": "10"}
    ).get_repository_def()
    schedule = repo.get_schedule_def(LEAKS_SCHEDULE)
    assert schedule.default_status == DefaultScheduleStatus.STOPPED
    assert (schedule.job_name, schedule.cron_schedule) == (LEAKS_JOB, "0 6 * * 1")
    defs = build_defs_from_env({"POLARIS_PIPELINE_LEAK_MAX_BYTES": "10"})
    assert (defs.resources or {})["leaks"].max_bytes == 10
