"""The lease takes exactly the rows the Python state rule calls orphaned, and the SQL
shortcuts on its way (the plainly-held pre-filter, the number test) agree with that rule.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event, text

from polaris_pipeline.metastore import Metastore, new_entity_id, predicates
from polaris_pipeline.metastore.schema import POLARIS_SCHEMA
from polaris_pipeline.tasks.model import CREATOR, LeasePolicy, Prop, TaskRow, TaskState
from tests.support.tasks import seed

TIMEOUT = 60_000
GRACE = 500_000


def _insert(
    store: Metastore, realm: str, raw_properties: str, *, created: int, updated: int
) -> int:
    """One task row with ``properties`` exactly as given (JSON text, or anything on SQLite)."""
    task_id = new_entity_id()
    table = f"{POLARIS_SCHEMA}.entities" if store.dialect == "postgresql" else "entities"
    props = "CAST(:props AS JSONB)" if store.dialect == "postgresql" else ":props"
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {table} (realm_id, catalog_id, id, parent_id, name, entity_version,"
                " type_code, sub_type_code, create_timestamp, drop_timestamp, purge_timestamp,"
                " to_purge_timestamp, last_update_timestamp, properties, internal_properties,"
                " grant_records_version)"
                f" VALUES (:realm, 0, :id, 0, :name, 1, 8, 0, :created, 0, 0, 0, :updated, {props},"
                " '{}', 1)"
            ),
            {
                "realm": realm,
                "id": task_id,
                "name": f"zoo_{task_id}",
                "created": created,
                "updated": updated,
                "props": raw_properties,
            },
        )
    return task_id


def _zoo(store: Metastore, realm: str) -> None:
    """Rows in every state, with the edge cases of the SQL shortcuts.

    Times are at least 5 s away from every boundary, so the milliseconds between
    judging the rows in Python and leasing them cannot change a state.
    """
    now = store.now_ms()
    old, fresh = now - 10_000_000, now - 1_000
    x = Prop.EXECUTOR
    cases: list[tuple[dict[str, Any], int | None]] = [
        ({}, None),
        ({x: "ours", Prop.START_TIME: str(now)}, now),  # as our leases write it
        ({x: "polaris", Prop.START_TIME: str(now - 5_000)}, now - 4_999),  # start != update
        ({x: "ours", Prop.START_TIME: str(now - TIMEOUT - 5_000)}, now - TIMEOUT - 5_000),
        ({x: "ours", Prop.START_TIME: str(now)}, now - TIMEOUT - 5_000),
        ({x: "ours", Prop.START_TIME: "garbage"}, now),
        ({x: "ours", Prop.START_TIME: f"00{now}"}, now),  # a number, not as int8out writes it
        ({x: "ours", Prop.START_TIME: f" {now}"}, now),
        ({x: "ours", Prop.START_TIME: f"{now}\n"}, now),
        ({x: "ours", Prop.START_TIME: "1" + "0" * 18}, 10**18),  # 19 digits: not a number
        ({x: "ours", Prop.START_TIME: "-5"}, -5),
        ({x: "", Prop.START_TIME: str(now)}, now),
        ({x: "ours", Prop.START_TIME: str(now), Prop.END_TIME: str(now + 1)}, now),
        ({x: "ours", Prop.START_TIME: str(now), Prop.END_TIME: str(now - 9_000)}, now),
        ({x: "ours", Prop.START_TIME: str(now), Prop.END_TIME: None}, now),
        ({x: 7, Prop.START_TIME: now}, now),  # numbers, not strings
        ({x: None, Prop.START_TIME: str(now)}, now),
        ({Prop.STATUS: "dead"}, None),
        ({x: "ours", Prop.START_TIME: str(now), Prop.STATUS: "dead"}, now),
        ({Prop.ATTEMPT_COUNT: "99"}, None),
        ({Prop.ATTEMPT_COUNT: "-4"}, None),
        ({Prop.ATTEMPT_COUNT: "9" * 19}, None),
        ({Prop.NEXT_ATTEMPT: str(now + 100_000)}, None),
        ({Prop.NEXT_ATTEMPT: str(now - 100_000)}, None),
        ({Prop.CREATED_BY: CREATOR}, None),
        (  # a failed attempt, released early: leased again, the end time dropped
            {
                x: "ours",
                Prop.START_TIME: str(now - 9_000),
                Prop.END_TIME: str(now - 8_000),
                Prop.ATTEMPT_COUNT: "3",
                Prop.STATUS: "failed",
            },
            now - 8_000,
        ),
    ]
    for props, updated in cases:
        body = {Prop.TASK_TYPE: "3", Prop.DATA: "{}", **props}
        for created in (old, fresh):
            _insert(store, realm, json.dumps(body), created=created, updated=updated or created)
    # Properties that are not a JSON object: PostgreSQL holds any JSON value,
    # SQLite any text at all.
    odd = ["[1, 2, 3]", '"lastAttemptEndTime"', "5", "null", '["lastAttemptExecutorId"]']
    if store.dialect != "postgresql":
        odd.append("{not json")
    for raw in odd:
        for created in (old, fresh):
            _insert(store, realm, raw, created=created, updated=created)


@pytest.fixture
def strict(metastore: Metastore) -> Metastore:
    """The test metastore with a grace period, so that 'pending' is reachable."""
    return Metastore(
        engine=metastore.engine, policy=LeasePolicy(lease_timeout_ms=TIMEOUT, grace_ms=GRACE)
    )


def _states(store: Metastore, realm: str) -> dict[int, TaskState]:
    _, rows = store.tasks_with_state([realm])
    return {task.id: state for task, state in rows}


def test_lease_takes_exactly_the_orphans_of_the_python_rule(strict: Metastore) -> None:
    _zoo(strict, "zoo")
    before = _states(strict, "zoo")
    assert set(before.values()) == set(TaskState)  # the zoo reaches every state
    attempts = {t.id: t.attempt_count for t in strict.list_tasks(["zoo"])}
    leases = strict.lease_available("sweeper", 1_000)
    leased = [lease.task_id for lease in leases]
    assert len(leased) == len(set(leased))
    assert set(leased) == {i for i, s in before.items() if s is TaskState.ORPHANED}
    assert 4 in {lease.attempt for lease in leases}  # not only first leases
    after = _states(strict, "zoo")
    assert all(after[i] is TaskState.LEASED for i in leased)
    assert all(after[i] is s for i, s in before.items() if i not in leased)
    rows = {t.id: t for t in strict.list_tasks(["zoo"])}
    for lease in leases:
        row = rows[lease.task_id]
        assert lease.attempt == attempts[lease.task_id] + 1 == row.attempt_count
        assert row.executor_id == "sweeper" and row.start_time_ms == lease.start_time_ms
        assert Prop.END_TIME not in row.properties
    assert strict.lease_available("sweeper", 1_000) == []


def test_lease_limit_counts_rows_that_are_not_json_objects(strict: Metastore) -> None:
    _zoo(strict, "zoo")
    orphans = {i for i, s in _states(strict, "zoo").items() if s is TaskState.ORPHANED}
    got: list[int] = []
    while batch := strict.lease_available("sweeper", 3):
        assert len(batch) <= 3
        got += [lease.task_id for lease in batch]
    assert sorted(got) == sorted(orphans)


# PostgreSQL SQL only: these run on PostgreSQL alone rather than skip on SQLite.
pg_only = pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)


@pg_only
def test_plainly_held_only_rejects_rows_the_rule_calls_held(strict: Metastore) -> None:
    _zoo(strict, "zoo")
    states = _states(strict, "zoo")
    held = predicates.plainly_held("c.now_ms", ":timeout")
    with strict.engine.begin() as conn:
        rows = conn.execute(
            text(
                f"WITH c AS (SELECT {strict._now_sql} AS now_ms) "
                f"SELECT e.id, {held} AS held FROM {POLARIS_SCHEMA}.entities e, c"
            ),
            {"timeout": TIMEOUT},
        ).all()
    rejected = {row.id for row in rows if row.held}
    assert all(states[i] in (TaskState.LEASED, TaskState.DEAD) for i in rejected)
    # It does fire: on the leases written as ours are, and on others' (start != update).
    by_executor: dict[int, str | None] = {t.id: t.executor_id for t in strict.list_tasks()}
    assert {by_executor[i] for i in rejected} >= {"ours", "polaris", "7"}


@pg_only
@pytest.mark.parametrize(
    "value",
    [
        "0",
        "-0",
        "007",
        "1732000000000",
        "9" * 18,
        "-" + "9" * 18,
        "1" + "0" * 18,
        "-" + "1" * 19,
        "",
        "-",
        "--1",
        "1-",
        "+1",
        " 1",
        "1 ",
        "1\n",
        "1.0",
        "1e3",
        "\u0661\u0662",  # Arabic-Indic digits: not [0-9]
        "abc",
    ],
)
def test_sql_number_test_matches_python(metastore: Metastore, value: str) -> None:
    with metastore.engine.begin() as conn:
        got = conn.execute(
            text(f"SELECT {predicates.START} FROM (SELECT CAST(:props AS JSONB) AS properties) e"),
            {"props": json.dumps({Prop.START_TIME: value})},
        ).scalar_one()
    row = TaskRow("r", 1, "n", 1, 1, 0, 0, properties={Prop.START_TIME: value})
    assert got == row.start_time_ms


@pg_only
def test_short_batch_runs_no_listing_of_every_task(metastore: Metastore) -> None:
    """On PostgreSQL, a lease call that comes back short is one transaction and two
    statements (realm discovery, the lease): no second scan for malformed rows."""
    seed(metastore, "r1", 3)
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(args[2])

    event.listen(metastore.engine, "before_cursor_execute", record)
    try:
        assert len(metastore.lease_available("e", 10)) == 3
        assert metastore.lease_available("e", 10) == []
    finally:
        event.remove(metastore.engine, "before_cursor_execute", record)
    assert len(statements) == 4
    assert not any("<> 'object'" in s for s in statements)
