"""Driving ``polaris_task_job`` in a test: the sweeper sensor's tick, a dropped table's
task, the storage resource over a test warehouse, the step events of a run."""

from __future__ import annotations

from typing import Any

from dagster import DagsterInstance, RunRequest, SensorResult, build_sensor_context

from builders import tasks as built_tasks
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask
from tests.support.dagster import deployed_sensor, sweeper_resources
from tests.support.iceberg import Warehouse

# How long ago a dropped table's task was written: well past any grace period.
OLD_MS = 10 * 60_000


def storage_resource(warehouse: Warehouse, moto: Any = None) -> PolarisStorageResource:
    locations = None
    if warehouse.kind == "s3":
        bucket = warehouse.uri.removeprefix("s3://").split("/", 1)[0]
        locations = [{"prefix": f"s3://{bucket}", "options": moto.storage_options()}]
    return PolarisStorageResource(locations=locations, allowed_prefixes=[warehouse.uri])


def sweep(metastore: PolarisMetastoreResource, instance: DagsterInstance) -> list[RunRequest]:
    """One sensor tick; the run requests it made."""
    with build_sensor_context(
        instance=instance,
        resources=sweeper_resources(metastore, SweeperSettings(interval_seconds=0)),
    ) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    if isinstance(result, SensorResult):
        return list(result.run_requests or [])
    return []


def drop(store: Metastore, table: Any, realm: str = "POLARIS") -> NewTask:
    """Polaris's drop-with-purge: the cleanup task, written long enough ago to be orphaned."""
    task = built_tasks.drop_table_task(
        table, realm_id=realm, create_timestamp=store.now_ms() - OLD_MS
    )
    store.insert_tasks([task])
    return task


def step_events(instance: DagsterInstance, run_id: str) -> list[tuple[str, str, float]]:
    """(event type, step key, timestamp) of every step event of the run."""
    out = []
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is not None and event.step_key:
            out.append((event.event_type_value, event.step_key, entry.timestamp))
    return out
