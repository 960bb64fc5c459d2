"""The one guard API: a purge asks its task's guard (``Guard.for_task``) before deleting
(``Guard.may_delete``), and the answer applies both rules: the path rule on the roots
the catalog recorded, and the shared-location rule against the whole metastore."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders.tasks import batch_task, task_row
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.errors import SharedLocationRefusal
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from tests.support.unreferenced import live_entity


def _guard(store: Metastore, location: str) -> Guard:
    row = task_row(batch_task("POLARIS", internal={"storageLocation": location}))
    ctx = CleanupContext(
        task=row,
        resolver=StorageResolver(),
        config=StorageConfig(),
        live=LiveLocations(store.engine, store.check_schema()),
    )
    return Guard.for_task(ctx)


def test_a_path_outside_the_recorded_roots_is_refused_and_recorded(
    store: Metastore, tmp_path: Path
) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    inside = (table / "data" / "a.parquet").as_uri()
    neighbour = (tmp_path / "wh" / "ns" / "t_2" / "a.parquet").as_uri()
    result = CleanupTally.start()
    assert _guard(store, table.as_uri()).may_delete(result, [inside, neighbour]) == [inside]
    assert [refusal.path for refusal in result.refused] == [neighbour]


def test_without_a_recorded_location_every_path_is_refused(store: Metastore) -> None:
    result = CleanupTally.start()
    assert _guard(store, " ").may_delete(result, ["file:///wh/ns/t/a.parquet"]) == []
    [refusal] = result.refused
    assert "the catalog recorded no table location" in refusal.reason


def test_a_live_table_at_the_location_refuses_the_delete(store: Metastore, tmp_path: Path) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    live_entity(store, table.as_uri())
    guard = _guard(store, table.as_uri())
    with pytest.raises(SharedLocationRefusal):
        guard.may_delete(CleanupTally.start(), [(table / "data" / "a.parquet").as_uri()])
