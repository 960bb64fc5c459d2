"""The table of a run, the run's total and the table's event in the catalog.

Decoding on real payloads (our encoders and hand-written Jackson JSON); the
totals and events from a real table cleanup run by the task job on a real
pyiceberg table, against real metastores and a real Dagster instance.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRunStatus,
    RunsFilter,
    SkipReason,
    build_sensor_context,
)

from builders import tasks as built_tasks
from builders.runs import finished_task_run, has_total
from builders.tables import build_table
from builders.tasks import batch_task, dropped_entity_json
from polaris_pipeline.dagster.contract import (
    TAG_CATALOG,
    TAG_LOCATION,
    TAG_TABLE,
    TAG_TOTAL,
    run_config_for,
)
from polaris_pipeline.dagster.reporting import (
    SETTLE_S,
    build_run_report_sensor,
    report_run,
    run_total,
)
from polaris_pipeline.dagster.resources import PolarisStorageResource
from polaris_pipeline.dagster.tables import TableRef, table_of
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.step_record import STEP_RECORD_KEY
from polaris_pipeline.tasks.model import NewTask, Prop, TaskRow, TaskType
from tests.support.dagster import metastore_resource, run_task_job
from tests.support.iceberg import Warehouse, recorded_drop_task

OLD_MS = 3_600_000


def row(task: NewTask) -> TaskRow:
    return built_tasks.task_row(task)


# -- the table of a task -----------------------------------------------------------


def test_table_of_a_dropped_table_and_of_its_children() -> None:
    task = recorded_drop_task(
        "s3://bucket/wh/sales/payments/metadata/00003-abc.metadata.json",
        namespace=("sales",),
        name="payments",
        realm_id="R1",
        entity_properties={"location": "s3a://bucket/wh/sales/payments/"},
    )
    ref = table_of(row(task))
    assert ref is not None
    assert (ref.realm, ref.label, ref.location) == (
        "R1",
        "sales.payments",
        "s3://bucket/wh/sales/payments",
    )
    assert ref.catalog_id is not None
    assert DEFAULT_TRANSLATOR.table_asset_key(ref) == AssetKey(
        ["polaris", "R1", f"catalog_{ref.catalog_id}", "sales", "payments"]
    )

    # A batch child names its table by tableId: no catalog there.
    child = batch_task("R1", ["s3://bucket/wh/sales/payments/data/a.parquet"])
    child_ref = table_of(row(child))
    assert child_ref is not None and child_ref.catalog_id is None
    assert DEFAULT_TRANSLATOR.table_asset_key(child_ref).path[:3] == [
        "polaris",
        "R1",
        "catalog_unknown",
    ]


def test_table_location_is_the_recorded_one_in_one_spelling() -> None:
    """The location a run shows is the one the catalog recorded (the guard's root),
    normalized; never worked out from the metadata file's folder."""
    metadata = "file:///elsewhere/metadata/00001-abc.metadata.json"
    entity = recorded_drop_task(metadata, entity_properties={"location": "file:/wh/ns/t"})
    assert (ref := table_of(row(entity))) is not None and ref.location == "file:///wh/ns/t"
    task = recorded_drop_task(metadata, internal_properties={"storageLocation": "/wh/ns/t/"})
    assert (ref := table_of(row(task))) is not None and ref.location == "file:///wh/ns/t"
    unrecorded = table_of(row(recorded_drop_task(metadata)))
    assert unrecorded is not None and unrecorded.location is None
    # A child carries the parent's storageLocation: the same spelling.
    child = batch_task(
        "R1", ["file:///wh/ns/t/a.parquet"], internal={"storageLocation": "file:/wh/ns/t"}
    )
    assert (ref := table_of(row(child))) is not None and ref.location == "file:///wh/ns/t"


def test_table_of_hostile_payloads_is_none_or_safe() -> None:
    def entity_task(data: str) -> TaskRow:
        return row(
            NewTask(
                realm_id="R",
                id=7,
                name="entityCleanup_42",
                properties={
                    Prop.TASK_TYPE: str(int(TaskType.ENTITY_CLEANUP_SCHEDULER)),
                    Prop.DATA: data,
                },
                internal_properties={},
            )
        )

    assert table_of(entity_task("not json")) is None
    assert table_of(entity_task(dropped_entity_json(subTypeCode=3))) is None  # a view
    # No metadata-location: still the table, without a location.
    bare = table_of(entity_task(dropped_entity_json(internalProperties="{}")))
    assert bare is not None and bare.label == "t" and bare.location is None
    # Names with dots, spaces and slashes: the label is exact, the key parts are safe.
    odd = TableRef("R", ("a b", "c/d"), "t.x", catalog_id=3)
    assert odd.label == "a b.c/d.t.x"
    assert DEFAULT_TRANSLATOR.table_asset_key(odd).path == [
        "polaris",
        "R",
        "catalog_3",
        "a_b",
        "c_d",
        "t_x",
    ]
    assert DEFAULT_TRANSLATOR.table_asset_key(TableRef("R", (), "", None)).path[-1] == "_"


def test_tags_and_location_of_a_table() -> None:
    ref = TableRef("R", ("ns",), "t", catalog_id=12, location="s3://b/wh/ns/t")
    tags = DEFAULT_TRANSLATOR.table_tags(ref)
    assert tags == {
        "polaris/realm": "R",
        TAG_TABLE: "ns.t",
        TAG_CATALOG: "12",
        TAG_LOCATION: "s3://b/wh/ns/t",
    }
    assert DEFAULT_TRANSLATOR.table_tags(None) == {}
    long = TableRef("R", ("n" * 300,), "t")
    assert len(DEFAULT_TRANSLATOR.table_tags(long)[TAG_TABLE]) == 255
    assert DEFAULT_TRANSLATOR.table_metadata(ref)["table location"].value == "s3://b/wh/ns/t"
    assert (
        type(DEFAULT_TRANSLATOR.table_metadata(ref)["table location"]).__name__
        == "UrlMetadataValue"
    )
    local = TableRef("R", ("ns",), "t", location="file:///wh/ns/t")
    assert (
        type(DEFAULT_TRANSLATOR.table_metadata(local)["table location"]).__name__
        == "PathMetadataValue"
    )


def test_a_location_is_a_url_unless_its_scheme_is_file() -> None:
    """The translator asks the one scheme table (``storage.uri.split_uri``)."""
    kinds = {
        location: type(
            DEFAULT_TRANSLATOR.table_metadata(TableRef("R", ("ns",), "t", location=location))[
                "table location"
            ]
        ).__name__
        for location in ("/wh/ns/t", "file:/wh/ns/t", "s3a://b/ns/t", "gs://b/ns/t")
    }
    assert kinds == {
        "/wh/ns/t": "PathMetadataValue",
        "file:/wh/ns/t": "PathMetadataValue",
        "s3a://b/ns/t": "UrlMetadataValue",
        "gs://b/ns/t": "UrlMetadataValue",
    }


# -- a real run ----------------------------------------------------------------------


def purge(
    store: Metastore,
    warehouse: Warehouse,
    instance: DagsterInstance,
    name: str,
    *,
    namespace: tuple[str, ...] = ("ns",),
) -> tuple[Any, int]:
    """Drop-with-purge a real table and run its task; (result, files it deleted)."""
    table = build_table(warehouse.catalog, (*namespace, name), appends=2)
    before = warehouse.files()
    task = built_tasks.drop_table_task(
        table, realm_id="POLARIS", create_timestamp=store.now_ms() - OLD_MS
    )
    store.insert_tasks([task])
    result = run_task_job(store, instance, task.id, [warehouse.uri])
    assert result.success
    return result, len(before - warehouse.files())


@pytest.mark.slow
def test_a_purge_is_tagged_totalled_and_recorded_in_the_catalog(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    result, deleted = purge(metastore, local_warehouse, instance, "payments")
    assert deleted > 0

    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.SUCCESS
    # Tagged as it started: the table, its catalog, its location.
    assert run.tags[TAG_TABLE] == "ns.payments"
    assert run.tags[TAG_LOCATION].endswith("/ns/payments")
    catalog = run.tags[TAG_CATALOG]

    total = run_total(instance, result.run_id)
    assert total.files_deleted == deleted
    # Every step that ran something (the task, each group, the table's finish) wrote its
    # one record, and only one; a stage's gate ran nothing.
    outputs = [e for e in result.all_events if e.is_successful_output]
    recorded = [e.step_key for e in outputs if STEP_RECORD_KEY in e.step_output_data.metadata]
    unrecorded = {e.step_key for e in outputs} - set(recorded)
    assert len(recorded) == len(set(recorded)) > 2, recorded
    assert all(key.startswith("release_") for key in unrecorded), unrecorded
    assert total.children["done"] == total.children_total > 0
    assert dict(total.tasks) == {"done": 1}

    # The report sensor: the total as a tag, the table's event in the catalog.
    sensor = build_run_report_sensor(polaris_task_job.name)
    with build_sensor_context(instance=instance) as context:
        first = sensor(context)
        cursor = context.cursor
    assert isinstance(first, SkipReason)
    assert "reported 1 finished run(s)" in (first.skip_message or "")
    tagged = instance.get_run_by_id(result.run_id)
    assert tagged is not None and tagged.tags[TAG_TOTAL].startswith(f"{deleted} file(s) deleted")
    key = AssetKey(["polaris", "POLARIS", f"catalog_{catalog}", "ns", "payments"])
    assert key in instance.get_asset_keys(), instance.get_asset_keys()
    [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=5).records
    event = record.asset_materialization
    assert event is not None
    assert event.metadata["files deleted"].value == deleted
    assert event.metadata["run"].value == result.run_id
    assert type(event.metadata["run"]).__name__ == "DagsterRunMetadataValue"
    assert event.metadata["table"].value == "ns.payments"
    assert "table ns.payments of realm POLARIS purged" in (event.description or "")

    # Reported once: the next evaluation finds nothing new.
    with build_sensor_context(instance=instance, cursor=cursor) as context:
        again = sensor(context)
    assert isinstance(again, SkipReason)
    assert "reported 0 finished run(s)" in (again.skip_message or "")
    assert (
        len(instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=5).records)
        == 1
    )


def test_a_run_stamped_before_one_already_read_is_still_reported(
    instance: DagsterInstance,
) -> None:
    # A run's last update is stamped on its worker's clock before it commits: run A,
    # stamped 5 s before run B, can appear after the sensor has read B.
    sensor = build_run_report_sensor(polaris_task_job.name)
    b = finished_task_run(instance)
    [b_record] = instance.get_run_records(RunsFilter(run_ids=[b]))
    with build_sensor_context(instance=instance) as context:
        sensor(context)
        cursor = context.cursor
    assert has_total(instance, b)
    a = finished_task_run(instance, b_record.update_timestamp - timedelta(seconds=5))
    with build_sensor_context(instance=instance, cursor=cursor) as context:
        result = sensor(context)
    assert has_total(instance, a), result
    assert cursor is not None and float(cursor) <= time.time() - SETTLE_S


def test_a_run_that_found_its_task_gone_records_no_table_event(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    result = polaris_task_job.execute_in_process(
        run_config=run_config_for("POLARIS", 999, entity_version=1),
        instance=instance,
        resources={"metastore": metastore_resource(metastore), "storage": PolarisStorageResource()},
        raise_on_error=False,
    )
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    # An operator's run of a task that is gone fails, and says so; no table is named.
    assert run.status is DagsterRunStatus.FAILURE
    total = report_run(instance, run)
    assert total.files_deleted == 0 and dict(total.tasks) == {"failed": 1}
    assert TAG_TABLE not in run.tags
    assert not [k for k in instance.get_asset_keys() if k.path[0] == "polaris"]
    tagged = instance.get_run_by_id(result.run_id)
    assert tagged is not None and json.dumps(tagged.tags[TAG_TOTAL]).startswith('"0 file(s)')


def test_a_long_identifier_gets_its_own_asset_key(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    """A 302-character identifier: its tag is cut to Dagster's 255, so the report takes
    the table from the steps' structured record, never from the tag."""
    namespace, name = ("n" * 100, "m" * 100), "t" * 100
    result, deleted = purge(metastore, local_warehouse, instance, name, namespace=namespace)
    assert deleted > 0
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert len(run.tags[TAG_TABLE]) == 255 and run.tags[TAG_TABLE].endswith("…")
    catalog = run.tags[TAG_CATALOG]

    report_run(instance, run)

    key = AssetKey(["polaris", "POLARIS", f"catalog_{catalog}", *namespace, name])
    [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=key), limit=5).records
    event = record.asset_materialization
    assert event is not None and event.metadata["table"].value == ".".join((*namespace, name))
    assert [k for k in instance.get_asset_keys() if k.path[0] == "polaris"] == [key]


def test_a_failed_run_names_its_table_from_its_steps_too(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    namespace, name = ("n" * 100, "m" * 100), "t" * 100
    table = build_table(local_warehouse.catalog, (*namespace, name), appends=1)
    task = built_tasks.drop_table_task(
        table, realm_id="POLARIS", create_timestamp=metastore.now_ms() - OLD_MS
    )
    metastore.insert_tasks([task])
    result = polaris_task_job.execute_in_process(
        run_config=run_config_for("POLARIS", task.id, entity_version=1),
        instance=instance,
        # No allowed prefix covers the table: its purge is refused, and the run fails.
        resources={
            "metastore": metastore_resource(metastore, max_attempts=1),
            "storage": PolarisStorageResource(allowed_prefixes=["file:///nowhere"]),
        },
        raise_on_error=False,
    )
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE

    report_run(instance, run)

    keys = [k for k in instance.get_asset_keys() if k.path[0] == "polaris"]
    assert [k.path[3:] for k in keys] == [[*namespace, name]]


@pytest.mark.parametrize(
    "value",
    [
        None,
        "ns.t",
        {"realm": "R", "namespace": "ns", "name": "t"},
        {"realm": "R", "namespace": ["ns"], "name": ""},
        {"realm": "", "namespace": ["ns"], "name": "t"},
        {"realm": "R", "namespace": ["ns", 1], "name": "t"},
        {"realm": "R", "namespace": ["ns"], "name": "t", "catalog_id": "7"},
        {"realm": "R", "namespace": ["ns"], "name": "t", "catalog_id": True},
        {"realm": "R", "namespace": ["ns"], "name": "t", "location": 5},
    ],
)
def test_a_recorded_table_that_is_not_one_is_ignored(value: object) -> None:
    assert TableRef.from_json(value) is None


def test_a_recorded_table_reads_back_whole() -> None:
    ref = TableRef("R", ("a.b", "c"), "t.u", 7, "file:///wh/a.b/c/t.u")
    assert TableRef.from_json(ref.to_json()) == ref
