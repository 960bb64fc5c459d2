"""Every UPDATE and DELETE the pipeline issues names the TASK type in its WHERE clause.

The pipeline may change task rows only (docs/security.md, "Least privilege"): a
statement guarded on realm, id and version alone would change a catalog, table or
principal that a forged or stale ``TaskRow`` pointed at. Two checks: the text of
every write statement of ``metastore/queries.py`` names ``type_code = TASK``, and
each, run on PostgreSQL and SQLite against a non-TASK row with the same realm, id,
version and lease-shaped properties, changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import Delete, TextClause, Update, select
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, BindParameter

from builders.restricted_role import admin_connection
from polaris_pipeline.metastore import Metastore, queries
from polaris_pipeline.metastore.queries import POSTGRESQL, SQLITE, Query
from polaris_pipeline.metastore.rows import decode_row
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.tasks.model import (
    TABLE_LIKE_TYPE_CODE,
    TASK_TYPE_CODE,
    Prop,
    TaskPolicy,
    TaskRow,
)
from tests.support.metastore import ALL_QUERIES

REALM = "r"
ENTITY_ID = 4711
HOLDER = "holder"

_SAMPLE_ROW = TaskRow(
    realm_id=REALM,
    id=ENTITY_ID,
    name="t",
    entity_version=3,
    grant_records_version=2,
    create_timestamp=0,
    last_update_timestamp=0,
    properties={},
    internal_properties={},
)

# The builder arguments of each statement that writes ``entities``.
_WRITE_ARGS: dict[str, tuple[Any, ...]] = {
    "LEASE_BATCH": (TaskPolicy(), True),
    "CAS_WRITE": (_SAMPLE_ROW, {Prop.EXECUTOR: "me"}, 1),
    "RENEW_HELD_BY": (),
    "COMPLETE": (_SAMPLE_ROW,),
    "DISCARD": (_SAMPLE_ROW,),
}

_TEXT_WRITE = re.compile(r"\b(?:UPDATE|DELETE\s+FROM)\s+(?:\w+\.)?entities\b(?:\s+(?!SET\b)(\w+))?")


def _names_task_type_core(statement: Update | Delete) -> bool:
    """``statement``'s WHERE has ``type_code = TASK_TYPE_CODE`` (a bound value)."""
    where = statement.whereclause
    if where is None:
        return False
    for node in visitors.iterate(where):
        if (
            isinstance(node, BinaryExpression)
            and node.operator is operators.eq
            and node.left is entities.c.type_code
            and isinstance(node.right, BindParameter)
            and node.right.value == TASK_TYPE_CODE
        ):
            return True
    return False


def _text_writes_name_task_type(sql: str) -> list[bool]:
    """Per UPDATE or DELETE of ``entities`` in ``sql``: its own WHERE (the first line
    starting with WHERE after it, up to RETURNING) names ``type_code = TASK``."""
    found = []
    for match in _TEXT_WRITE.finditer(sql):
        alias = match.group(1)
        rest = sql[match.end() :].splitlines()
        starts = [i for i, line in enumerate(rest) if line.strip().startswith("WHERE")]
        if not starts:
            found.append(False)
            continue
        where: list[str] = []
        for line in rest[starts[0] :]:
            if line.strip().startswith("RETURNING"):
                break
            where.append(line)
        column = rf"{alias}\.type_code" if alias else r"(?<![\w.])type_code"
        found.append(re.search(rf"{column} = {TASK_TYPE_CODE}\b", "\n".join(where)) is not None)
    return found


def _writes(query: Query[...], dialect: str) -> list[bool] | None:
    """None when ``query`` (on ``dialect``) writes no existing row; else, per UPDATE or
    DELETE it holds, whether its WHERE names the TASK type."""
    if not query.runs_on(dialect) or query.name not in _WRITE_ARGS:
        return None
    statement = query.build(dialect, *_WRITE_ARGS[query.name])
    if isinstance(statement, Update | Delete):
        return [_names_task_type_core(statement)]
    assert isinstance(statement, TextClause), query.name
    return _text_writes_name_task_type(statement.text)


def test_every_update_and_delete_names_the_task_type() -> None:
    for dialect in (POSTGRESQL, SQLITE):
        for query in ALL_QUERIES:
            if query.name in _WRITE_ARGS or not query.runs_on(dialect):
                continue
            # Every other statement only reads or inserts: nothing to guard.
            statement = query.build(dialect, *_read_args(query))
            if isinstance(statement, TextClause):
                assert not _TEXT_WRITE.search(statement.text), query.name
            else:
                assert not isinstance(statement, Update | Delete), query.name
        for name in _WRITE_ARGS:
            query = getattr(queries, name)
            found = _writes(query, dialect)
            if found is None:
                continue
            assert found and all(found), f"{name} on {dialect}: {found}"


