"""The leak report and a reclaim on S3 (moto), Azure (Azurite) and GCS (fake-gcs-server).

On each store, a catalog's warehouse as Polaris leaves it: a dropped table whose
task row was removed with its files left and a view's metadata file left, beside
a live table, a table re-created at its old location (live again) and a
directory of other data. The S3 catalog spells its location ``s3a://``, its live
table ``s3://``: one location to Polaris. The walk lists one level at a time
through the store's own delimiter; only the two leaks are reported, and a
reclaim of the dropped table leaves its neighbours whole.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.table import Table

from builders.catalogs import catalog_entity
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.leaks.reclaim import DAY_MS, reclaim_root
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import normalize_uri
from tests.support.azurite import Azurite, azurite  # noqa: F401
from tests.support.catalog_storage import azure_location, azurite_table, fake_gcs_table
from tests.support.gcs import EMULATOR_ENV, FakeGcs, fake_gcs  # noqa: F401
from tests.support.iceberg import Warehouse
from tests.support.unreferenced import live_entity


@dataclass
class Store:
    warehouse: str  # as the catalog spells it
    build: Callable[[str], Table]
    names: Callable[[], set[str]]  # every object's URI, in the warehouse's own spelling
    put: Callable[[str, bytes], None]  # by URI
    resolver: StorageResolver


def _under(uri: str) -> Callable[[str], str]:
    return lambda name: f"{uri.rstrip('/')}/{name}"


@pytest.fixture(params=["s3", "azure", "gcs"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    if request.param == "s3":
        wh: Warehouse = request.getfixturevalue("s3_warehouse")
        bucket = wh.uri.split("/")[2]
        fs, _ = wh.resolver.filesystem(wh.uri)

        def s3_put(uri: str, data: bytes) -> None:
            with fs.open(wh.resolver.filesystem(uri)[1], "wb") as f:
                f.write(data)

        return Store(
            wh.uri.replace("s3://", "s3a://"),
            lambda name: wh.build(name, appends=1),
            lambda: {f"s3://{p}" for p in fs.find(bucket)},
            s3_put,
            wh.resolver,
        )
    if request.param == "azure":
        emu: Azurite = request.getfixturevalue("azurite")
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", emu.connection_string)
        container = emu.new_container()
        base = azure_location(container, "")
        return Store(
            azure_location(container),
            lambda name: azurite_table(emu, tmp_path, container, name),
            lambda: {f"{base}{n}" for n in emu.names(container)},
            lambda uri, data: emu.put(container, uri[len(base) :], data),
            StorageResolver(),
        )
    gcs: FakeGcs = request.getfixturevalue("fake_gcs")
    monkeypatch.setenv(EMULATOR_ENV, gcs.url)
    bucket = gcs.new_bucket()
    prefix = f"gs://{bucket}/"
    return Store(
        f"gs://{bucket}/wh",
        lambda name: fake_gcs_table(gcs, tmp_path, bucket, name),
        lambda: {f"{prefix}{n}" for n in gcs.names(bucket)},
        lambda uri, data: gcs.put(bucket, uri[len(prefix) :], data),
        StorageResolver(),
    )


def _view_metadata(location: str) -> tuple[str, bytes, str]:
    view_uuid = str(uuid.uuid4())
    doc = {
        "view-uuid": view_uuid,
        "format-version": 1,
        "location": location,
        "current-version-id": 1,
        "versions": [{"version-id": 1, "timestamp-ms": 1_700_000_000_000, "schema-id": 0}],
        "properties": {},
    }
    return (
        f"{location}/metadata/00000-{view_uuid}.metadata.json",
        json.dumps(doc).encode(),
        view_uuid,
    )


def test_only_the_leaks_are_reported_and_a_reclaim_leaves_the_neighbours(
    store: Metastore, cloud: Store
) -> None:
    catalog_entity(store, "cat", cloud.warehouse)
    live = cloud.build("live")
    live_entity(store, live.location(), name="live")
    again = cloud.build("again")
    live_entity(store, again.location(), name="again")
    dropped = cloud.build("dropped")
    ns = dropped.location().rsplit("/", 1)[0]
    view_file, view_doc, view_uuid = _view_metadata(f"{ns}/v")
    cloud.put(view_file, view_doc)
    raw = _under(cloud.warehouse.replace("s3a://", "s3://"))("raw/export.csv")
    cloud.put(raw, b"a,b\n")

    report = metastore_leaks(store, cloud.resolver)
    [cat] = report.catalogs
    assert not report.partial, cat.errors
    roots = {normalize_uri(r.uri): r for r in cat.roots}
    assert set(roots) == {normalize_uri(dropped.location()), normalize_uri(f"{ns}/v")}
    table_root = roots[normalize_uri(dropped.location())]
    dropped_files = {n for n in cloud.names() if n.startswith(dropped.location() + "/")}
    assert table_root.kind == "table" and table_root.objects == len(dropped_files)
    assert table_root.uuid == str(dropped.metadata.table_uuid)
    assert table_root.last_updated_ms == dropped.metadata.last_updated_ms
    view_root = roots[normalize_uri(f"{ns}/v")]
    assert (view_root.kind, view_root.uuid, view_root.objects) == ("view", view_uuid, 1)
    assert cat.live_tables_pruned == 2
    assert [normalize_uri(n.uri) for n in cat.not_tables] == [normalize_uri(raw.rsplit("/", 1)[0])]

    before = cloud.names()
    later = dropped.metadata.last_updated_ms + 30 * DAY_MS  # every object is a month old then
    result = reclaim_root(
        store, cloud.resolver, table_root.uri, min_age_ms=7 * DAY_MS, now_ms=later
    )
    assert result.ok and result.metadata_deleted, (result.refusal, result.error, result.failed)
    assert result.deleted == len(dropped_files)
    assert cloud.names() == before - dropped_files
    assert {
        normalize_uri(r.uri) for r in metastore_leaks(store, cloud.resolver).catalogs[0].roots
    } == {normalize_uri(f"{ns}/v")}
