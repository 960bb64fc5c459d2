"""The hold: a dropped table's purge (and its children) is not leased within its
catalog's hold window, on PostgreSQL (the rule in SQL) and SQLite (the Python rule),
and both rules agree; the settings refuse a hold that is not a number of days >= 0.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from builders.restricted_role import admin_connection
from builders.tasks import DropSpec, drop_task
from polaris_pipeline.dagster.backlog.checks import evaluate_orphan_check
from polaris_pipeline.dagster.backlog.report import (
    OLDEST_HELD_KEY,
    backlog_lines,
    backlog_metadata,
    held_from_key,
    read_report,
)
from polaris_pipeline.execution.start import StartAction, decide_start
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.schema import events
from polaris_pipeline.report.nothing_available import no_orphans_reason
from polaris_pipeline.settings import MetastoreSection, PipelineSettings, SettingsError
from polaris_pipeline.tasks import payloads
from polaris_pipeline.tasks.hold import DROP_EVENT_SLACK_MS
from polaris_pipeline.tasks.model import (
    DROP_TABLE_EVENT,
    DROP_VIEW_EVENT,
    DropTimeSource,
    NewTask,
    Prop,
    TaskPolicy,
    TaskState,
    TaskType,
)
from tests.support.cli import run, url_of
from tests.support.metastore import pipeline_store
from tests.support.tasks import catalog_row, insert_row, purge_child

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
HELD_CATALOG, HELD_CATALOG_ID = "finance", 101
FREE_CATALOG, FREE_CATALOG_ID = "scratch", 102

pytestmark = pytest.mark.lease_policy(catalog_hold_ms={HELD_CATALOG: 7 * DAY_MS})


def _catalog(store: Metastore, catalog_id: int, name: str, realm: str = "POLARIS") -> None:
    insert_row(store, catalog_row(realm, catalog_id, name))


def _drop(
    catalog_id: int,
    *,
    created: int,
    name: str = "t",
    namespace: tuple[str, ...] = ("ns",),
    is_view: bool = False,
    extra: dict[str, str] | None = None,
) -> NewTask:
    """Polaris's cleanup task of table (or view) ``namespace.name`` dropped from catalog
    ``catalog_id``."""
    spec = DropSpec(
        namespace,
        name,
        f"file:///wh/ns/{name}/metadata/v1.json",
        f"file:///wh/ns/{name}",
        is_view=is_view,
    )
    task = drop_task(spec, create_timestamp=created)
    entity = json.loads(task.properties[Prop.DATA])
    entity["catalogId"] = catalog_id
    data = json.dumps(entity, separators=(",", ":"))
    return NewTask(
        task.realm_id,
        task.id,
        task.name,
        {**task.properties, Prop.DATA: data, **(extra or {})},
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
            HELD_CATALOG_ID, created=now - DAY_MS, name="dead", extra={Prop.ATTEMPT_COUNT: "99"}
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
    assert held["hold"]["drop_time_source"] == "task creation"
    assert held["hold"]["dropped_ms"] == tasks["held"].create_timestamp
    code, out = run("tasks", "show", str(tasks["held"].id), *url)
    assert code == 0 and "purges after" in out and "from the task creation" in out, out
    monkeypatch.setenv("COLUMNS", "300")
    code, out = run("tasks", "list", *url)
    assert "held" in out and "purges after" in out and "(task creation)" in out, out


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


def test_a_purge_free_after_its_hold_waited_from_the_holds_end_not_the_drop(
    metastore: Metastore,
) -> None:
    """Dropped 8 days ago, held 7: an orphan for a day, not for 8 (the stale-orphan check
    would page on every hold that ends)."""
    tasks = _seed(metastore)
    report = read_report(metastore, ["POLARIS"])
    waited = {o.task.id: o.waited_s for b in report.backlogs for o in b.orphans}
    day_s = DAY_MS / 1000
    assert day_s - 60 <= waited[tasks["expired"].id] <= day_s + 60, waited
    # No hold: from its creation (plus grace), as before.
    assert waited[tasks["free"].id] >= day_s - 60 - metastore.policy.effective_grace_ms / 1000
    check = evaluate_orphan_check(report, max_age_s=2 * day_s, sample_size=10)
    assert check.passed, check.metadata


def test_the_sensor_line_counts_held_tasks() -> None:
    counts = {TaskState.HELD: 3, TaskState.PENDING: 1}
    line = no_orphans_reason(counts, ["POLARIS"], wait_s=30)
    assert "3 held (purges on hold" in line, line
    assert "drop event" in line and "task creation" in line, line  # the rule, in words
    assert "held" not in no_orphans_reason({TaskState.PENDING: 1}, ["POLARIS"], wait_s=30)


def test_a_run_started_on_a_held_task_leases_nothing(metastore: Metastore) -> None:
    tasks = _seed(metastore)
    for key in ("held", "child"):
        decision = decide_start(metastore, "run-1", "POLARIS", tasks[key].id, operator=True)
        assert decision.action is StartAction.NOT_AVAILABLE and decision.lease is None
        assert "is held: purges after" in decision.message, decision.message
    row = metastore.get_task("POLARIS", tasks["held"].id)
    assert row is not None and row.executor_id is None


# ----------------------------------------------- the drop time: Polaris's drop event

HOLD_MS = 7 * DAY_MS


def _event(
    store: Metastore,
    at: int,
    identifier: str,
    *,
    kind: str = DROP_TABLE_EVENT,
    catalog: str = HELD_CATALOG,
    realm: str = "POLARIS",
) -> None:
    """One row of Polaris's events table, as its persistence listener writes a drop."""
    with admin_connection(store) as conn:
        conn.execute(
            events.insert().values(
                realm_id=realm,
                catalog_id=catalog,
                event_id=str(uuid.uuid4()),
                request_id=None,
                event_type=kind,
                timestamp_ms=at,
                principal_name="alice",
                resource_type="TABLE",
                resource_identifier=identifier,
                additional_properties={},
            )
        )


