"""A table whose location lies outside every location its catalog allows is refused,
dead-lettered as permanent, its files left whole: Polaris never creates such a table.
A catalog that states no locations bounds nothing."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path

import pytest
from pyiceberg.table import Table

from builders import tasks as built_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.model import Prop
from tests.support.catalog_storage import polaris_catalog
from tests.support.cli import POLICY_FLAGS, run, url_of
from tests.support.iceberg import Warehouse, table_files


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLARIS_PIPELINE_STORAGE_CONFIG", "POLARIS_PIPELINE_UNREFERENCED", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def _catalog_storage(allowed: list[str]) -> str:
    """A catalog's ``storage_configuration_info`` on local files allowing ``allowed``."""
    info = {
        "@type": "FileStorageConfigurationInfo",
        "storageType": "FILE",
        "allowedLocations": allowed,
    }
    return json.dumps(info)


def _storage_info(allowed: list[str]) -> dict[str, str]:
    return {STORAGE_CONFIG_KEY: _catalog_storage(allowed)}


def _exist(files: set[str]) -> list[bool]:
    return [Path(split_uri(f)[1]).exists() for f in files]


def test_a_table_outside_its_catalogs_locations_is_dead_lettered_and_kept(
    store: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    table = local_warehouse.build("t", appends=1)
    files = table_files(table)
    elsewhere = f"file://{tmp_path}/elsewhere/"
    task = built_tasks.drop_table_task(table, extra_internal_properties=_storage_info([elsewhere]))
    store.insert_tasks([task])

    code, out = run("sweep", "--metastore", url_of(store), *POLICY_FLAGS, "--json")

    [record] = json.loads(out)["outcomes"]
    assert code == 1 and record["status"] == "dead" and record["permanent"] is True, record
    assert f"outside the catalog's allowedLocations ({elsewhere})" in record["error"]
    assert "Polaris never creates such a table" in record["error"], record["error"]
    assert all(_exist(files))


def test_a_catalog_that_states_no_locations_bounds_nothing(
    store: Metastore, local_warehouse: Warehouse
) -> None:
    table = local_warehouse.build("t", appends=1)
    files = table_files(table)
    # No storage_configuration_info on the task: the catalog states no locations.
    store.insert_tasks([built_tasks.drop_table_task(table)])
    code, out = run("sweep", "--metastore", url_of(store), *POLICY_FLAGS)
    assert code == 0, out
    assert not any(_exist(files))


def _child_of_a_held_parent(store: Metastore, table: Table, allowed: list[str]) -> int:
    """A BATCH child naming every file of ``table`` and carrying no storage configuration,
    only the table's ``storageLocation``, as a sweeper's child of a parent without one.
    Its parent (no configuration either) is held by another executor, so only the child
    runs; the parent's dropped entity names catalog 1, which allows ``allowed``.
    Returns the child's id."""
    polaris_catalog(store, _catalog_storage(allowed))
    parent = built_tasks.drop_table_task(table)
    held = {Prop.EXECUTOR: "another-sweeper", Prop.START_TIME: str(int(time.time() * 1000))}
    parent = dataclasses.replace(parent, properties={**parent.properties, **held})
    child = built_tasks.batch_task(
        "POLARIS",
        sorted(table_files(table)),
        name=f"{parent.name}_{uuid.uuid4().hex}_{uuid.uuid4()}",
        internal={"storageLocation": table.location()},
    )
    store.insert_tasks([parent, child])
    return child.id


def test_a_child_outside_its_catalogs_locations_is_dead_lettered_and_kept(
    store: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    table = local_warehouse.build("t", appends=1)
    files = table_files(table)
    elsewhere = f"file://{tmp_path}/elsewhere/"
    child_id = _child_of_a_held_parent(store, table, [elsewhere])

    code, out = run("sweep", "--metastore", url_of(store), *POLICY_FLAGS, "--json")

    [record] = json.loads(out)["outcomes"]
    assert record["id"] == str(child_id), record
    assert code == 1 and record["status"] == "dead" and record["permanent"] is True, record
    assert f"outside the catalog's allowedLocations ({elsewhere})" in record["error"]
    assert all(_exist(files))


def test_a_child_inside_its_catalogs_locations_runs(
    store: Metastore, local_warehouse: Warehouse
) -> None:
    table = local_warehouse.build("t", appends=1)
    files = table_files(table)
    child_id = _child_of_a_held_parent(store, table, [local_warehouse.uri])

    code, out = run("sweep", "--metastore", url_of(store), *POLICY_FLAGS, "--json")

    [record] = json.loads(out)["outcomes"]
    assert record["id"] == str(child_id), record
    assert code == 0 and record["status"] == "done", record
    assert not any(_exist(files))
