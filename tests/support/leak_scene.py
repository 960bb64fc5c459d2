"""The leak report's scene: a catalog's warehouse as Polaris leaves it (tests/test_leaks.py
describes it), for the leak tests and the CLI's width tests."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyiceberg.table import Table

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.catalogs import catalog_entity
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.uri import split_uri
from tests.support.iceberg import Warehouse, write_view_metadata
from tests.support.leaks import drop_event
from tests.support.unreferenced import NAMESPACE_TYPE_CODE, live_entity, write_object


@dataclass
class Scene:
    wh: Warehouse
    dropped: Table
    view_root: str
    view_uuid: str
    broken_root: str
    raw_dir: str
    live: list[str]  # live tables' locations

    def under(self, *parts: str) -> str:
        return "/".join([self.wh.uri.rstrip("/"), *parts])


def local_spelling(uri: str) -> str:
    """``file:///x`` as the bare path ``/x``: Polaris reads both as one location."""
    scheme, rest = split_uri(uri)
    return rest if scheme == "file" else uri


def build_scene(store: Metastore, wh: Warehouse, *, base_location: str | None = None) -> Scene:
    ns = f"{wh.uri.rstrip('/')}/ns.db"
    catalog_entity(store, "cat", base_location or wh.uri, [wh.uri])
    live_entity(store, ns, type_code=NAMESPACE_TYPE_CODE, name="ns")
    live = wh.build("live", appends=1)
    live_entity(store, local_spelling(live.location()), name="live")
    again = wh.build("again", appends=1)  # dropped, then re-created at the same location
    live_entity(store, again.location(), name="again")
    dropped = wh.build("dropped", appends=1)
    drop_event(
        store,
        catalog="cat",
        namespace=["ns"],
        name="dropped",
        principal="alice",
        timestamp_ms=dropped.metadata.last_updated_ms + 1000,
    )
    pending = wh.build("pending", appends=1)
    store.insert_tasks([built_tasks.drop_table_task(pending)])
    view_root = f"{ns}/v"
    view_file = write_view_metadata(view_root, dropped.io)
    view_uuid = json.loads(dropped.io.new_input(view_file).open().read())["view-uuid"]
    broken_root = f"{ns}/broken"
    write_object(wh.resolver, f"{broken_root}/metadata/00000-x.metadata.json", b"{not json")
    write_object(wh.resolver, f"{broken_root}/data/f.parquet", b"PAR1")
    raw_dir = f"{wh.uri.rstrip('/')}/raw"
    write_object(wh.resolver, f"{raw_dir}/export.csv", b"a,b\n1,2\n")
    nested = built_tables.build_table(wh.catalog, ("raw", "nested"), appends=1)
    live_entity(store, nested.location(), name="nested", catalog_id=2)
    return Scene(
        wh,
        dropped,
        view_root,
        view_uuid,
        broken_root,
        raw_dir,
        [live.location(), again.location(), nested.location()],
    )
