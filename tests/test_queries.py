"""The named statements of ``metastore/queries.py``: each runs on each backend; the store has none.

Every statement runs against a real PostgreSQL and SQLite with a policy that
has realm overrides (so the per-realm CASE and its bind parameters are in the
statement), on one orphaned and one held task, and is rolled back.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Connection, CursorResult

from builders.restricted_role import restricted_role_wanted
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore, queries
from polaris_pipeline.metastore.queries import Query
from polaris_pipeline.metastore.schema import events
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.tasks.model import Prop, TaskPolicy, TaskRow
from tests.support.metastore import ALL_QUERIES

REALM = "r"
OLD_MS = 3_600_000


# Overrides for the tasks' realm and another: both CASE branches are bound.
pytestmark = pytest.mark.lease_policy(
    realm_overrides={
        REALM: RealmOverride(lease_timeout_ms=120_000),
        "other": RealmOverride(grace_ms=5),
    },
)


def _tasks(store: Metastore) -> tuple[TaskRow, TaskRow]:
    """(an orphaned task, a task "holder" holds now)."""
    now = store.now_ms()
    orphan = batch_task(REALM, create_timestamp=now - OLD_MS)
    held = batch_task(
        REALM,
        create_timestamp=now - OLD_MS,
        extra={Prop.EXECUTOR: "holder", Prop.START_TIME: str(now), Prop.ATTEMPT_COUNT: "1"},
    )
    store.insert_tasks([orphan, held])
    rows = (store.get_task(REALM, orphan.id), store.get_task(REALM, held.id))
    assert rows[0] is not None and rows[1] is not None
    return rows[0], rows[1]


Check = Callable[[Connection, CursorResult[Any]], None]


def _cases(
    store: Metastore, orphan: TaskRow, held: TaskRow
) -> dict[str, tuple[tuple[Any, ...], Any, Check]]:
    """Per statement: its builder's arguments, its bind parameters, what it must find or do."""
    policy = store.policy
    rule = queries.policy_params(policy)
    now = store.now_ms()
    new = batch_task(REALM)
    new_row = {
        "realm_id": REALM,
        "catalog_id": 0,
        "id": new.id,
        "parent_id": 0,
        "name": new.name,
        "entity_version": 1,
        "type_code": 8,
        "sub_type_code": 0,
        "create_timestamp": now,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": now,
        "properties": new.properties,
        "internal_properties": new.internal_properties,
        "grant_records_version": 1,
    }

    def rows(n: int) -> Check:
        def check(conn: Connection, result: CursorResult[Any]) -> None:
            assert len(result.all()) == n

        return check

    def changed(n: int) -> Check:
        def check(conn: Connection, result: CursorResult[Any]) -> None:
            assert result.rowcount == n

        return check

    def ids(*expected: int) -> Check:
        def check(conn: Connection, result: CursorResult[Any]) -> None:
            assert sorted(int(r.id) for r in result) == sorted(expected)

        return check

    def scalar(expected: Callable[[Any], bool]) -> Check:
        def check(conn: Connection, result: CursorResult[Any]) -> None:
            assert expected(result.scalar_one())

        return check

    def inserted(conn: Connection, result: CursorResult[Any]) -> None:
        count = conn.execute(queries.COUNT_TASKS.build(store.dialect, [REALM])).scalar_one()
        assert count == 3

    def jit_off(conn: Connection, result: CursorResult[Any]) -> None:
        assert conn.execute(text("SHOW jit")).scalar_one() == "off"

    def event_written(conn: Connection, result: CursorResult[Any]) -> None:
        if store.dialect == "postgresql" and restricted_role_wanted():
            return  # the pipeline's role inserts events (no error) but may not read them
        row = conn.execute(select(events)).one()
        assert (row.realm_id, row.event_id, row.resource_type) == (REALM, "event-1", "REALM")
        assert (row.resource_identifier, row.catalog_id) == ("BEFORE_ATTEMPT_TASK", None)
        assert abs(int(row.timestamp_ms) - now) < 60_000

    def lease_batch(conn: Connection, result: CursorResult[Any]) -> None:
        assert [(r.leased, int(r.id), int(r.attempt)) for r in result] == [(True, orphan.id, 1)]

    def by_state(conn: Connection, result: CursorResult[Any]) -> None:
        assert sorted((r.realm_id, r.state, int(r.n)) for r in result) == [
            (REALM, "leased", 1),
            (REALM, "orphaned", 1),
        ]

    return {
        "NOW": ((), None, scalar(lambda v: abs(int(v) - now) < 60_000)),
        "REALMS": ((), None, lambda c, r: _equal([row.realm_id for row in r], [REALM])),
        "ENTITY_REALMS": ((), None, lambda c, r: _equal([row.realm_id for row in r], [REALM])),
        "LIST_TASKS": (([REALM], 5), None, ids(orphan.id, held.id)),
        "GET_TASK": ((REALM, held.id), None, ids(held.id)),
        "TASK_PROPERTIES": ((REALM, orphan.id), None, rows(1)),
        # A task's id is no catalog's: the statement reads catalog rows only.
        "CATALOG_INTERNAL_PROPERTIES": ((REALM, orphan.id), None, rows(0)),
        "TASK_NAMES": (
            (REALM, [orphan.name, "no such task"]),
            None,
            lambda c, r: _equal({row.name for row in r}, {orphan.name}),
        ),
        # The tasks' realm has no catalog row: the hold rule finds no name.
        "CATALOG_NAMES": (([REALM],), None, rows(0)),
        # The realm has no drop event of that name.
        "DROP_EVENTS": ((REALM, ["ns.t"]), None, rows(0)),
        "TASKS_NAMED": ((REALM, [held.name, "no such task"]), None, ids(held.id)),
        # The rows named "<name>_..." (both tasks are children of entityCleanup_1).
        "TASK_FAMILY": ((REALM, "entityCleanup_1"), None, ids(orphan.id, held.id)),
        "COUNT_TASKS": (([REALM],), None, scalar(lambda v: v == 2)),
        "NO_JIT": ((), None, jit_off),
        "COUNT_BY_STATE": ((policy, True, True), {**rule, "now": now, "realms": [REALM]}, by_state),
        "TASKS_BY_AGE": ((None,), None, ids(orphan.id, held.id)),
        "SELECT_AVAILABLE": (
            (policy, True),
            {**rule, "limit": 10, "realms": [REALM]},
            ids(orphan.id),
        ),
        "LEASE_BATCH": (
            (policy, True),
            {**rule, "executor": "me", "limit": 10, "realms": [REALM]},
            lease_batch,
        ),
        "CAS_WRITE": ((orphan, {Prop.EXECUTOR: "me"}, now), None, changed(1)),
        "RENEW_HELD_BY": (
            (),
            {"realm": REALM, "executor": "holder", "timeout": 120_000},
            changed(1),
        ),
        "COMPLETE": ((held,), None, changed(1)),
        "LIST_FOR_DISCARD": (([REALM], [orphan.id, 4242]), None, ids(orphan.id)),
        "DISCARD": ((orphan,), None, changed(1)),
        "INSERT_TASKS": ((), [new_row], inserted),
        "BATCH_EVIDENCE": (
            (),
            {"realm": REALM, "limit": 5, "typed": queries.TYPED_BATCH_PATTERN},
            ids(orphan.id, held.id),
        ),
        "INSERT_EVENT": (
            (REALM, None, "event-1", "BEFORE_ATTEMPT_TASK", {"task_attempt": "1"}),
            None,
            event_written,
        ),
    }


