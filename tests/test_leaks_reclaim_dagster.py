"""Reclaiming from Dagster: the operator's reclaim job and the schedule's auto-reclaim.

Both go through the engine's ``reclaim_root`` (judged again, only old objects, a
deletion record when one is kept). Local files aged with ``os.utime``; the
metastore on SQLite (the judging itself runs on both in test_leaks_reclaim.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    DagsterInstance,
    build_schedule_context,
    materialize,
)
from pyiceberg.table import Table

from builders import tables as built_tables
from builders.catalogs import catalog_entity
from polaris_pipeline.dagster import LeakSettings, polaris_leaked_roots
from polaris_pipeline.dagster.definitions import build_defs_from_env
from polaris_pipeline.dagster.leaks import (
    LEAKS_ASSET,
    RECLAIM_JOB,
    build_leak_report_schedule,
)
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.uri import normalize_uri, split_uri
from tests.support.iceberg import Warehouse
from tests.support.leaks import age_local_files, reclaim_job, reclaim_resources
from tests.support.unreferenced import live_entity

SQLITE = pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)


def _leaked(wh: Warehouse, name: str, *, days: float = 10, **kwargs: Any) -> Table:
    table = wh.build(name, appends=1, **kwargs)
    age_local_files(Path(split_uri(table.location())[1]), days=days)
    return table


@SQLITE
def test_the_job_reclaims_a_reported_root_with_its_record_and_per_root_metadata(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = _leaked(local_warehouse, "t")
    expected = {normalize_uri(u) for u in built_tables.list_files(dropped.location())}
    audit = tmp_path / "audit"

    ok, meta = reclaim_job(metastore, [dropped.location()], audit)
    assert ok
    assert (meta["reclaimed"], meta["refused"], meta["deleted"]) == (1, 0, len(expected))
    [root] = meta["roots"]
    assert (root["root"], root["catalog"], root["ok"]) == (dropped.location(), "cat", True)
    assert root["metadata_deleted"] and root["bytes_deleted"] == meta["bytes_deleted"] > 0
    assert not built_tables.list_files(dropped.location())
    [record] = sorted(audit.rglob("*.jsonl"))
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines[0]["kind"] == "reclaim" and lines[0]["root"] == dropped.location()
    assert lines[0]["run_id"]  # the Dagster run that reclaimed
    assert {normalize_uri(x["path"]) for x in lines if x["record"] == "path"} == expected
    assert root["deletion_record"] == str(record)


@SQLITE
def test_the_job_refuses_a_live_root_and_gc_disabled_and_keeps_young_objects(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    wh = local_warehouse
    catalog_entity(metastore, "cat", wh.uri)
    again = _leaked(wh, "again")
    live_entity(metastore, again.location(), name="again")  # re-created since the report
    kept = _leaked(wh, "kept", properties={"gc.enabled": "false"})
    young = _leaked(wh, "young", days=2)  # older than a day, younger than the week
    roots = [again.location(), kept.location(), young.location()]
    before = {r: built_tables.list_files(r) for r in roots}

    ok, meta = reclaim_job(metastore, roots)
    assert not ok  # a refusal fails the run, after every root was judged
    assert (meta["refused"], meta["deleted"], meta["reclaimed"]) == (2, 0, 0)
    by_root = {r["root"]: r for r in meta["roots"]}
    assert "overlap with live table-like 'again'" in by_root[again.location()]["refusal"]
    assert "gc.enabled='false'" in by_root[kept.location()]["refusal"]
    assert by_root[young.location()]["refusal"] is None
    outside_metadata = [u for u in before[young.location()] if "/metadata/" not in u]
    assert by_root[young.location()]["kept_young"] == len(outside_metadata)  # metadata: last
    assert {r: built_tables.list_files(r) for r in roots} == before


@SQLITE
def test_the_job_refuses_a_minimum_age_below_a_day_before_anything(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    catalog_entity(metastore, "cat", local_warehouse.uri)
    dropped = _leaked(local_warehouse, "t")
    before = built_tables.list_files(dropped.location())
    ok, meta = reclaim_job(metastore, [dropped.location()], min_age_days=0.5)
    assert not ok and meta == {}
    assert built_tables.list_files(dropped.location()) == before
    ok, _ = reclaim_job(metastore, [dropped.location()], min_age_days=1)
    assert ok and not built_tables.list_files(dropped.location())


def _scheduled_report(store: Metastore, leaks: LeakSettings) -> dict[str, Any]:
    """A run of the report with the run config its schedule gives; its metadata."""
    schedule = build_leak_report_schedule(leaks)
    with DagsterInstance.ephemeral() as instance:
        [request] = schedule.evaluate_tick(build_schedule_context(instance)).run_requests or []
        result = materialize(
            [polaris_leaked_roots],
            instance=instance,
            resources=reclaim_resources(store, leaks),
            run_config=request.run_config,
        )
        assert result.success
        [materialization] = result.asset_materializations_for_node(LEAKS_ASSET)
        return {k: v.value for k, v in materialization.metadata.items()}


@pytest.fixture
def two_catalogs(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> tuple[Table, Table, Table]:
    """Catalog ``a`` (an old and a young leaked root) and ``b`` (an old one)."""
    catalog_entity(metastore, "a", local_warehouse.uri)
    b_uri = built_tables.local_warehouse_uri(tmp_path / "b")
    catalog_entity(metastore, "b", b_uri)
    b_catalog = built_tables.open_catalog(b_uri, tmp_path / "b.db")
    b_old = built_tables.build_table(b_catalog, ("ns", "b_old"), appends=1)
    age_local_files(Path(split_uri(b_old.location())[1]), days=10)
    return _leaked(local_warehouse, "a_old"), _leaked(local_warehouse, "a_young", days=2), b_old


@SQLITE
def test_a_scheduled_report_deletes_nothing_when_auto_reclaim_is_off(
    metastore: Metastore, two_catalogs: tuple[Table, Table, Table]
) -> None:
    roots = [t.location() for t in two_catalogs]
    before = {r: built_tables.list_files(r) for r in roots}
    meta = _scheduled_report(metastore, LeakSettings())
    assert meta["roots"] == 3
    assert not [k for k in meta if k.startswith("auto_reclaim/")]
    assert {r: built_tables.list_files(r) for r in roots} == before


@SQLITE
def test_auto_reclaim_on_for_a_catalog_reclaims_its_old_roots_and_no_other(
    metastore: Metastore, two_catalogs: tuple[Table, Table, Table]
) -> None:
    a_old, a_young, b_old = two_catalogs
    young_files = built_tables.list_files(a_young.location())
    b_files = built_tables.list_files(b_old.location())
    meta = _scheduled_report(metastore, LeakSettings(auto_reclaim_catalogs=["a"]))
    assert meta["roots"] == 3  # the report is what was found
    assert meta["auto_reclaim/reclaimed"] == 1 and meta["auto_reclaim/refused"] == 0
    [done] = meta["auto_reclaim/roots"]
    assert (done["root"], done["catalog"]) == (a_old.location(), "a")
    assert not built_tables.list_files(a_old.location())
    assert built_tables.list_files(a_young.location()) == young_files
    assert built_tables.list_files(b_old.location()) == b_files


@SQLITE
def test_a_report_launched_by_hand_does_not_autoreclaim_job(
    metastore: Metastore, two_catalogs: tuple[Table, Table, Table]
) -> None:
    a_old = two_catalogs[0]
    before = built_tables.list_files(a_old.location())
    with DagsterInstance.ephemeral() as instance:
        result = materialize(
            [polaris_leaked_roots],
            instance=instance,
            resources=reclaim_resources(metastore, LeakSettings(auto_reclaim_catalogs=["a"])),
        )
        assert result.success
    assert built_tables.list_files(a_old.location()) == before


def test_the_job_is_in_the_code_location_and_auto_reclaim_reads_its_variable() -> None:
    env = {"POLARIS_PIPELINE_LEAK_AUTO_RECLAIM_CATALOGS": " sales, ,ops,sales"}
    defs = build_defs_from_env(env)
    assert defs.get_repository_def().has_job(RECLAIM_JOB)
    leaks = (defs.resources or {})["leaks"]
    assert leaks.auto_reclaim_catalogs == ["sales", "ops"] and leaks.min_age_days == 7
    assert (build_defs_from_env({}).resources or {})["leaks"].auto_reclaim_catalogs == []
