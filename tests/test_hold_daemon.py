"""The hold through a real ``dagster-daemon``: a catalog's held drops are shown held by the
sweeper and never launched; one is restored (``tasks restore``, through Iceberg's own REST
catalog server, not Polaris: the registered table appears in that server's catalog, not
in a Polaris metastore) while held; once the hold has run its course (the drop time moved
back in the row) the sensor launches the other and it is purged, and the restored table
keeps every file. A third, re-registered by another client while held (a live row over
its last metadata file), is launched too and its run ends the purge as ``restored``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterRunStatus
from pyiceberg.catalog.rest import RestCatalog

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.dagster.contract import OUTCOME_RESTORED, TAG_OUTCOME, TAG_TASK_ID
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.model import TaskState
from tests.support.cli import run
from tests.support.daemon_fixtures import metastore_for, write_storage_config
from tests.support.iceberg_rest import RestServer
from tests.support.tasks import catalog_row, insert_row, move_drop_back
from tests.support.unreferenced import live_entity

pytestmark = pytest.mark.slow

REALM = "POLARIS"
CATALOG, CATALOG_ID = "finance", 1  # the catalogId builders.tasks records on a drop
DAY_MS = 86_400_000


def _exist(files: set[str]) -> set[str]:
    return {f for f in files if Path(split_uri(f)[1]).exists()}


def test_held_drops_wait_one_is_restored_the_other_purged_after_the_hold(
    tmp_path: Path,
    pg_url: str,
    start_daemon,
    iceberg_rest_server: RestServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wh = built_tables.local_warehouse_uri(tmp_path / "wh")
    catalog = built_tables.open_catalog(wh, tmp_path / "catalog.db", name="held")
    doomed = built_tables.build_table(catalog, ("ns", "doomed"), appends=2)
    kept = built_tables.build_table(catalog, ("ns", "kept"), appends=2)
    again = built_tables.build_table(catalog, ("ns", "again"), appends=2)
    doomed_files = built_tables.list_files(doomed.location())
    kept_files = built_tables.list_files(kept.location())
    again_files = built_tables.list_files(again.location())
    store = metastore_for(pg_url, catalog_hold_ms={CATALOG: DAY_MS})
    insert_row(store, catalog_row(REALM, CATALOG_ID, CATALOG))
    doomed_task, kept_task = built_tasks.drop_table_task(doomed), built_tasks.drop_table_task(kept)
    again_task = built_tasks.drop_table_task(again)
    store.insert_tasks([doomed_task, kept_task, again_task])
    config = write_storage_config(tmp_path / "storage.yaml", [wh])
    hold = {"POLARIS_PIPELINE_CATALOG_HOLD_DAYS": json.dumps({CATALOG: 1})}
    daemon = start_daemon(metastore_url=pg_url, storage_config=config, extra_env=hold)

    # Held: the sweeper's run-less tick says so, again and again, and launches nothing.
    def held_ticks() -> int | None:
        ticks = daemon.sensor_ticks(limit=5)
        said = [t for t in ticks if t.skip_reason and "3 held (purges on hold" in t.skip_reason]
        return len(said) if len(said) >= 3 else None

    daemon.wait_for(held_ticks, timeout_s=180, what="three sweeper ticks saying 3 held")
    assert daemon.runs(None) == [], daemon.diagnose()
    _, rows = store.tasks_with_state()
    states = {t.id: (s, t.held_until_ms) for t, s in rows}
    for task in (doomed_task, kept_task, again_task):
        state, until = states[task.id]
        assert state is TaskState.HELD and until is not None and until > store.now_ms()
    assert _exist(doomed_files) == doomed_files and _exist(kept_files) == kept_files
    # The operator sees the same, with when each purge comes (the CLI, same settings).
    for name, value in {**hold, "POLARIS_PIPELINE_GRACE_MS": "0"}.items():
        monkeypatch.setenv(name, value)
    code, out = run("tasks", "list", "--json", "--metastore", pg_url)
    assert code == 0, out
    listed = {int(d["id"]): d for d in json.loads(out)}
    for task in (doomed_task, kept_task):
        assert listed[task.id]["state"] == "held"
        assert listed[task.id]["hold"]["text"].startswith("purges after ")

    # Restored while held: registered through the REST catalog, its purge ended.
    RestCatalog("lake", uri=iceberg_rest_server.uri).create_namespace("ns")
    code, out = run(
        "tasks",
        "restore",
        str(kept_task.id),
        "--realm",
        REALM,
        "--rest-uri",
        iceberg_rest_server.uri,
        "--catalog",
        "lake",
        "--metastore",
        pg_url,
    )
    assert code == 0, out
    assert "registered ns.kept" in out, out
    assert store.get_task(REALM, kept_task.id) is None

    # Re-registered by another client while held: a live table over its last metadata file.
    live_entity(
        store,
        again.location().rstrip("/"),
        name="again_back",
        realm_id=REALM,
        internal_properties={"metadata-location": again.metadata_location},
    )

    # The hold runs its course: the sensor launches the other two drops; one is purged,
    # the re-registered one's run ends its purge as restored and deletes nothing.
    for task in (doomed_task, again_task):
        move_drop_back(store, REALM, task.id, 2 * DAY_MS)
    daemon.wait_for(lambda: store.count_tasks() == 0, timeout_s=240, what="both purges ended")
    runs = {r.tags.get(TAG_TASK_ID): r for r in daemon.wait_runs_finished(timeout_s=60)}
    assert set(runs) == {str(doomed_task.id), str(again_task.id)}, daemon.diagnose()
    assert runs[str(again_task.id)].tags.get(TAG_OUTCOME) == OUTCOME_RESTORED
    assert {r.status for r in runs.values()} == {DagsterRunStatus.SUCCESS}
    assert runs[str(doomed_task.id)].tags.get(TAG_OUTCOME) != OUTCOME_RESTORED
    assert _exist(doomed_files) == set()
    assert _exist(again_files) == again_files
    assert _exist(kept_files) == kept_files
    loaded = RestCatalog("lake", uri=iceberg_rest_server.uri).load_table(("ns", "kept"))
    assert loaded.scan().to_arrow().num_rows == kept.scan().to_arrow().num_rows
    store.dispose()
