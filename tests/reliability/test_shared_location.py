"""Scenario 12: a dropped table whose files live tables still share, swept by the CLI.

Polaris's own purge (and Iceberg's) deletes every file the dropped table's last
metadata names, and so do we without a guard: a table registered over the same
metadata file in another realm, or living in the same location in another catalog,
then loses its data. Here the dropped table's task is swept by ``polaris-pipeline
sweep`` in a worker process among ordinary tasks, with two live owners of its files,
each in turn: nothing of the dropped table may be deleted, its row is dead-lettered with
the live entity named, and the ordinary tasks around it finish.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import TaskState
from tests.reliability.harness import RelDb, Scenario, Workers, list_tree, sweep_once
from tests.support.iceberg import Warehouse, table_files
from tests.support.unreferenced import live_entity

OTHER_REALM = "tenant-b"
OTHER_CATALOG = 7


@pytest.mark.scenario(12, "Shared location: a dropped table whose files live tables still use")
def test_a_shared_location_is_refused_before_anything_is_deleted(
    rel_db: RelDb, workers: Workers, scenario: Scenario, local_warehouse: Warehouse
) -> None:
    store = Metastore(rel_db.url)
    wh = local_warehouse
    # One live owner per case: another realm registered over the same metadata file;
    # another catalog of the same realm at the same location, spelt file:/ instead of
    # file:///.
    shared = wh.build("shared", appends=2)
    other = wh.build("other", appends=2)
    plain = wh.build("plain", appends=1)
    live_entity(
        store,
        shared.location(),
        name="registered_copy",
        realm_id=OTHER_REALM,
        internal_properties={"metadata-location": shared.metadata_location},
    )
    live_entity(
        store,
        other.location().replace("file:///", "file:/", 1),
        name="same_place",
        catalog_id=OTHER_CATALOG,
    )
    shared_task = built_tasks.drop_table_task(shared)
    other_task = built_tasks.drop_table_task(other)
    plain_task = built_tasks.drop_table_task(plain)
    store.insert_tasks([shared_task, other_task, plain_task])
    kept = table_files(shared) | table_files(other)
    purged = table_files(plain)
    root = Path(wh.uri.removeprefix("file://"))
    before = list_tree(root)
    scenario.load = (
        "three dropped pyiceberg tables on PostgreSQL, one `polaris-pipeline sweep` "
        "(a worker process): one table also registered in another realm over the same "
        "metadata file, one at the location of a live table of another catalog (spelt "
        "file:/), one shared with nothing"
    )
    scenario.fault = "live tables owning the dropped tables' files"

    run = sweep_once(workers, rel_db.url)

    deleted = before - list_tree(root)
    wrongly = deleted & kept
    rows = {row.id: row for row in store.list_tasks()}
    _, states = store.tasks_with_state()
    state_of = {task.id: state for task, state in states}
    scenario.losses(
        files_wrongly_deleted=len(wrongly),
        refused_tasks_lost=sum(1 for t in (shared_task, other_task) if t.id not in rows),
    )
    scenario.metrics.update(
        {
            "cli_exit_code": run.code,
            "files_deleted": len(deleted),
            "recorded_errors": {
                name: (rows[t.id].last_error or "")[:300]
                for name, t in (("shared", shared_task), ("other", other_task))
                if t.id in rows
            },
        }
    )
    assert run.code == 1, run.stderr[-2000:]  # two tasks refused; the sweep went on
    assert not wrongly, sorted(wrongly)[:5]
    assert all(Path(u.removeprefix("file://")).exists() for u in kept)
    scenario.check(
        "nothing the live tables read was deleted: every file of both shared tables is there"
    )
    for task, owner in ((shared_task, "registered_copy"), (other_task, "same_place")):
        row = rows.get(task.id)
        assert row is not None, f"{owner}: the refused task's row is gone"
        assert state_of[task.id] is TaskState.DEAD, (owner, state_of[task.id])
        assert owner in (row.last_error or "") and "shares" in (row.last_error or ""), row
    scenario.check(
        "each refused task is dead-lettered at once, its recorded error naming the live "
        "table and the override"
    )
    assert plain_task.id not in rows and deleted
    assert not any(Path(u.removeprefix("file://")).exists() for u in purged)
    scenario.check("the task shared with nothing was purged in the same sweep")
