"""Unreferenced files on Azure (Azurite) and GCS (fake-gcs-server), in catalog storage mode.

A dropped pyiceberg table with a failed commit's data files and an old metadata
file beyond the log, a neighbour sharing its name as a prefix: ``delete`` leaves
nothing under the table and the neighbour whole; ``report`` lists and keeps all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.unreferenced.report import UnreferencedReport
from tests.support.azurite import azurite  # noqa: F401
from tests.support.clouds import Cloud, open_cloud
from tests.support.gcs import fake_gcs  # noqa: F401
from tests.support.metastore import with_policy
from tests.support.unreferenced import settle

STRAYS = (
    "data/00000-9-failed.parquet",
    "data/zz=1/00001-9-attempt.parquet",
    "metadata/0-old.metadata.json",
)


@pytest.fixture(params=["azure", "gcs"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    return open_cloud(request.param, request, tmp_path, monkeypatch)


def _sweep(
    store: Metastore, cloud: Cloud, mode: str
) -> tuple[set[str], set[str], UnreferencedReport]:
    strays = {f"{cloud.prefix}/{s}" for s in STRAYS}
    for name in strays:
        cloud.put(name, b"stray")
    neighbour = f"{cloud.prefix}_2/data/keep.parquet"
    cloud.put(neighbour, b"keep")
    settle(StorageResolver(), cloud.table.location())
    task = built_tasks.drop_table_task(
        cloud.table, extra_internal_properties={STORAGE_CONFIG_KEY: cloud.storage_info}
    )
    store.insert_tasks([task])
    with Runner(
        with_policy(store, unreferenced=mode),
        resolver=StorageResolver(),
    ) as runner:
        outcomes = sweep_tasks(runner)
    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert store.list_tasks() == []
    [root] = [o for o in outcomes if o.lease.task_id == task.id]
    assert root.result is not None and root.result.unreferenced is not None
    return strays, {neighbour}, root.result.unreferenced


def test_delete_mode_leaves_nothing_under_the_table(store: Metastore, cloud: Cloud) -> None:
    strays, neighbour, report = _sweep(store, cloud, "delete")

    remaining = cloud.names()
    assert not {n for n in remaining if n.startswith(cloud.prefix + "/")}, remaining
    assert neighbour <= remaining
    assert report.deleted == len(strays) and report.refusal is None


def test_report_mode_lists_them_and_keeps_them(store: Metastore, cloud: Cloud) -> None:
    strays, neighbour, report = _sweep(store, cloud, "report")

    remaining = cloud.names()
    assert strays <= remaining and neighbour <= remaining
    assert report.would_delete == len(strays)
    assert {p.rsplit("/", 2)[-1] for p in report.paths} == {s.rsplit("/", 1)[-1] for s in STRAYS}
