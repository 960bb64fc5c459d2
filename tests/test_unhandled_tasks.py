"""Cleanup tasks Polaris writes but never runs (a role, namespace, catalog or principal
dropped) are ``unhandled``: never leased, never failed or dead, discarded only on request.
"""

from __future__ import annotations

import pytest
from sqlalchemy import update

from polaris_pipeline.errors import MetastoreError
from polaris_pipeline.execution.dry_run import dry_run
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.metastore.transitions import DiscardOutcome
from polaris_pipeline.tasks.model import Prop, TaskState
from tests.support.cli import run, url_of
from tests.support.unhandled import ENTITY_TYPES, polaris_cleanup_task, seed_unhandled


def test_each_entity_type_polaris_writes_is_unhandled(metastore: Metastore) -> None:
    unhandled, normal = seed_unhandled(metastore)
    _, rows = metastore.tasks_with_state(["POLARIS"])
    states = {t.id: s for t, s in rows}
    assert {states[t.id] for t in unhandled} == {TaskState.UNHANDLED}
    assert states[normal.id] is TaskState.ORPHANED
    # Counted apart from orphaned, failed and dead (in SQL on PostgreSQL).
    counts = metastore.count_by_state(["POLARIS"])["POLARIS"]
    assert counts[TaskState.UNHANDLED] == len(ENTITY_TYPES)
    assert counts[TaskState.ORPHANED] == 1 and counts[TaskState.DEAD] == 0


def test_unhandled_tasks_are_never_leased(metastore: Metastore) -> None:
    unhandled, normal = seed_unhandled(metastore)
    leases = metastore.lease_available("sweeper", 100)
    assert [lease.task_id for lease in leases] == [normal.id]
    assert metastore.lease_available("sweeper", 100) == []
    # Not by name either (the path a crashed run's children take).
    assert all(metastore.lease_task("POLARIS", t.id, "sweeper") is None for t in unhandled)
    for task in unhandled:
        row = metastore.get_task("POLARIS", task.id)
        assert row is not None and row.executor_id is None and row.entity_version == 1


def test_sweep_leaves_unhandled_tasks_alone(metastore: Metastore) -> None:
    unhandled, _ = seed_unhandled(metastore)
    with Runner(metastore) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])
        plans = dry_run(runner, ["POLARIS"])
    assert {o.lease.task_id for o in outcomes}.isdisjoint({t.id for t in unhandled})
    assert all(t.row.id not in {u.id for u in unhandled} for t, _ in plans)
    for task in unhandled:
        row = metastore.get_task("POLARIS", task.id)
        assert row is not None and row.attempt_count == 0 and row.last_error is None


def test_a_dead_lettered_role_task_of_an_older_version_is_unhandled_not_dead(
    metastore: Metastore,
) -> None:
    """Rows an older sweeper leased eight times and dead-lettered stop counting as dead."""
    task = polaris_cleanup_task("POLARIS", 5, entity_id=77)
    task.properties.update(
        {
            Prop.EXECUTOR: "old",
            Prop.START_TIME: "1",
            Prop.ATTEMPT_COUNT: "8",
            Prop.STATUS: "dead",
            Prop.ERROR: "dropped entity typeCode is 5, not 7 (TABLE_LIKE)",
        }
    )
    metastore.insert_tasks([task])
    assert metastore.count_by_state(["POLARIS"])["POLARIS"] == {TaskState.UNHANDLED: 1}


def test_discard_deletes_only_unhandled_tasks(metastore: Metastore) -> None:
    unhandled, normal = seed_unhandled(metastore)
    other_realm, _ = seed_unhandled(metastore, "OTHER")
    dry = metastore.discard_unhandled(realms=["POLARIS"], dry_run=True)
    assert {(r.task_id, r.outcome) for r in dry} == {
        (t.id, DiscardOutcome.WOULD_DISCARD) for t in unhandled
    }
    assert metastore.count_tasks() == 2 * (len(unhandled) + 1)  # the dry run changed nothing

    done = metastore.discard_unhandled(realms=["POLARIS"])
    assert {r.outcome for r in done} == {DiscardOutcome.DISCARDED} and len(done) == len(unhandled)
    assert [t.id for t in metastore.list_tasks(["POLARIS"])] == [normal.id]
    assert len(metastore.list_tasks(["OTHER"])) == len(other_realm) + 1


def test_discard_refuses_a_task_that_is_not_unhandled(metastore: Metastore) -> None:
    unhandled, normal = seed_unhandled(metastore)
    results = metastore.discard_unhandled([normal.id, unhandled[0].id, 4242])
    by_id = {r.task_id: r for r in results}
    assert by_id[normal.id].outcome is DiscardOutcome.REFUSED
    assert "orphaned, not unhandled" in by_id[normal.id].detail
    assert by_id[unhandled[0].id].outcome is DiscardOutcome.DISCARDED
    assert by_id[4242].outcome is DiscardOutcome.REFUSED and "no task" in by_id[4242].detail
    assert metastore.get_task("POLARIS", normal.id) is not None


def test_discard_is_a_compare_and_set(metastore: Metastore) -> None:
    """A row changed between being judged and being deleted is refused, not deleted."""
    unhandled, _ = seed_unhandled(metastore)
    stale = metastore.get_task("POLARIS", unhandled[0].id)
    assert stale is not None
    with metastore.engine.begin() as conn:
        conn.execute(
            update(entities)
            .where(entities.c.realm_id == "POLARIS", entities.c.id == stale.id)
            .values(entity_version=entities.c.entity_version + 1)
        )
    result = metastore._discard_one(stale, metastore.now_ms(), dry_run=False)
    assert result.outcome is DiscardOutcome.REFUSED and "changed" in result.detail
    assert metastore.get_task("POLARIS", stale.id) is not None


def test_discard_names_the_realm_when_an_id_is_in_several(metastore: Metastore) -> None:
    task_a = polaris_cleanup_task("A", 3, entity_id=5)
    task_b = polaris_cleanup_task("B", 3, entity_id=5)  # same id, another realm
    metastore.insert_tasks([task_a, task_b])
    (result,) = metastore.discard_unhandled([task_a.id])
    assert result.outcome is DiscardOutcome.REFUSED and "--realm" in result.detail
    (result,) = metastore.discard_unhandled([task_a.id], ["B"])
    assert result.outcome is DiscardOutcome.DISCARDED and result.realm_id == "B"
    assert metastore.get_task("A", task_a.id) is not None


def test_requeue_refuses_an_unhandled_task(metastore: Metastore) -> None:
    unhandled, _ = seed_unhandled(metastore)
    with pytest.raises(MetastoreError, match=r"unhandled .*discard"):
        metastore.requeue("POLARIS", unhandled[0].id)


def test_tasks_show_names_an_unhandled_task_as_such(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # no width: one line per field
    task = polaris_cleanup_task("POLARIS", 6, entity_id=4242)
    metastore.insert_tasks([task])
    code, out = run("tasks", "show", str(task.id), "--metastore", url_of(metastore))
    assert code == 0, out
    fields = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in out.splitlines()}
    assert fields["payload"] == (
        "not handled: the cleanup of a dropped NAMESPACE 'namespace_4242', which Polaris "
        "writes and never runs (no files); `tasks discard` deletes it"
    )
    assert "cannot be decoded" not in out
