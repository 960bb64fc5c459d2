"""``leaks --reclaim``: one reported root deleted, re-checked first, only old objects.

Local files, PostgreSQL and SQLite. Files are aged with ``os.utime``: a reclaim
never deletes an object younger than its minimum age (a day at least).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.catalogs import catalog_entity
from polaris_pipeline.cli.main import main
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.leaks.reclaim import DAY_MS, check_min_age_days, reclaim_root
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings.leaks import LeakSection
from polaris_pipeline.storage.uri import normalize_uri, split_uri
from tests.support.iceberg import Warehouse
from tests.support.leaks import age_local_files
from tests.support.unreferenced import live_entity, write_object

WEEK_MS = 7 * DAY_MS


def _path(uri: str) -> Path:
    return Path(split_uri(uri)[1])


def _leaked(store: Metastore, wh: Warehouse, name: str, **kwargs: object) -> Table:
    table = wh.build(name, appends=1, **kwargs)
    age_local_files(_path(table.location()), days=10)
    return table


def _reported(store: Metastore, wh: Warehouse) -> set[str]:
    report = metastore_leaks(store, wh.resolver)
    return {normalize_uri(r.uri) for c in report.catalogs for r in c.roots}


def test_a_reclaimed_root_is_gone_and_its_neighbours_are_not(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    live = local_warehouse.build("t_2", appends=1)  # shares the dropped root's name prefix
    live_entity(metastore, live.location(), name="t_2")
    age_local_files(_path(live.location()), days=10)
    dropped = _leaked(metastore, local_warehouse, "t")
    live_files = built_tables.list_files(live.location())
    expected = built_tables.list_files(dropped.location())

    report = reclaim_root(
        metastore, local_warehouse.resolver, dropped.location(), min_age_ms=WEEK_MS
    )
    assert report.ok and report.refusal is None
    assert report.deleted == len(expected) and report.metadata_deleted
    assert report.bytes_deleted > 0
    assert not _path(dropped.location()).exists()  # empty directories removed too
    assert built_tables.list_files(live.location()) == live_files
    assert _reported(metastore, local_warehouse) == set()


def test_objects_younger_than_the_minimum_age_and_the_metadata_stay(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = _leaked(metastore, local_warehouse, "t")
    fresh = write_object(
        local_warehouse.resolver, f"{dropped.location()}/data/fresh.parquet", b"PAR1"
    )
    report = reclaim_root(
        metastore, local_warehouse.resolver, dropped.location(), min_age_ms=WEEK_MS
    )
    assert report.kept_young == 1 and not report.metadata_deleted and report.deleted > 0
    assert local_warehouse.exists(fresh)
    assert local_warehouse.exists(dropped.metadata_location)
    # Still a table root: the next report finds what is left.
    assert _reported(metastore, local_warehouse) == {normalize_uri(dropped.location())}


def _refusal(store: Metastore, wh: Warehouse, root: str) -> str:
    before = built_tables.list_files(root)
    report = reclaim_root(store, wh.resolver, root, min_age_ms=DAY_MS)
    assert report.refusal is not None and report.deleted == 0
    assert built_tables.list_files(root) == before
    return report.refusal


def test_what_may_not_be_reclaimed_is_refused_and_left_whole(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    wh = local_warehouse
    catalog_entity(metastore, "cat", wh.uri)
    raw = write_object(wh.resolver, f"{wh.uri}/raw/export.csv", b"a,b\n")
    age_local_files(_path(wh.uri) / "raw", days=10)
    assert "not a table root" in _refusal(metastore, wh, raw.rsplit("/", 1)[0])

    again = _leaked(metastore, wh, "again")
    live_entity(metastore, again.location(), name="again")  # re-created at its location
    assert "overlap with live table-like 'again'" in _refusal(metastore, wh, again.location())

    pending = _leaked(metastore, wh, "pending")
    metastore.insert_tasks([built_tasks.drop_table_task(pending)])
    assert "a task still records the location" in _refusal(metastore, wh, pending.location())

    kept = _leaked(metastore, wh, "kept", properties={"gc.enabled": "FALSE "})
    assert "gc.enabled='FALSE '" in _refusal(metastore, wh, kept.location())

    outside = built_tables.open_catalog(
        built_tables.local_warehouse_uri(tmp_path / "elsewhere"), tmp_path / "other.db"
    )
    stray = built_tables.build_table(outside, ("ns", "stray"), appends=1)
    age_local_files(_path(stray.location()), days=10)
    assert "under no catalog" in _refusal(metastore, wh, stray.location())
    # The catalog's own location is no table root under it, and is called what it is.
    assert _refusal(metastore, wh, wh.uri) == (
        "it is catalog 'cat''s (realm POLARIS) own location, not a table root under it"
    )


@pytest.mark.parametrize(
    ("days", "message"),
    [
        (0.5, "a reclaim's minimum age in days must be at least 1, not 0.5"),
        (float("nan"), "a reclaim's minimum age in days must be a finite number, not nan"),
        (float("inf"), "a reclaim's minimum age in days must be a finite number, not inf"),
    ],
)
def test_the_engine_and_the_leaks_section_refuse_a_minimum_age_by_one_rule(
    days: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_min_age_days(days)
    with pytest.raises(ValueError, match=message):
        LeakSection(min_age_days=days)
    assert check_min_age_days(1) == DAY_MS and LeakSection(min_age_days=1).min_age_days == 1


def test_the_cli_refuses_a_minimum_age_below_a_day_and_reclaims_with_json(
    metastore: Metastore, local_warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = _leaked(metastore, local_warehouse, "t")
    url = metastore.engine.url.render_as_string(hide_password=False)
    args = ["leaks", "--metastore", url, "--reclaim", dropped.location()]
    with pytest.raises(SystemExit) as refused:  # by the parser, before anything is opened
        main([*args, "--min-age-days", "0.5"], io.StringIO())
    assert refused.value.code == 2
    assert "minimum age in days must be at least 1" in capsys.readouterr().err
    assert local_warehouse.exists(dropped.metadata_location)
    out = io.StringIO()
    assert main([*args, "--min-age-days", "3", "--json"], out) == 0
    doc = json.loads(out.getvalue())
    assert doc["ok"] and doc["metadata_deleted"] and doc["min_age_days"] == 3
    assert not local_warehouse.exists(dropped.metadata_location)
    again = io.StringIO()
    assert main(args, again) == 2  # nothing left to reclaim: no longer a table root
    assert "not a table root" in again.getvalue()


def _record_lines(audit: Path) -> list[dict[str, Any]]:
    [path] = sorted(audit.rglob("*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_reclaims_record_lists_exactly_the_paths_it_deleted_under_its_root_and_catalog(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    catalog_id = catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = _leaked(metastore, local_warehouse, "t")
    expected = built_tables.list_files(dropped.location())
    audit = tmp_path / "audit"

    report = reclaim_root(
        metastore,
        local_warehouse.resolver,
        dropped.location(),
        min_age_ms=WEEK_MS,
        deletion_record=str(audit),
        run_id="run-1",
    )
    assert report.ok and report.metadata_deleted
    assert report.catalog is not None and report.catalog.name == "cat"
    lines = _record_lines(audit)
    header, footer = lines[0], lines[-1]
    assert header["kind"] == "reclaim" and "task_id" not in header
    where = (header["realm"], header["catalog"], header["catalog_id"])
    assert where == ("POLARIS", "cat", str(catalog_id))  # an id as a string, as in --json
    assert (header["root"], header["min_age_days"], header["run_id"]) == (
        dropped.location(),
        7,
        "run-1",
    )
    paths = [line for line in lines if line["record"] == "path"]
    assert {p["result"] for p in paths} == {"deleted"}
    deleted = [normalize_uri(str(p["path"])) for p in paths]
    assert len(deleted) == len(set(deleted)) == report.deleted
    assert set(deleted) == {normalize_uri(u) for u in expected}
    assert footer["status"] == "done" and footer["totals"]["deleted"] == report.deleted
    assert report.record is not None and str(audit) in report.record
    assert str(audit / "POLARIS" / "reclaims" / "cat") in str(sorted(audit.rglob("*.jsonl"))[0])


def test_a_reclaim_whose_record_cannot_be_written_deletes_nothing(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = _leaked(metastore, local_warehouse, "t")
    before = built_tables.list_files(dropped.location())
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the record's directory should be")
    report = reclaim_root(
        metastore,
        local_warehouse.resolver,
        dropped.location(),
        min_age_ms=WEEK_MS,
        deletion_record=f"file://{blocker}/audit/",
    )
    assert report.deleted == 0 and not report.ok
    assert report.error is not None and "cannot write the deletion record" in report.error
    assert built_tables.list_files(dropped.location()) == before


def test_nothing_old_enough_to_delete_writes_no_record(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    young = local_warehouse.build("young", appends=1)  # written just now
    report = reclaim_root(
        metastore,
        local_warehouse.resolver,
        young.location(),
        min_age_ms=WEEK_MS,
        deletion_record=str(tmp_path / "audit"),
    )
    assert report.deleted == 0 and report.kept_young > 0 and report.record is None
    assert not (tmp_path / "audit").exists()
