"""The leak report on local files: dropped tables' roots that nothing owns, and nothing else.

The scene is a catalog's warehouse as Polaris leaves it: a dropped table whose
task row was removed with its files left, a view's metadata file left, beside a
live table, a live table nested in a directory of other data, a namespace, a
table whose task still exists, a table re-created at its old location, a root
whose metadata is not JSON and a directory of loose files. Every case runs on
PostgreSQL and SQLite.
"""

from __future__ import annotations

import io
import json
import time
from functools import partial
from pathlib import Path

from builders import tables as built_tables
from builders.catalogs import catalog_entity
from polaris_pipeline.cli.main import main
from polaris_pipeline.leaks import drops as drops_module
from polaris_pipeline.leaks.catalogs import read_catalogs
from polaris_pipeline.leaks.drops import DropEvents
from polaris_pipeline.leaks.find import find_leaks
from polaris_pipeline.leaks.model import LeakedRoot, LeakReport
from polaris_pipeline.leaks.owners import RootOwners
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.storage.uri import normalize_uri, parse_location, split_uri
from tests.support.iceberg import Warehouse, write_view_metadata
from tests.support.leak_scene import build_scene, local_spelling
from tests.support.leaks import drop_event
from tests.support.unreferenced import (
    NAMESPACE_TYPE_CODE,
    live_entity,
    unlistable_directory,
)


def report_of(store: Metastore, wh: Warehouse, listed: list[str] | None = None) -> LeakReport:
    version = store.check_schema()
    owners = RootOwners(LiveLocations(store.engine, version), store.list_tasks(None))
    progress = listed.append if listed is not None else None
    return find_leaks(
        read_catalogs(store.engine),
        owners,
        wh.resolver,
        DropEvents(store.engine, version),
        progress,
    )


def _roots(report: LeakReport) -> dict[str, LeakedRoot]:
    return {normalize_uri(r.uri): r for c in report.catalogs for r in c.roots}


