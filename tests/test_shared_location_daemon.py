"""The shared-location refusal through a real ``dagster-daemon``: the sweeper's run fails
with the refusal, the row is dead-lettered, and the live table keeps every file."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterRunStatus

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.storage.uri import split_uri
from tests.support.daemon_fixtures import metastore_for, write_storage_config
from tests.support.unreferenced import live_entity


@pytest.mark.slow
def test_the_daemons_run_refuses_a_table_a_live_one_shares(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    wh = built_tables.local_warehouse_uri(tmp_path / "wh")
    catalog = built_tables.open_catalog(wh, tmp_path / "catalog.db", name="daemon")
    table = built_tables.build_table(catalog, ("ns", "t"), appends=2)
    files = built_tables.list_files(table.location())
    store = metastore_for(pg_url)
    task = built_tasks.drop_table_task(table)
    store.insert_tasks([task])
    # Registered in another realm over the same metadata file: the same files.
    live_entity(
        store,
        table.location(),
        name="registered",
        realm_id="OTHER",
        internal_properties={"metadata-location": table.metadata_location},
    )
    config = write_storage_config(tmp_path / "storage.yaml", [wh])

    daemon = start_daemon(metastore_url=pg_url, storage_config=config)

    def dead() -> bool | None:
        row = store.get_task("POLARIS", task.id)
        return True if row is not None and row.status == "dead" else None

    daemon.wait_for(dead, timeout_s=120, what="the table's task dead-lettered")
    [run] = daemon.wait_runs_finished(timeout_s=60)

    assert run.status is DagsterRunStatus.FAILURE, daemon.diagnose()
    row = store.get_task("POLARIS", task.id)
    assert row is not None and row.failure_permanent
    assert row.last_error is not None and "SharedLocationRefusal" in row.last_error
    assert "'registered' (OTHER/" in row.last_error
    assert files and all(Path(split_uri(f)[1]).exists() for f in files)
    assert [t.id for t in store.list_tasks()] == [task.id]  # no child was created
    store.dispose()
