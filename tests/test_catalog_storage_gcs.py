"""Catalog storage mode on GCS: a pyiceberg table on fake-gcs-server, dropped as
Polaris drops it (storage_configuration_info of type GcpStorageConfigurationInfo),
purged through gcsfs.

The emulator has no IAM, so the downscoped token Polaris would vend cannot be
exercised here: its access boundary is checked as data instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.errors import StorageError
from polaris_pipeline.execution.runner import Status
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.credentials.gcs import EMULATOR_ENV, boundary_rules
from polaris_pipeline.tasks.model import Prop
from tests.support.catalog_storage import (
    catalog_sweep,
    fake_gcs_table,
    gcs_storage_info,
    guard_reasons,
    polaris_catalog,
    pre_1_7_view_task,
    sweep_batch_error,
)
from tests.support.gcs import FakeGcs, fake_gcs  # noqa: F401
from tests.support.iceberg import view_metadata


@pytest.fixture
def emulator(fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> FakeGcs:  # noqa: F811
    """The sweeper pointed at the emulator the standard way."""
    monkeypatch.setenv(EMULATOR_ENV, fake_gcs.url)
    return fake_gcs


def test_access_boundary_limits_each_bucket_to_the_prefixes() -> None:
    rules = boundary_rules(["gs://b/wh/ns/t", "gs://b/wh/data/t/", "gs://c/it's"])
    by_bucket: dict[str, list[dict[str, Any]]] = {}
    for rule in rules:
        by_bucket.setdefault(rule["available_resource"], []).append(rule)
    read, delete = by_bucket["//storage.googleapis.com/projects/_/buckets/b"]
    assert read["available_permissions"] == ["inRole:roles/storage.objectViewer"]
    assert delete["available_permissions"] == ["inRole:roles/storage.legacyBucketWriter"]
    # A trailing slash on every prefix: "t/" does not admit the sibling "t2/".
    assert delete["expression"] == (
        "resource.name.startsWith('projects/_/buckets/b/objects/wh/ns/t/') || "
        "resource.name.startsWith('projects/_/buckets/b/objects/wh/data/t/')"
    )
    assert "objectListPrefix', '').startsWith('wh/ns/t/')" in read["expression"]
    quoted = by_bucket["//storage.googleapis.com/projects/_/buckets/c"][1]["expression"]
    assert quoted == "resource.name.startsWith('projects/_/buckets/c/objects/it\\'s/')"
    with pytest.raises(StorageError, match="at most 5"):
        boundary_rules([f"gs://b{i}/t" for i in range(6)])
    with pytest.raises(StorageError, match="not a GCS location"):
        boundary_rules(["s3://b/t"])


def test_table_purged_and_the_neighbour_kept(
    emulator: FakeGcs, store: Metastore, tmp_path: Path
) -> None:
    bucket = emulator.new_bucket()
    table = fake_gcs_table(emulator, tmp_path, bucket, "t")
    prefix = table.location().split(f"gs://{bucket}/", 1)[1] + "/"
    assert {n for n in emulator.names(bucket) if n.startswith(prefix)}
    neighbour = prefix.rstrip("/") + "2/data/keep.parquet"
    emulator.put(bucket, neighbour, b"keep")
    task = built_tasks.drop_table_task(
        table, extra_internal_properties={STORAGE_CONFIG_KEY: gcs_storage_info(bucket)}
    )
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert store.get_task("POLARIS", task.id) is None
    remaining = emulator.names(bucket)
    assert not {n for n in remaining if n.startswith(prefix)}
    assert neighbour in remaining
    # fake-gcs-server checks no IAM: the downscoped token's buckets.get is answered
    # (unversioned). On GCS it needs storage.buckets.get, else the report says unknown.
    totals = OutcomeTotals.of(outcomes)
    assert totals.files_deleted and totals.retention_unknown == totals.files_retained == 0


def test_guard_refuses_on_gcs_what_it_refuses_on_s3(emulator: FakeGcs, store: Metastore) -> None:
    bucket = emulator.new_bucket()
    root = f"gs://{bucket}/wh/ns/t"
    inside, sibling = f"{root}/data/a.parquet", f"gs://{bucket}/wh/ns/t2/data/b.parquet"
    other = "gs://other-bucket/wh/ns/t/data/c.parquet"
    dotdot = f"{root}/../t2/data/b.parquet"
    for uri in (inside, sibling):
        emulator.put(bucket, uri.split(f"gs://{bucket}/", 1)[1], b"x")
    reasons = guard_reasons(root, inside, sibling, other, dotdot)
    assert reasons[other] == "other bucket 'other-bucket'"
    error = sweep_batch_error(store, root, [inside, sibling, dotdot], gcs_storage_info(bucket))
    assert "guard refused 2 path(s)" in error
    assert emulator.names(bucket) == {"wh/ns/t2/data/b.parquet"}


def test_a_gs_location_outside_allowed_locations_is_recorded(
    emulator: FakeGcs, store: Metastore
) -> None:
    bucket = emulator.new_bucket()
    emulator.put(bucket, "elsewhere/t/data/a.parquet", b"x")
    error = sweep_batch_error(
        store,
        f"gs://{bucket}/elsewhere/t",
        [f"gs://{bucket}/elsewhere/t/data/a.parquet"],
        gcs_storage_info(bucket),
    )
    assert "outside the catalog's allowedLocations" in error
    assert emulator.names(bucket) == {"elsewhere/t/data/a.parquet"}


@pytest.mark.parametrize("allowed", ["wh", "elsewhere"])
def test_a_pre_1_7_view_task_is_reached_through_its_catalogs_storage_configuration(
    emulator: FakeGcs, store: Metastore, allowed: str
) -> None:
    bucket = emulator.new_bucket()
    location = f"gs://{bucket}/wh/ns/v"
    names = []
    for _ in range(2):
        uri, body = view_metadata(location)
        names.append(uri.split(f"gs://{bucket}/", 1)[1])
        emulator.put(bucket, names[-1], body)
    older, current = names
    info = json.loads(gcs_storage_info(bucket))
    info["allowedLocations"] = [f"gs://{bucket}/{allowed}"]
    polaris_catalog(store, json.dumps(info))
    task = pre_1_7_view_task(f"gs://{bucket}/{current}", location)
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    if allowed == "wh":
        assert [o.status for o in outcomes] == [Status.DONE], [o.error for o in outcomes]
        assert emulator.names(bucket) == {older}  # only the current file, as 1.7 does
    else:
        # The catalog's allowedLocations bound the view, as they bound Polaris's tasks.
        row = store.get_task("POLARIS", task.id)
        assert row is not None
        assert "outside the catalog's allowedLocations" in row.properties[Prop.ERROR]
        assert emulator.names(bucket) == {older, current}
