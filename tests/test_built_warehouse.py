"""The built warehouses (tests/support/iceberg.py) give every test ``ns.t`` and ``ns.t_2``
as built, whatever the test before did to them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from builders import tables as built_tables
from polaris_pipeline.storage.uri import split_uri
from tests.support.iceberg import BUILT_NEIGHBOUR, BUILT_TABLE, Warehouse, table_files
from tests.support.s3 import MotoS3
from tests.support.unreferenced import unlistable_directory


def _times(root: Path) -> dict[str, int]:
    """Every file under ``root`` with its modification time."""
    return {
        str(path.relative_to(root)): path.stat().st_mtime_ns
        for path in root.rglob("*")
        if path.is_file()
    }


def _damage(wh: Warehouse) -> None:
    """What tests do to a warehouse: purge a table, add files, leave an unlistable tree."""
    table = wh.catalog.load_table(BUILT_TABLE)
    for uri in table_files(table):
        os.remove(split_uri(uri)[1])
    location = Path(split_uri(table.location())[1])
    (location / "data").mkdir(parents=True, exist_ok=True)
    (location / "data" / "stray.parquet").write_bytes(b"stray")
    unlistable_directory(location / "data")


def test_a_local_warehouse_is_put_back_file_for_file_with_its_times(
    built_local_warehouse: Warehouse, _built_local: Any
) -> None:
    root = Path(split_uri(built_local_warehouse.uri)[1])
    built = _times(root)
    assert any("/t/" in name for name in built) and any("/t_2/" in name for name in built)
    _damage(built_local_warehouse)

    _built_local.restore()  # as the fixture does before the next test

    assert _times(root) == built
    table = built_local_warehouse.catalog.load_table(BUILT_TABLE)
    assert table_files(table) and all(built_local_warehouse.exists(f) for f in table_files(table))
    for ident in (BUILT_TABLE, BUILT_NEIGHBOUR):
        now = table_files(built_local_warehouse.catalog.load_table(ident))
        assert built_local_warehouse.built_files(ident) == now


def test_an_s3_warehouse_is_put_back_object_for_object(
    built_s3_warehouse: Warehouse, _built_s3: Any, moto_server: MotoS3
) -> None:
    wh = built_s3_warehouse
    built = wh.files()
    table = wh.catalog.load_table(BUILT_TABLE)
    neighbour = wh.catalog.load_table(BUILT_NEIGHBOUR)
    fs, _ = wh.resolver.filesystem(wh.uri)
    # Only what differs is put back: an object written over in place must be too.
    overwritten = neighbour.metadata_location.removeprefix("s3://")
    content = fs.cat(overwritten)
    fs.pipe(overwritten, b"{}")
    for uri in table_files(table):
        fs.rm(uri.removeprefix("s3://"))
    fs.pipe(f"{table.location().removeprefix('s3://')}/data/stray.parquet", b"stray")
    assert built_tables.list_files(wh.uri, s3=wh.s3) != built

    _built_s3.restore(moto_server.client())

    assert wh.files() == built
    assert fs.cat(overwritten) == content
    for ident in (BUILT_TABLE, BUILT_NEIGHBOUR):
        assert wh.built_files(ident) == table_files(wh.catalog.load_table(ident))