def _read_args(query: Query[...]) -> tuple[Any, ...]:
    """Arguments enough to build each statement that does not write a row."""
    args: dict[str, tuple[Any, ...]] = {
        "LIST_TASKS": (None, None),
        "GET_TASK": (REALM, ENTITY_ID),
        "TASK_PROPERTIES": (REALM, ENTITY_ID),
        "CATALOG_INTERNAL_PROPERTIES": (REALM, ENTITY_ID),
        "TASK_NAMES": (REALM, ["n"]),
        "TASKS_NAMED": (REALM, ["n"]),
        "TASK_FAMILY": (REALM, "entityCleanup_1"),
        "CATALOG_NAMES": ([REALM],),
        "COUNT_TASKS": (None,),
        "COUNT_BY_STATE": (TaskPolicy(), True, False),
        "TASKS_BY_AGE": (None,),
        "SELECT_AVAILABLE": (TaskPolicy(), True),
        "DROP_EVENTS": (REALM, ["ns.t"]),
        "LIST_FOR_DISCARD": (None, None),
        "INSERT_EVENT": (REALM, None, "e", "BEFORE_ATTEMPT_TASK", {}),
    }
    return args.get(query.name, ())


def test_the_text_check_finds_a_write_that_does_not_name_the_type() -> None:
    """The checker itself: a WHERE without the type, or only in another clause, fails."""
    assert _text_writes_name_task_type(
        "UPDATE polaris_schema.entities e\nSET x = 1\nWHERE e.id = 1"
    ) == [False]
    assert _text_writes_name_task_type(
        f"SELECT 1 FROM entities e WHERE e.type_code = {TASK_TYPE_CODE}\n"
        "UPDATE polaris_schema.entities t\nSET x = 1\nWHERE t.id = 1\n"
        f"RETURNING t.type_code = {TASK_TYPE_CODE}"
    ) == [False]
    assert _text_writes_name_task_type(
        f"UPDATE entities\nSET x = 1\nWHERE type_code = {TASK_TYPE_CODE} AND id = 1"
    ) == [True]


# -- run: a non-TASK row that looks like a task to every other guard ------------------------


def _table_row(store: Metastore, properties: dict[str, str]) -> TaskRow:
    """A TABLE-like row with a task's catalog and parent (0), at ``ENTITY_ID``: only its
    type_code tells it from a task. Returned as a ``TaskRow``, as a forged read would."""
    now = store.now_ms()
    row = {
        "realm_id": REALM,
        "catalog_id": 0,
        "id": ENTITY_ID,
        "parent_id": 0,
        "name": "live_table",
        "entity_version": 3,
        "type_code": TABLE_LIKE_TYPE_CODE,
        "sub_type_code": 0,
        "create_timestamp": now - 3_600_000,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": now - 3_600_000,
        "properties": properties,
        "internal_properties": {},
        "grant_records_version": 2,
    }
    # As the admin: under PP_TEST_RESTRICTED_ROLE the pipeline's role may not write it.
    with admin_connection(store) as conn:
        conn.execute(queries.INSERT_TASKS.build(store.dialect), [row])
    return decode_row(_read_row(store))


def _read_row(store: Metastore) -> Any:
    with store.engine.connect() as conn:
        return conn.execute(
            select(*queries.TASK_COLUMNS, entities.c.type_code).where(
                entities.c.realm_id == REALM, entities.c.id == ENTITY_ID
            )
        ).one()


def _run(store: Metastore, name: str, forged: TaskRow) -> int:
    """Run write statement ``name`` aimed at ``forged``; how many rows it changed."""
    now = store.now_ms()
    policy = store.policy
    rule = queries.policy_params(policy)
    builds: dict[str, tuple[tuple[Any, ...], dict[str, Any] | None]] = {
        "CAS_WRITE": ((forged, {Prop.EXECUTOR: "me"}, now), None),
        "COMPLETE": ((forged,), None),
        "DISCARD": ((forged,), None),
        "RENEW_HELD_BY": ((), {"realm": REALM, "executor": HOLDER, "timeout": 120_000}),
        "LEASE_BATCH": ((policy, True), {**rule, "executor": "me", "limit": 10, "realms": [REALM]}),
    }
    args, params = builds[name]
    with store.engine.begin() as conn:
        result = conn.execute(getattr(queries, name).build(store.dialect, *args), params)
        return len(result.all()) if name == "LEASE_BATCH" else result.rowcount


# Properties under which a task row would be written by each statement: held by
# HOLDER now (the heartbeat), or never leased (the lease, the CAS, the deletes).
_HELD = {Prop.EXECUTOR: HOLDER, Prop.ATTEMPT_COUNT: "1"}


@pytest.mark.parametrize("name", sorted(_WRITE_ARGS))
def test_a_non_task_row_with_the_tasks_realm_id_and_version_is_never_changed(
    metastore: Metastore, name: str
) -> None:
    if not getattr(queries, name).runs_on(metastore.dialect):
        pytest.skip(f"{name} has no {metastore.dialect} variant")
    properties = (
        {**_HELD, Prop.START_TIME: str(metastore.now_ms())} if name == "RENEW_HELD_BY" else {}
    )
    forged = _table_row(metastore, properties)
    before = _read_row(metastore)
    assert _run(metastore, name, forged) == 0
    assert _read_row(metastore) == before
