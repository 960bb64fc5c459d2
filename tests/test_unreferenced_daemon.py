"""Unreferenced files through a real ``dagster-daemon``: the sensor, the run, its last step."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterRunStatus

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.dagster.contract import FINISH_STEP
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from tests.support.daemon_fixtures import metastore_for, write_storage_config
from tests.support.unreferenced import add_unreferenced, settle


@pytest.mark.slow
def test_the_daemons_run_deletes_the_unreferenced_files_last(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    wh = built_tables.local_warehouse_uri(tmp_path / "wh")
    catalog = built_tables.open_catalog(wh, tmp_path / "catalog.db", name="daemon")
    table = built_tables.build_table(catalog, ("ns", "t"), appends=2)
    neighbour = built_tables.build_table(catalog, ("ns", "t_2"), appends=1)
    keep = built_tables.list_files(neighbour.location())
    resolver = StorageResolver(StorageConfig())
    unreferenced = add_unreferenced(table, resolver)
    settle(resolver, table.location())
    store = metastore_for(pg_url)
    task = built_tasks.drop_table_task(table)
    store.insert_tasks([task])
    config = write_storage_config(tmp_path / "storage.yaml", [wh])

    daemon = start_daemon(
        metastore_url=pg_url,
        storage_config=config,
        extra_env={"POLARIS_PIPELINE_UNREFERENCED": "delete"},
    )
    daemon.wait_for(
        lambda: store.list_tasks() == [] or None, timeout_s=120, what="the table's tasks done"
    )
    [run] = daemon.wait_runs_finished(timeout_s=60)

    assert run.status is DagsterRunStatus.SUCCESS, daemon.diagnose()
    assert built_tables.list_files(table.location()) == set()
    assert not Path(table.location().removeprefix("file://")).exists()
    assert built_tables.list_files(neighbour.location()) == keep
    meta = daemon.output_metadata(run.run_id, FINISH_STEP, "result")
    assert f"{len(unreferenced)} files" in str(meta.get("unreferenced")), meta
    store.dispose()
