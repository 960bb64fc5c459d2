"""The restorable check names every file a dropped table's last metadata names and
finds the missing ones, on local files and on S3 (moto), reading each manifest once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyiceberg.table import Table

from builders.tasks import drop_table_task
from polaris_pipeline.dagster.backlog.restorable import evaluate_restorable_check
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.held import STILL_DELETING
from polaris_pipeline.restore.restorable import ManifestCache, check_restorable
from polaris_pipeline.tasks.model import TaskPolicy
from tests.support.iceberg import Warehouse
from tests.support.table_metadata import restorable_files


def test_an_intact_table_is_restorable_and_each_manifest_is_read_once(
    warehouse: Warehouse,
) -> None:
    table = warehouse.build("t", with_deletes=True, with_statistics=True)
    cache = ManifestCache()
    first = check_restorable(warehouse.resolver, table.metadata_location, cache)
    assert first.restorable and first.summary() == "restorable"
    assert first.files == len(restorable_files(table))
    assert first.bytes is not None and first.bytes > 0
    read = len(cache.entries)
    assert read > 0
    # Cached by manifest: a second check reads no manifest at all, and still finishes.
    again = check_restorable(warehouse.resolver, table.metadata_location, cache, max_manifests=0)
    assert again.restorable and again.files == first.files and len(cache.entries) == read


def test_missing_files_are_counted_and_sampled(warehouse: Warehouse) -> None:
    table = warehouse.build("t", with_deletes=True)
    named = restorable_files(table)
    data = sorted(f for f in named if f.endswith(".parquet"))
    manifest = next(iter(table.current_snapshot().manifests(table.io))).manifest_path  # type: ignore[union-attr]
    for uri in (data[0], data[-1]):
        fs, path = warehouse.resolver.filesystem(uri)
        fs.rm(path)
    result = check_restorable(warehouse.resolver, table.metadata_location)
    assert not result.restorable
    assert {data[0], data[-1]} <= set(result.missing)
    assert result.summary().startswith(f"{len(result.missing)} of {result.files} files missing")
    assert "sample: " in result.summary()
    # A manifest gone too: it is missing, and its own entries are no longer known (so
    # the data files are checked first, while every manifest can still name them).
    fs, path = warehouse.resolver.filesystem(manifest)
    fs.rm(path)
    assert manifest in check_restorable(warehouse.resolver, table.metadata_location).missing


def test_a_table_whose_metadata_file_is_gone_is_not_restorable(warehouse: Warehouse) -> None:
    table = warehouse.build("t", appends=1)
    fs, path = warehouse.resolver.filesystem(table.metadata_location)
    fs.rm(path)
    result = check_restorable(warehouse.resolver, table.metadata_location)
    assert result.missing == (table.metadata_location,)
    assert result.summary() == f"1 of 1 files missing (sample: {table.metadata_location})"


def test_a_budget_leaves_the_check_incomplete_never_restorable(warehouse: Warehouse) -> None:
    table = warehouse.build("t")
    result = check_restorable(warehouse.resolver, table.metadata_location, max_manifests=1)
    assert not result.restorable and result.summary().startswith("not known yet")


def _held_store(tmp_path: Path, table: Table) -> Metastore:
    """A metastore holding ``table``'s drop (Polaris's task) under a 7-day hold."""
    store = Metastore(
        f"sqlite:///{tmp_path}/held.db",
        policy=TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, hold_ms=7 * 86_400_000),
    )
    store.init_schema()
    store.insert_tasks([drop_table_task(table)])
    return store


def test_the_check_fails_when_a_held_table_loses_a_file_and_says_who_deletes(
    tmp_path: Path, warehouse: Warehouse
) -> None:
    table = warehouse.build("t", appends=2)
    store = _held_store(tmp_path, table)
    passed = evaluate_restorable_check(store, warehouse.resolver, sample_size=5)
    assert passed.passed
    assert passed.metadata["held tables checked"].value == 1
    assert isinstance(passed.metadata["bytes held"].value, int)
    assert passed.metadata["bytes held"].value > 0
    victim = sorted(f for f in restorable_files(table) if f.endswith(".parquet"))[0]
    fs, path = warehouse.resolver.filesystem(victim)
    fs.rm(path)
    failed = evaluate_restorable_check(store, warehouse.resolver, sample_size=5)
    assert not failed.passed
    assert failed.description is not None and STILL_DELETING in failed.description
    sample: Any = failed.metadata["sample"].value
    (entry,) = sample
    assert entry["table"] == "ns.t" and entry["result"].startswith("1 of ")
    assert victim in entry["result"]
    store.dispose()
