"""Unreferenced files on Azure (Azurite) and GCS (fake-gcs-server), in catalog storage mode.

A dropped pyiceberg table with a failed commit's data files and an old metadata
file beyond the log, a neighbour sharing its name as a prefix: ``delete`` leaves
nothing under the table and the neighbour whole; ``report`` lists and keeps all.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyiceberg.table import Table

from builders import tasks as built_tasks
from polaris_pipeline.cleanup.unreferenced_report import UnreferencedReport
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.resolve import StorageResolver
from tests.support.azurite import Azurite, azurite  # noqa: F401
from tests.support.catalog_storage import (
    azure_storage_info,
    azurite_table,
    fake_gcs_table,
    gcs_storage_info,
)
from tests.support.gcs import EMULATOR_ENV, FakeGcs, fake_gcs  # noqa: F401
from tests.support.unreferenced import settle

STRAYS = (
    "data/00000-9-failed.parquet",
    "data/zz=1/00001-9-attempt.parquet",
    "metadata/0-old.metadata.json",
)


class Cloud:
    """One emulated store: its table, its object names, a way to write one."""

    def __init__(
        self,
        table: Table,
        names: Callable[[], set[str]],
        put: Callable[[str, bytes], None],
        storage_info: str,
        prefix: str,
    ) -> None:
        self.table, self.names, self.put, self.storage_info = table, names, put, storage_info
        self.prefix = prefix  # the table's object names start with this (no trailing /)


@pytest.fixture(params=["azure", "gcs"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    if request.param == "azure":
        emu: Azurite = request.getfixturevalue("azurite")
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", emu.connection_string)
        container = emu.new_container()
        table = azurite_table(emu, tmp_path, container, "t")
        prefix = table.location().split(".core.windows.net/", 1)[1].rstrip("/")
        return Cloud(
            table,
            lambda: emu.names(container),
            lambda name, data: emu.put(container, name, data),
            azure_storage_info(container),
            prefix,
        )
    gcs: FakeGcs = request.getfixturevalue("fake_gcs")
    monkeypatch.setenv(EMULATOR_ENV, gcs.url)
    bucket = gcs.new_bucket()
    table = fake_gcs_table(gcs, tmp_path, bucket, "t")
    prefix = table.location().split(f"gs://{bucket}/", 1)[1].rstrip("/")
    return Cloud(
        table,
        lambda: gcs.names(bucket),
        lambda name, data: gcs.put(bucket, name, data),
        gcs_storage_info(bucket),
        prefix,
    )


def _sweep(
    store: Metastore, cloud: Cloud, mode: str
) -> tuple[set[str], set[str], UnreferencedReport]:
    strays = {f"{cloud.prefix}/{s}" for s in STRAYS}
    for name in strays:
        cloud.put(name, b"stray")
    neighbour = f"{cloud.prefix}_2/data/keep.parquet"
    cloud.put(neighbour, b"keep")
    settle()
    task = built_tasks.drop_table_task(
        cloud.table, extra_internal_properties={STORAGE_CONFIG_KEY: cloud.storage_info}
    )
    store.insert_tasks([task])
    with Runner(store, resolver=StorageResolver(), unreferenced=mode) as runner:
        outcomes = runner.sweep()
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