def _seed_events(store: Metastore) -> tuple[dict[str, NewTask], int]:
    """Drops made past their hold by their creation; for each, its drop event or a decoy.

    Returns the tasks and the matching events' time (two hours after the tasks).
    """
    now = store.now_ms()
    _catalog(store, HELD_CATALOG_ID, HELD_CATALOG)
    _catalog(store, FREE_CATALOG_ID, FREE_CATALOG)
    created = now - HOLD_MS - HOUR_MS
    dropped = created + 2 * HOUR_MS  # an hour from now, minus the hold: held an hour more
    names = (
        "event",
        "none",
        "other_table",
        "other_catalog",
        "other_realm",
        "view_event",
        "before_event",
    )
    tasks = {key: _drop(HELD_CATALOG_ID, created=created, name=key) for key in names}
    # Held by its creation for half an hour more; an earlier drop of its name does not count.
    recent = now - HOLD_MS + HOUR_MS // 2
    tasks["too_early"] = _drop(HELD_CATALOG_ID, created=recent, name="too_early")
    tasks["view"] = _drop(
        HELD_CATALOG_ID, created=created, name="v", namespace=("a", "b c"), is_view=True
    )
    tasks["child"] = purge_child(
        "POLARIS", tasks["event"].name, ("ns", "event"), ["file:///wh/x"], create_timestamp=now
    )
    store.insert_tasks(list(tasks.values()))
    _event(store, dropped, "ns.event")
    _event(store, dropped + HOUR_MS, "ns.event")  # a later one: the earliest counts
    _event(store, dropped, "a.b c.v", kind=DROP_VIEW_EVENT)
    _event(store, dropped, "ns.another")  # another table's drop
    _event(store, dropped, "ns.other_catalog", catalog=FREE_CATALOG)
    _event(store, dropped, "ns.other_realm", realm="OTHER")
    _event(store, dropped, "ns.view_event", kind=DROP_VIEW_EVENT)  # a view's, not a table's
    _event(store, dropped, "ns.before_event", kind="BEFORE_DROP_TABLE")
    _event(store, recent - HOUR_MS, "ns.too_early")  # an earlier drop
    _event(store, recent - DROP_EVENT_SLACK_MS - 1, "ns.too_early")  # just before the slack
    return tasks, dropped


def test_a_drop_event_later_than_the_task_holds_until_event_plus_hold(
    metastore: Metastore,
) -> None:
    tasks, dropped = _seed_events(metastore)
    held = {"event", "view", "child", "too_early"}
    _, rows = metastore.tasks_with_state()
    by_id = {t.id: (t, s) for t, s in rows}
    states = {key: by_id[t.id][1] for key, t in tasks.items()}
    assert states == {key: TaskState.HELD if key in held else TaskState.ORPHANED for key in tasks}
    too_early = by_id[tasks["too_early"].id][0]
    assert too_early.drop_time_source is DropTimeSource.TASK_CREATION
    assert too_early.held_until_ms == (tasks["too_early"].create_timestamp or 0) + HOLD_MS
    for key in held - {"too_early"}:
        row = by_id[tasks[key].id][0]
        assert row.held_until_ms == dropped + HOLD_MS, key
        assert (row.dropped_at_ms, row.drop_time_source) == (dropped, DropTimeSource.DROP_EVENT)
    # The rule in the database (PostgreSQL) agrees: counts, selection and the lease.
    counts = metastore.count_by_state(["POLARIS"])["POLARIS"]
    assert counts[TaskState.HELD] == len(held)
    free = {t.id for key, t in tasks.items() if key not in held}
    assert {t.id for t in metastore.select_available(20)} == free
    assert metastore.lease_task("POLARIS", tasks["event"].id, "op") is None
    assert {lease.task_id for lease in metastore.lease_available("x", 20)} == free