def test_only_the_dropped_roots_are_reported_with_their_numbers(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    scene = build_scene(metastore, local_warehouse)
    listed: list[str] = []
    report = report_of(metastore, local_warehouse, listed)

    roots = _roots(report)
    dropped_uri = normalize_uri(scene.dropped.location())
    assert set(roots) == {
        dropped_uri,
        normalize_uri(scene.view_root),
        normalize_uri(scene.broken_root),
    }
    dropped = roots[dropped_uri]
    files = built_tables.list_files(scene.dropped.location())
    assert dropped.kind == "table"
    assert dropped.objects == len(files)
    assert dropped.bytes == sum(Path(split_uri(f)[1]).stat().st_size for f in files)
    assert dropped.uuid == str(scene.dropped.metadata.table_uuid)
    assert dropped.last_updated_ms == scene.dropped.metadata.last_updated_ms
    assert dropped.metadata_file is not None
    assert normalize_uri(dropped.metadata_file) == normalize_uri(scene.dropped.metadata_location)
    assert dropped.dropped_by == "alice"
    assert dropped.newest_ms is not None and dropped.error is None and not dropped.partial

    view = roots[normalize_uri(scene.view_root)]
    assert view.kind == "view" and view.uuid == scene.view_uuid
    broken = roots[normalize_uri(scene.broken_root)]
    assert broken.kind == "unknown" and (broken.error or "").startswith("malformed")
    assert broken.objects == 2

    [cat] = report.catalogs
    assert cat.pending_roots == 1  # the table whose task row is still there
    assert cat.live_tables_pruned == 3  # live, again (re-created) and raw/nested
    assert [(n.uri, n.objects) for n in cat.not_tables] == [(scene.raw_dir, 1)]
    assert not report.partial
    # Never listed inside a live table: the walk stops at its location.
    live = [parse_location(loc, directory=True) for loc in scene.live]
    inside = [d for d in listed for loc in live if loc.contains(parse_location(d, directory=True))]
    assert inside == []


def test_a_live_table_under_a_dropped_root_owns_it(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    outer = local_warehouse.build("outer", appends=1)
    inner = f"{outer.location()}/inner"
    live_entity(metastore, inner, name="inner")
    report = report_of(metastore, local_warehouse)
    assert report.roots == 0
    assert report.catalogs[0].owned_roots == 1


def test_a_namespace_at_the_root_owns_it_and_one_above_does_not(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    a = local_warehouse.build("a", appends=1)
    b = local_warehouse.build("b", appends=1)
    live_entity(metastore, a.location(), type_code=NAMESPACE_TYPE_CODE, name="odd")
    live_entity(metastore, a.location().rsplit("/", 1)[0], type_code=NAMESPACE_TYPE_CODE, name="ns")
    assert set(_roots(report_of(metastore, local_warehouse))) == {normalize_uri(b.location())}


def test_locations_in_another_spelling_compare_as_polaris_compares_them(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    # The catalog says file:/x, the live table /x/..., the files file:///x/...
    _, path = split_uri(local_warehouse.uri)
    catalog_entity(metastore, "cat", f"file:{path}/")
    live = local_warehouse.build("live", appends=1)
    live_entity(metastore, local_spelling(live.location()) + "/", name="live")
    gone = local_warehouse.build("gone", appends=1)
    report = report_of(metastore, local_warehouse)
    assert set(_roots(report)) == {normalize_uri(gone.location())}
    assert report.catalogs[0].live_tables_pruned == 1


def test_a_catalog_without_locations_is_named_and_skipped(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "nowhere", None)
    url = str(metastore.engine.url.render_as_string(hide_password=False))
    text, out = io.StringIO(), io.StringIO()
    assert main(["leaks", "--metastore", url], text) == 0
    [line] = [line for line in text.getvalue().splitlines() if "'nowhere'" in line]
    assert "skipped" in line
    assert main(["leaks", "--metastore", url, "--json"], out) == 0
    [catalog] = json.loads(out.getvalue())["catalogs"]
    assert (catalog["realm"], catalog["catalog"]) == ("POLARIS", "nowhere")
    assert catalog["skipped"].startswith("no default-base-location")
    assert catalog["roots"] == [] and catalog["partial"] is False


def test_listings_that_fail_half_way_report_what_they_saw_as_partial(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = local_warehouse.build("dropped", appends=1)
    files = built_tables.list_files(dropped.location())
    # Inside the dropped root (its totals fail) and beside it (the walk fails there).
    unlistable_directory(Path(split_uri(dropped.location())[1]) / "data")
    unlistable_directory(Path(split_uri(local_warehouse.uri)[1]))
    report = report_of(metastore, local_warehouse)
    [root] = report.catalogs[0].roots
    # What was listed before the failure is counted, and the root says it is partial.
    assert root.partial and 0 < root.objects <= len(files) and "failed" in (root.error or "")
    assert report.partial
    assert any("ENAMETOOLONG" in e or "too long" in e for e in report.catalogs[0].errors)
    url = metastore.engine.url.render_as_string(hide_password=False)
    for form in ([], ["--json"]):
        out = io.StringIO()
        assert main(["leaks", "--metastore", url, *form], out) == 1
    assert json.loads(out.getvalue())["catalogs"][0]["partial"] is True


def test_the_cli_prints_the_report_and_its_json(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    scene = build_scene(metastore, local_warehouse)
    url = str(metastore.engine.url.render_as_string(hide_password=False))
    out = io.StringIO()
    assert main(["leaks", "--metastore", url, "--catalog", "cat", "--json"], out) == 0
    doc = json.loads(out.getvalue())
    assert doc["roots"] == 3 and doc["partial"] is False
    [cat] = doc["catalogs"]
    assert cat["catalog"] == "cat" and cat["pending_task_roots"] == 1
    by_root = {normalize_uri(r["root"]): r for r in cat["roots"]}
    dropped = by_root[normalize_uri(scene.dropped.location())]
    assert dropped["dropped_by"] == "alice" and dropped["uuid"] == str(
        scene.dropped.metadata.table_uuid
    )
    assert cat["leaked_bytes"] == sum(r["bytes"] for r in cat["roots"]) > 0
    text = io.StringIO()
    assert main(["leaks", "--metastore", url], text) == 0
    assert "3 leaked root(s)" in text.getvalue()
    assert "not a table: 1" in text.getvalue()
    # A catalog that does not exist is refused, naming those that do (not "0 roots").
    other = io.StringIO()
    assert main(["leaks", "--metastore", url, "--catalog", "other", "--json"], other) == 2
    assert other.getvalue() == ""


def test_schema_v1_judges_by_the_entities_location_property_and_has_no_events(
    tmp_path: Path, local_warehouse: Warehouse
) -> None:
    store = Metastore(f"sqlite:///{tmp_path}/v1.db")
    store.init_schema(1)
    try:
        catalog_entity(store, "cat", local_warehouse.uri)
        live = local_warehouse.build("live", appends=1)
        live_entity(store, live.location(), name="live", with_location_column=False)
        gone = local_warehouse.build("gone", appends=1)
        listed: list[str] = []
        report = report_of(store, local_warehouse, listed)
        assert set(_roots(report)) == {normalize_uri(gone.location())}
        assert report.catalogs[0].live_tables_pruned == 1
        assert not any(d.startswith(live.location()) for d in listed)
        [root] = report.catalogs[0].roots
        assert root.dropped_by is None and root.uuid == str(gone.metadata.table_uuid)
    finally:
        store.dispose()


def test_catalogs_sharing_a_location_report_each_root_once(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    gone = local_warehouse.build("gone", appends=1)
    namespace = gone.location().rsplit("/", 1)[0]
    # "a" walks the namespace directory; "b" allows the whole warehouse around it.
    catalog_entity(metastore, "a", namespace)
    catalog_entity(metastore, "b", None, [local_warehouse.uri])
    report = report_of(metastore, local_warehouse)
    a, b = report.catalogs
    assert [normalize_uri(r.uri) for r in a.roots] == [normalize_uri(gone.location())]
    assert b.roots == [] and b.walked_before == 1
    assert report.roots == 1


def test_the_drop_is_its_catalogs_first_after_drop_event_of_that_name_since_its_last_update(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    table = local_warehouse.build("t", appends=1)
    updated = table.metadata.last_updated_ms
    event = partial(drop_event, metastore, namespace=["ns"], name="t")
    # A drop of that name before the table's last update was another table's.
    event(catalog="cat", principal="old", timestamp_ms=updated - 10)
    # BEFORE_DROP_TABLE is written before the drop is tried, also when it then fails.
    event(catalog="cat", principal="mallory", timestamp_ms=updated + 5, phase="BEFORE")
    # Another catalog's table of that name, and a view of that name.
    event(catalog="other", principal="eve", timestamp_ms=updated + 6)
    event(catalog="cat", principal="victor", timestamp_ms=updated + 7, kind="VIEW")
    event(catalog="cat", principal="bob", timestamp_ms=updated + 10)
    event(catalog="cat", principal="later", timestamp_ms=updated + 40)

    root = _roots(report_of(metastore, local_warehouse))[normalize_uri(table.location())]

    assert (root.dropped_by, root.dropped_at_ms) == ("bob", updated + 10)


def test_a_view_root_takes_its_view_drop_never_a_table_drop_of_that_name(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    view_root = f"{local_warehouse.uri.rstrip('/')}/ns.db/v"
    keep = local_warehouse.build("keep", appends=1)
    live_entity(metastore, keep.location(), name="keep")
    write_view_metadata(view_root, keep.io)
    now = int(time.time() * 1000)
    event = partial(drop_event, metastore, catalog="cat", namespace=["ns"], name="v")
    event(principal="tina", timestamp_ms=now + 5, kind="TABLE")
    event(principal="vera", timestamp_ms=now + 10, kind="VIEW")

    root = _roots(report_of(metastore, local_warehouse))[normalize_uri(view_root)]

    assert root.kind == "view" and root.dropped_by == "vera"


def test_an_event_whose_namespace_is_the_roots_path_wins_over_one_of_the_name_only(
    metastore: Metastore,
) -> None:
    # A default location is <base>/<namespace levels>/<name>: sales.eu.t is at .../sales/eu/t.
    drop_event(metastore, catalog="cat", namespace=["hr"], name="t", principal="x", timestamp_ms=1)
    drop_event(
        metastore, catalog="cat", namespace=["sales", "eu"], name="t", principal="y", timestamp_ms=2
    )
    drops = DropEvents(metastore.engine, metastore.check_schema())

    found = drops.find("POLARIS", "cat", ("wh", "sales", "eu", "t"), "table", None)
    elsewhere = drops.find("POLARIS", "cat", ("wh", "custom", "t"), "table", None)

    assert found is not None and found.principal == "y"
    assert elsewhere is not None and elsewhere.principal == "x"  # the earliest, by name only


def test_a_drop_event_reads_the_name_from_the_attributes_when_the_identifier_is_ambiguous() -> None:
    # TableIdentifier.toString() joins with '.', so a name holding a dot is told apart only
    # by the table_name attribute; additional_properties may come back as JSON text.
    attrs = '{"catalog_name": "cat", "namespace": "a.b", "table_name": "t.v2"}'
    from_attrs = drops_module.drop_event("AFTER_DROP_TABLE", "cat", "p", 1, "a.b.t.v2", attrs)
    from_identifier = drops_module.drop_event("AFTER_DROP_TABLE", "cat", "p", 1, "a.b.t", {})

    assert (from_attrs.name, from_attrs.namespace) == ("t.v2", ("a", "b"))
    assert (from_identifier.name, from_identifier.namespace) == ("t", ("a", "b"))
