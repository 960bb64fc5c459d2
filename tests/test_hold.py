"""The hold: a dropped table's purge (and its children) is not leased within its
catalog's hold window, on PostgreSQL (the rule in SQL) and SQLite (the Python rule),
and both rules agree; the settings refuse a hold that is not a number of days >= 0.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from builders.tasks import DropSpec, drop_task
from polaris_pipeline.dagster.backlog.checks import evaluate_orphan_check
from polaris_pipeline.dagster.backlog.report import (
    OLDEST_HELD_KEY,
    backlog_lines,
    backlog_metadata,
    read_report,
)
from polaris_pipeline.execution.start import StartAction, decide_start
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.report.nothing_available import no_orphans_reason
from polaris_pipeline.settings import MetastoreSection, PipelineSettings, SettingsError
from polaris_pipeline.tasks import payloads
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskState, TaskType
from tests.support.cli import run, url_of
from tests.support.tasks import catalog_row, insert_row, purge_child

DAY_MS = 86_400_000
HELD_CATALOG, HELD_CATALOG_ID = "finance", 101
FREE_CATALOG, FREE_CATALOG_ID = "scratch", 102

pytestmark = pytest.mark.lease_policy(catalog_hold_ms={HELD_CATALOG: 7 * DAY_MS})


def _catalog(store: Metastore, catalog_id: int, name: str, realm: str = "POLARIS") -> None:
    insert_row(store, catalog_row(realm, catalog_id, name))


def _drop(catalog_id: int, *, created: int, name: str = "t", **extra: str) -> NewTask:
    """Polaris's cleanup task of table ``ns.name`` dropped from catalog ``catalog_id``."""
    spec = DropSpec(
        ("ns",), name, f"file:///wh/ns/{name}/metadata/v1.json", f"file:///wh/ns/{name}"
    )
    task = drop_task(spec, create_timestamp=created)
    entity = json.loads(task.properties[Prop.DATA])
    entity["catalogId"] = catalog_id
    data = json.dumps(entity, separators=(",", ":"))
    return NewTask(
        task.realm_id,
        task.id,
        task.name,
        {**task.properties, Prop.DATA: data, **extra},
        task.internal_properties,
        created,
    )


def _states(store: Metastore) -> dict[int, TaskState]:
    _, rows = store.tasks_with_state()
    return {t.id: s for t, s in rows}


def _seed(store: Metastore) -> dict[str, NewTask]:
    """A held drop and its Polaris child; a drop past its hold; one of a catalog without
    a hold; a dead held drop; a child whose parent row is gone."""
    now = store.now_ms()
    _catalog(store, HELD_CATALOG_ID, HELD_CATALOG)
    _catalog(store, FREE_CATALOG_ID, FREE_CATALOG)
    held = _drop(HELD_CATALOG_ID, created=now - DAY_MS, name="held")
    tasks = {
        "held": held,
        "child": purge_child(
            "POLARIS", held.name, ("ns", "held"), ["file:///wh/ns/held/x"], create_timestamp=now
        ),
        "expired": _drop(HELD_CATALOG_ID, created=now - 8 * DAY_MS, name="old"),
        "free": _drop(FREE_CATALOG_ID, created=now - DAY_MS, name="free"),
        "dead": _drop(
            HELD_CATALOG_ID, created=now - DAY_MS, name="dead", **{Prop.ATTEMPT_COUNT: "99"}
        ),
        "stray": purge_child(
            "POLARIS",
            payloads.entity_cleanup_task_name(new_entity_id()),
            ("ns", "gone"),
            ["file:///wh/ns/gone/x"],
            create_timestamp=now,
        ),
    }
    store.insert_tasks(list(tasks.values()))
    return tasks


EXPECTED = {
    "held": TaskState.HELD,
    "child": TaskState.HELD,
    "expired": TaskState.ORPHANED,
    "free": TaskState.ORPHANED,
    "dead": TaskState.DEAD,
    "stray": TaskState.ORPHANED,
}


def test_a_held_drop_and_its_children_are_held_and_never_leased(metastore: Metastore) -> None:
    tasks = _seed(metastore)
    states = _states(metastore)
    assert {k: states[t.id] for k, t in tasks.items()} == EXPECTED
    # The state rule in the database (PostgreSQL) counts the same.
    counts = metastore.count_by_state(["POLARIS"])["POLARIS"]
    assert counts[TaskState.HELD] == 2 and counts[TaskState.ORPHANED] == 3
    selected = {t.id for t in metastore.select_available(10)}
    assert selected == {tasks[k].id for k in ("expired", "free", "stray")}
    # Leasing one by name is judged in the lease's own transaction: refused.
    assert metastore.lease_task("POLARIS", tasks["held"].id, "op") is None
    assert metastore.lease_task("POLARIS", tasks["child"].id, "op") is None
    leased = {lease.task_id for lease in metastore.lease_available("x", 10)}
    assert leased == {tasks[k].id for k in ("expired", "free", "stray")}


@pytest.mark.lease_policy(hold_ms=2 * DAY_MS, catalog_hold_ms={FREE_CATALOG: 0})
def test_the_realm_default_holds_every_catalog_but_one_set_to_zero(metastore: Metastore) -> None:
    now = metastore.now_ms()
    _catalog(metastore, HELD_CATALOG_ID, HELD_CATALOG)
    _catalog(metastore, FREE_CATALOG_ID, FREE_CATALOG)
    unknown = _drop(999, created=now - DAY_MS, name="nocat")  # no such catalog row
    held = _drop(HELD_CATALOG_ID, created=now - DAY_MS, name="a")
    free = _drop(FREE_CATALOG_ID, created=now - DAY_MS, name="b")
    metastore.insert_tasks([unknown, held, free])
    assert [lease.task_id for lease in metastore.lease_available("x", 10)] == [free.id]
    states = _states(metastore)
    assert states[unknown.id] is states[held.id] is TaskState.HELD


