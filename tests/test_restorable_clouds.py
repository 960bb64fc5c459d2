"""The restorable check of a held table on Azure (Azurite), GCS (fake-gcs-server) and S3
(moto with IAM enforced, reached by assuming the catalog's role), each through the
storage the table's purge would use (the task's catalog storage configuration):
``restorable`` while every file is there, ``N of M files missing`` with a sample, and the
asset check failing, once a file is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.dagster.backlog.restorable import evaluate_restorable_check
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.held import STILL_DELETING, check_held_tables
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import TaskPolicy
from tests.support.azurite import azurite  # noqa: F401
from tests.support.clouds import Cloud, open_cloud
from tests.support.gcs import fake_gcs  # noqa: F401
from tests.support.table_metadata import restorable_files

DAY_MS = 86_400_000


@pytest.fixture(params=["azure", "gcs", "s3"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    return open_cloud(request.param, request, tmp_path, monkeypatch)


def _held(tmp_path: Path, cloud: Cloud) -> Metastore:
    """A metastore holding the drop of ``cloud``'s table under a 7-day hold."""
    store = Metastore(
        f"sqlite:///{tmp_path}/held.db",
        policy=TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, hold_ms=7 * DAY_MS),
    )
    store.init_schema()
    task = built_tasks.drop_table_task(
        cloud.table, extra_internal_properties={STORAGE_CONFIG_KEY: cloud.storage_info}
    )
    store.insert_tasks([task])
    return store


def test_a_held_table_is_restorable_until_a_file_goes(tmp_path: Path, cloud: Cloud) -> None:
    store = _held(tmp_path, cloud)
    named = restorable_files(cloud.table)
    resolver = StorageResolver()  # no storage config: the task's catalog storage alone

    [intact] = check_held_tables(store, resolver)
    assert intact.result is not None, intact.error
    assert intact.summary() == "restorable"
    assert intact.result.files == len(named)
    assert intact.result.bytes is not None and intact.result.bytes > 0
    passed = evaluate_restorable_check(store, resolver, sample_size=5)
    assert passed.passed and passed.metadata["held tables checked"].value == 1

    data = sorted(f for f in named if f.endswith(".parquet"))[0]
    cloud.delete(data)
    assert cloud.object_name(data) not in cloud.names()

    [lost] = check_held_tables(store, resolver)
    assert lost.summary() == f"1 of {len(named)} files missing (sample: {data})"
    failed = evaluate_restorable_check(store, resolver, sample_size=5)
    assert not failed.passed
    assert failed.description is not None and STILL_DELETING in failed.description
    sample: Any = failed.metadata["sample"].value
    assert [entry["table"] for entry in sample] == ["ns.t"]
    # Read-only: every other file of the table is still there.
    assert {cloud.object_name(f) for f in named - {data}} <= cloud.names()
    store.dispose()