def _equal(got: Any, expected: Any) -> None:
    assert got == expected


def test_every_statement_runs_on_each_backend(metastore: Metastore) -> None:
    orphan, held = _tasks(metastore)
    cases = _cases(metastore, orphan, held)
    assert set(cases) == {query.name for query in ALL_QUERIES}
    ran = []
    for query in ALL_QUERIES:
        if not query.runs_on(metastore.dialect):
            continue
        args, params, check = cases[query.name]
        with metastore.engine.connect() as conn, conn.begin() as tx:
            check(conn, conn.execute(query.build(metastore.dialect, *args), params))
            tx.rollback()
        ran.append(query.name)
    expected_missing = {"NO_JIT", "COUNT_BY_STATE", "SELECT_AVAILABLE", "LEASE_BATCH"}
    missing = {q.name for q in ALL_QUERIES} - set(ran)
    assert missing == (expected_missing if metastore.dialect == "sqlite" else set())


def test_the_registry_lists_every_statement_under_its_own_name() -> None:
    defined = {name: value for name, value in vars(queries).items() if isinstance(value, Query)}
    assert {id(q) for q in defined.values()} == {id(q) for q in ALL_QUERIES}
    assert all(query.name == name for name, query in defined.items())


def test_a_statement_without_a_variant_refuses_to_build() -> None:
    with pytest.raises(ValueError, match="LEASE_BATCH has no sqlite variant"):
        queries.LEASE_BATCH.build("sqlite", TaskPolicy(), False)
    with pytest.raises(ValueError, match="unsupported metastore dialect 'mysql'"):
        queries.NOW.build("mysql")


# What store.py may take from SQLAlchemy: connections, errors, the statement type.
_STORE_MAY_IMPORT = {
    "Engine",
    "Executable",
    "Connection",
    "DBAPIError",
    "IntegrityError",
    "OperationalError",
    "SQLAlchemyError",
}


def test_the_store_builds_no_statement_of_its_own() -> None:
    source = Path(queries.__file__).with_name("store.py").read_text()
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith("sqlalchemy") for alias in node.names)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            imported |= {alias.name for alias in node.names}
    assert imported <= _STORE_MAY_IMPORT, imported - _STORE_MAY_IMPORT