def test_the_hold_ends_at_drop_time_plus_hold(metastore: Metastore) -> None:
    tasks = _seed(metastore)
    _, rows = metastore.tasks_with_state()
    by_id = {t.id: t for t, _ in rows}
    dropped = tasks["held"].create_timestamp
    assert dropped is not None
    assert by_id[tasks["held"].id].held_until_ms == dropped + 7 * DAY_MS
    # The child is held until its parent's hold ends, not its own creation's.
    assert by_id[tasks["child"].id].held_until_ms == by_id[tasks["held"].id].held_until_ms


def test_cli_lists_and_shows_held_with_purges_after(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = _seed(metastore)
    monkeypatch.setenv("POLARIS_PIPELINE_CATALOG_HOLD_DAYS", json.dumps({HELD_CATALOG: 7}))
    monkeypatch.setenv("POLARIS_PIPELINE_GRACE_MS", "0")
    url = ["--metastore", url_of(metastore)]
    code, out = run("tasks", "list", "--json", *url)
    assert code == 0, out
    docs = {int(d["id"]): d for d in json.loads(out)}
    held = docs[tasks["held"].id]
    assert held["state"] == "held"
    assert held["hold"]["text"].startswith("purges after ")
    assert held["hold"]["purges_after_ms"] == (tasks["held"].create_timestamp or 0) + 7 * DAY_MS
    assert "creation" in held["hold"]["drop_time_source"]
    code, out = run("tasks", "show", str(tasks["held"].id), *url)
    assert code == 0 and "purges after" in out and "drop time:" in out, out
    monkeypatch.setenv("COLUMNS", "300")
    code, out = run("tasks", "list", *url)
    assert "held" in out and "purges after" in out, out


@pytest.mark.parametrize("bad", [-1, "seven", True, float("nan"), float("inf")])
def test_a_hold_that_is_not_a_number_of_days_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="a hold must"):
        MetastoreSection(hold_days=bad)
    with pytest.raises(ValueError, match="a hold must"):
        MetastoreSection(catalog_hold_days={"finance": bad})
    with pytest.raises(ValueError, match="realm 'R': hold_days: a hold must"):
        MetastoreSection.model_validate({"realm_overrides": {"R": {"hold_days": bad}}})


def test_a_bad_hold_variable_is_named() -> None:
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_HOLD_DAYS='x'"):
        PipelineSettings.from_env({"POLARIS_PIPELINE_HOLD_DAYS": "x"})


def test_the_catalog_beats_the_realm_which_beats_the_default() -> None:
    section = MetastoreSection.model_validate(
        {
            "hold_days": 1,
            "realm_overrides": {"R": {"hold_days": 2.5}},
            "catalog_hold_days": {"c": 0},
        }
    )
    policy = TaskPolicy.from_section(section)
    assert policy.hold_ms_for("R", None) == 2.5 * DAY_MS
    assert policy.hold_ms_for("OTHER", "d") == DAY_MS
    assert policy.hold_ms_for("R", "c") == 0
    assert TaskPolicy.from_section(MetastoreSection()).holds_any is False


def test_types_as_polaris_writes_them() -> None:
    # The child of the fixture is one Polaris could write: its type and name shape.
    child = purge_child("R", "entityCleanup_5", ("ns", "t"), ["f"], create_timestamp=0)
    assert child.properties[Prop.TASK_TYPE] == TaskType.BATCH_FILE_CLEANUP.code


def test_the_backlog_shows_held_tasks_and_never_calls_them_stale_orphans(
    metastore: Metastore,
) -> None:
    tasks = _seed(metastore)
    report = read_report(metastore, ["POLARIS"])
    meta = backlog_metadata(report.backlogs)
    assert meta["held"].value == 2
    # The oldest held drop was a day ago.
    oldest = meta[OLDEST_HELD_KEY].value
    assert isinstance(oldest, float) and DAY_MS / 1000 - 60 <= oldest <= DAY_MS / 1000 + 60
    (line,) = backlog_lines(report)
    assert "2 held" in line and "purges after" in line, line
    # Held a day, far past the orphan threshold: not an orphan, not in the sample.
    check = evaluate_orphan_check(report, max_age_s=60, sample_size=10)
    sample = json.dumps(check.metadata["sample"].value) if "sample" in check.metadata else ""
    assert str(tasks["held"].id) not in sample and str(tasks["child"].id) not in sample


def test_the_sensor_line_counts_held_tasks() -> None:
    counts = {TaskState.HELD: 3, TaskState.PENDING: 1}
    line = no_orphans_reason(counts, ["POLARIS"], wait_s=30)
    assert "3 held (purges on hold" in line, line
    assert "held" not in no_orphans_reason({TaskState.PENDING: 1}, ["POLARIS"], wait_s=30)


def test_a_run_started_on_a_held_task_leases_nothing(metastore: Metastore) -> None:
    tasks = _seed(metastore)
    for key in ("held", "child"):
        decision = decide_start(metastore, "run-1", "POLARIS", tasks[key].id, operator=True)
        assert decision.action is StartAction.NOT_AVAILABLE and decision.lease is None
        assert "is held: purges after" in decision.message, decision.message
    row = metastore.get_task("POLARIS", tasks["held"].id)
    assert row is not None and row.executor_id is None