def test_without_a_drop_event_the_hold_counts_from_the_task(metastore: Metastore) -> None:
    now = metastore.now_ms()
    _catalog(metastore, HELD_CATALOG_ID, HELD_CATALOG)
    task = _drop(HELD_CATALOG_ID, created=now - DAY_MS, name="quiet")
    metastore.insert_tasks([task])
    row = metastore.get_task("POLARIS", task.id)
    assert row is not None
    _, judged, state = metastore.task_state(row)
    assert state is TaskState.HELD
    assert judged.held_until_ms == now - DAY_MS + HOLD_MS
    assert judged.drop_time_source is DropTimeSource.TASK_CREATION


@pytest.mark.parametrize("schema_version", [2])
def test_a_schema_without_events_holds_from_the_task(
    metastore_url: str, policy: TaskPolicy, schema_version: int
) -> None:
    store = pipeline_store(metastore_url, policy, schema_version=schema_version)
    try:
        assert store.drop_events_table() is False
        now = store.now_ms()
        _catalog(store, HELD_CATALOG_ID, HELD_CATALOG)
        held = _drop(HELD_CATALOG_ID, created=now - DAY_MS, name="held")
        past = _drop(HELD_CATALOG_ID, created=now - HOLD_MS - HOUR_MS, name="past")
        store.insert_tasks([held, past])
        _, rows = store.tasks_with_state()
        sources = {t.id: (s, t.drop_time_source) for t, s in rows}
        assert sources[held.id] == (TaskState.HELD, DropTimeSource.TASK_CREATION)
        assert sources[past.id] == (TaskState.ORPHANED, DropTimeSource.TASK_CREATION)
        assert store.count_by_state(["POLARIS"])["POLARIS"][TaskState.HELD] == 1
        assert [lease.task_id for lease in store.lease_available("x", 10)] == [past.id]
    finally:
        store.dispose()


def test_the_output_says_where_each_drop_time_comes_from(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks, dropped = _seed_events(metastore)
    quiet = _drop(HELD_CATALOG_ID, created=metastore.now_ms() - DAY_MS, name="quiet")
    metastore.insert_tasks([quiet])
    monkeypatch.setenv("POLARIS_PIPELINE_CATALOG_HOLD_DAYS", json.dumps({HELD_CATALOG: 7}))
    monkeypatch.setenv("POLARIS_PIPELINE_GRACE_MS", "0")
    url = ["--metastore", url_of(metastore)]
    code, out = run("tasks", "list", "--json", *url)
    assert code == 0, out
    docs = {int(d["id"]): d for d in json.loads(out)}
    assert docs[tasks["event"].id]["hold"]["drop_time_source"] == "drop event"
    assert docs[tasks["event"].id]["hold"]["dropped_ms"] == dropped
    assert docs[quiet.id]["hold"]["drop_time_source"] == "task creation"
    code, out = run("tasks", "show", str(tasks["event"].id), *url)
    assert code == 0 and "from the drop event" in out, out
    report = read_report(metastore, ["POLARIS"])
    meta = backlog_metadata(report.backlogs)
    assert meta[held_from_key(DropTimeSource.DROP_EVENT)].value == 3  # the table, view, child
    assert meta[held_from_key(DropTimeSource.TASK_CREATION)].value == 2  # too_early, quiet
    (line,) = backlog_lines(report)
    assert "3 from the drop event, 2 from the task creation" in line, line
    # The oldest held drop is too_early's, by its creation: the event-held tasks were made
    # earlier, but dropped (by their events) later.
    oldest = meta[OLDEST_HELD_KEY].value
    expected = (metastore.now_ms() - (tasks["too_early"].create_timestamp or 0)) / 1000
    assert isinstance(oldest, float) and expected - 60 <= oldest <= expected + 60
