"""``polaris-pipeline sweep --unreferenced MODE``: the line, the JSON, the dry run's plan."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.cli.main import main
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.iceberg import Warehouse, table_files
from tests.support.unreferenced import add_unreferenced, live_entity, settle


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLARIS_PIPELINE_UNREFERENCED", "POLARIS_PIPELINE_STORAGE_CONFIG", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _url(store: Metastore) -> str:
    return store.url.render_as_string(hide_password=False)


def _dropped(
    store: Metastore, wh: Warehouse, *, allow_shared_location: bool = False
) -> tuple[str, set[str], set[str]]:
    """``allow_shared_location``: the operator's override, so that the referenced purge
    goes on past a live entity at the location (never the unreferenced phase)."""
    table = wh.build("t", appends=1)
    neighbour = table_files(wh.build("t_2", appends=1))
    unreferenced = add_unreferenced(table, wh.resolver)
    settle(wh.resolver, table.location())
    task = built_tasks.drop_table_task(table)
    if allow_shared_location:
        task.properties[Prop.ALLOW_SHARED_LOCATION] = "true"
    store.insert_tasks([task])
    return table.location(), unreferenced, neighbour


def test_sweep_once_deletes_unreferenced_files_and_says_so(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    location, unreferenced, neighbour = _dropped(metastore, local_warehouse)

    code, out = _cli(
        "sweep",
        "--metastore",
        _url(metastore),
        "--grace-ms",
        "0",
        "--unreferenced",
        "delete",
        "--json",
    )

    assert code == 0, out
    doc = json.loads(out)
    [root] = [o for o in doc["outcomes"] if o["role"] == "root"]
    assert doc["outcomes"][0] is root or doc["outcomes"][0]["role"] == "root"
    report = root["unreferenced"]
    assert report["mode"] == "delete" and report["deleted"] == len(unreferenced)
    assert root["unreferenced_files"] == len(unreferenced) and root["unreferenced_kept_newer"] == 0
    assert root["unreferenced_left"] == 0  # the prefix is empty, and --json says so
    assert report["refusal"] is None and report["directories_removed"] >= 1
    assert built_tables.list_files(location) == set()
    assert all(local_warehouse.exists(f) for f in neighbour)
    assert metastore.list_tasks() == []


def test_sweep_once_reports_by_default_in_its_line(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    location, unreferenced, _ = _dropped(metastore, local_warehouse)

    code, out = _cli("sweep", "--metastore", _url(metastore), "--grace-ms", "0")

    assert code == 0, out
    assert f"unreferenced under {location}: {len(unreferenced)} files" in out
    assert "would go, 0 kept as newer than the drop" in out
    assert f"; {len(unreferenced)} object(s) left under it" in out
    assert built_tables.list_files(location) == unreferenced


def test_a_refusal_names_the_overlapping_entity_and_the_task_completes(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    location, unreferenced, _ = _dropped(metastore, local_warehouse, allow_shared_location=True)
    live_entity(metastore, location, name="recreated")

    code, out = _cli(
        "sweep",
        "--metastore",
        _url(metastore),
        "--grace-ms",
        "0",
        "--unreferenced",
        "delete",
    )

    assert code == 0, out
    assert "refused, overlap with live table-like 'recreated'" in out
    assert "shared-location guard overridden: overlap with live table-like 'recreated'" in out
    assert built_tables.list_files(location) == unreferenced
    assert metastore.list_tasks() == []


def test_the_dry_run_plan_lists_unreferenced_files_apart(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    location, unreferenced, _ = _dropped(metastore, local_warehouse)

    code, out = _cli(
        "sweep",
        "--dry-run",
        "--metastore",
        _url(metastore),
        "--grace-ms",
        "0",
        "--unreferenced",
        "delete",
    )

    assert code == 0, out
    listed = {line.split()[-1] for line in out.splitlines() if line.startswith("  unreferenced  ")}
    deleted = {line.split()[-1] for line in out.splitlines() if line.startswith("  delete  ")}
    assert listed == unreferenced and not listed & deleted
    assert built_tables.list_files(location) >= unreferenced

    code, out = _cli(
        "sweep",
        "--dry-run",
        "--metastore",
        _url(metastore),
        "--grace-ms",
        "0",
        "--unreferenced",
        "delete",
        "--json",
    )
    [task] = json.loads(out)["tasks"]
    assert set(task["unreferenced"]["paths"]) == unreferenced
    assert not set(task["would_delete"]) & unreferenced
    # Nothing was deleted: the summary says what the run would leave, not what is there.
    summary = task["unreferenced"]["summary"]
    assert summary.endswith("; the prefix would then be empty"), summary


def test_an_unknown_mode_is_refused(metastore: Metastore, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _cli("sweep", "--metastore", _url(metastore), "--unreferenced", "maybe")
