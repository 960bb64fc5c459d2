"""The lease takes exactly the rows the Python state rule calls orphaned, and the SQL
shortcuts on its way (the plainly-held pre-filter, the number test) agree with that rule.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import event, text

from builders.tasks import dropped_entity_json
from polaris_pipeline.metastore import Metastore, new_entity_id, predicates
from polaris_pipeline.metastore.connection import DB_NOW_MS
from polaris_pipeline.metastore.schema import POLARIS_SCHEMA
from polaris_pipeline.tasks.hold import drop_key_of
from polaris_pipeline.tasks.model import (
    CREATOR,
    Prop,
    TaskPolicy,
    TaskRow,
    TaskState,
    is_unhandled_cleanup,
)
from polaris_pipeline.tasks.payloads import DroppedEntity, encode_dropped_entity
from tests.support.tasks import catalog_row, insert_row, seed

TIMEOUT = 60_000
GRACE = 500_000


def _insert(
    store: Metastore,
    realm: str,
    raw_properties: str,
    *,
    created: int,
    updated: int,
    name: str | None = None,
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
                "name": name or f"zoo_{task_id}",
                "created": created,
                "updated": updated,
                "props": raw_properties,
            },
        )
    return task_id


def polaris_entity(type_code: int, sub_type_code: int = 0) -> str:
    """``data`` exactly as Polaris writes it for a dropped entity of ``type_code``."""
    return encode_dropped_entity(
        DroppedEntity(
            id=new_entity_id(),
            name=f"dropped_{type_code}",
            type_code=type_code,
            sub_type_code=sub_type_code,
            catalog_id=0 if type_code in (2, 3, 4) else 11,
            parent_id=0 if type_code in (2, 3, 4) else 12,
            entity_version=3,
            properties={"owner": "ops"},
            internal_properties={"client_id": "x"} if type_code == 2 else {},
        )
    )


def compact(**overrides: Any) -> str:
    """The hand-written dropped entity, compact as Jackson writes it."""
    return json.dumps(json.loads(dropped_entity_json(**overrides)), separators=(",", ":"))


# (taskType, data, whether the rule calls it unhandled): the shapes Polaris writes, and
# hostile ones where a JSON reader and a text rule could disagree on the typeCode.
DATA_CASES: list[tuple[Any, Any, bool]] = [
    *(("1", polaris_entity(code), True) for code in (2, 3, 4, 5, 6)),
    ("1", polaris_entity(7, 2), False),  # a table
    ("1", polaris_entity(7, 3), False),  # a view
    ("1", compact(typeCode=3), True),
    ("1", compact(typeCode=70), True),
    ("1", compact(typeCode=-0), True),
    ("1", compact(typeCode=10**20), True),
    ("1", dropped_entity_json(typeCode=3), False),  # spaced JSON: Jackson never writes it
    ("1", '{"typeCode":7}', False),
    ("1", '{"typeCode":3}', True),
    ("1", '{"name":"r\\"x","typeCode":5,"properties":"{}"}', True),
    ("1", '{"typeCode":"7"}', False),  # a string: the decoder decides
    ("1", '{"typeCode":"3"}', False),
    ("1", '{"typeCode":3.0}', False),
    ("1", '{"typeCode":3e0}', False),
    ("1", '{"typeCode":07}', False),
    ("1", '{"typeCode": 3}', False),  # not compact, as Jackson never writes
    ("1", '{"typeCode":3,"typeCode":7}', False),  # a reader takes the last
    ("1", '{"typeCode":3,"p":{"typeCode":7}}', False),
    ("1", '{"a":{"typeCode":3},"typeCode":3}', False),
    ("1", '{"x":"\\u0041","typeCode":3}', False),  # an escape could spell a key
    ("1", '{"type\\u0043ode":7,"typeCode":3}', False),
    ("1", '{"typeCode":3} ', False),
    ("1", '{"typeCode":3,', False),
    ("1", "{not json}", False),
    ("1", "not json", False),
    ("1", "", False),
    ("1", compact(typeCode=None), False),  # typeCode null
    (
        "1",
        json.dumps({k: v for k, v in json.loads(compact()).items() if k != "typeCode"}),
        False,
    ),
    ("1", {"typeCode": 3}, False),  # data an object, not a JSON string
    ("1", None, False),  # no data
    ("2", '{"typeCode":3}', False),
    ("3", polaris_entity(3), False),
    ("01", polaris_entity(3), False),
    (" 1", polaris_entity(3), False),
    (1, polaris_entity(3), True),  # a number: reads as "1" in both
]


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
        # Unhandled whatever else the row says: dead-lettered by an older version,
        # leased by one, or backing off.
        ({Prop.TASK_TYPE: "1", Prop.DATA: polaris_entity(5), Prop.STATUS: "dead"}, None),
        ({Prop.TASK_TYPE: "1", Prop.DATA: polaris_entity(6), Prop.ATTEMPT_COUNT: "8"}, None),
        (
            {
                Prop.TASK_TYPE: "1",
                Prop.DATA: polaris_entity(3),
                x: "ours",
                Prop.START_TIME: str(now),
            },
            now,
        ),
        (
            {
                Prop.TASK_TYPE: "1",
                Prop.DATA: polaris_entity(4),
                Prop.NEXT_ATTEMPT: str(now + 100_000),
            },
            None,
        ),
        *(
            ({Prop.TASK_TYPE: task_type, Prop.DATA: data}, None)
            for task_type, data, _ in DATA_CASES
        ),
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
        body = {k: v for k, v in body.items() if v is not None or k != Prop.DATA}
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
    _hold_cases(store, realm, old, fresh)


HOLD_MS = 2_000_000  # between fresh and old: a fresh drop is held, an old one is not
HELD_CATALOG = "cat11"  # polaris_entity's tables are in catalog 11: held longer than old
UUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _hold_cases(store: Metastore, realm: str, old: int, fresh: int) -> None:
    """Parents of the hold rule (catalog 11, named; catalog 1, the realm's hold) and
    children named after them, with names the child pattern must refuse."""
    insert_row(store, catalog_row(realm, 11, HELD_CATALOG))
    parents = [("1", compact(), old), ("1", compact(), fresh), ("1", polaris_entity(7), old)]
    for n, (task_type, data, created) in enumerate(parents):
        parent = f"entityCleanup_{900 + n}"
        body = json.dumps({Prop.TASK_TYPE: task_type, Prop.DATA: data})
        _insert(store, realm, body, created=created, updated=created, name=parent)
        names = [
            f"{parent}_[a, b]_{UUID}",
            f"{parent}_x\n_{UUID}",
            f"{parent}_x_{UUID}\n",  # a trailing line break: not a child name
            f"{parent}_x_{UUID.upper()}",
            f"{parent}{UUID}",
        ]
        for i, name in enumerate(names):
            child_type = ("2", "3", "1")[i % 3]
            child = json.dumps({Prop.TASK_TYPE: child_type, Prop.DATA: "{}"})
            _insert(store, realm, child, created=old, updated=old, name=name)


@pytest.fixture
def strict(metastore: Metastore) -> Metastore:
    """The test metastore with a grace period, so that 'pending' is reachable."""
    return Metastore(
        engine=metastore.engine,
        policy=TaskPolicy(
            lease_timeout_ms=TIMEOUT,
            grace_ms=GRACE,
            hold_ms=HOLD_MS,
            catalog_hold_ms={HELD_CATALOG: 20_000_000, "other": 0},
        ),
    )


def _states(store: Metastore, realm: str) -> dict[int, TaskState]:
    _, rows = store.tasks_with_state([realm])
    return {task.id: state for task, state in rows}


def test_lease_takes_exactly_the_orphans_of_the_python_rule(strict: Metastore) -> None:
    _zoo(strict, "zoo")
    before = _states(strict, "zoo")
    assert set(before.values()) == set(TaskState)  # the zoo reaches every state
    expected_unhandled = 4 + sum(1 for _, _, unhandled in DATA_CASES if unhandled)
    assert list(before.values()).count(TaskState.UNHANDLED) == 2 * expected_unhandled
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
                f"WITH c AS (SELECT {DB_NOW_MS[strict.dialect]} AS now_ms) "
                f"SELECT e.id, {held} AS held FROM {POLARIS_SCHEMA}.entities e, c"
            ),
            {"timeout": TIMEOUT},
        ).all()
    rejected = {row.id for row in rows if row.held}
    # Unhandled comes before leased in the rule; either way such a row is not taken.
    not_available = (TaskState.LEASED, TaskState.DEAD, TaskState.UNHANDLED)
    assert all(states[i] in not_available for i in rejected)
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


def test_python_unhandled_rule_matches_the_expectations() -> None:
    for task_type, data, unhandled in DATA_CASES:
        props = {Prop.TASK_TYPE: task_type, **({Prop.DATA: data} if data is not None else {})}
        row = TaskRow("r", 1, "n", 1, 1, 0, 0, properties=_as_read(props))
        assert row.unhandled is unhandled, (task_type, data)
        assert (row.state(10**13, TaskPolicy()) is TaskState.UNHANDLED) is unhandled


def _as_read(props: dict[str, Any]) -> dict[str, str]:
    """Properties as ``parse_properties`` hands them over (non-strings as JSON text)."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in props.items()}


@pg_only
def test_sql_unhandled_rule_matches_python(metastore: Metastore) -> None:
    """The SQL rule on every shape, one statement; the same answers as Python's."""
    bodies = [
        json.dumps({Prop.TASK_TYPE: t, **({Prop.DATA: d} if d is not None else {})})
        for t, d, _ in DATA_CASES
    ]
    with metastore.engine.begin() as conn:
        got = (
            conn.execute(
                text(
                    f"SELECT {predicates.UNHANDLED} FROM (SELECT CAST(b AS JSONB) AS properties, n"
                    " FROM unnest(CAST(:bodies AS TEXT[])) WITH ORDINALITY AS u(b, n)) e ORDER BY n"
                ),
                {"bodies": bodies},
            )
            .scalars()
            .all()
        )
    assert got == [unhandled for _, _, unhandled in DATA_CASES]
    for (task_type, data, _), sql in zip(DATA_CASES, got, strict=True):
        props = _as_read({Prop.TASK_TYPE: task_type, **({Prop.DATA: data} if data else {})})
        assert is_unhandled_cleanup(props.get(Prop.TASK_TYPE), props.get(Prop.DATA)) is sql


@pg_only
def test_counts_in_sql_match_the_python_rule(strict: Metastore) -> None:
    _zoo(strict, "zoo")
    python = Counter(_states(strict, "zoo").values())
    assert strict.count_by_state(["zoo"])["zoo"] == python
    assert python[TaskState.UNHANDLED] > 0


def _dropped(
    name: str = "t",
    namespace: str = "ns",
    sub_type: int = 2,
    properties: dict[str, str] | None = None,
) -> str:
    """``data`` of a dropped table (``sub_type`` 3: a view) whose ``parent-namespace`` is
    ``namespace`` (already URL-encoded, levels joined by ``%1F``), as Polaris writes it."""
    return encode_dropped_entity(
        DroppedEntity(
            id=7,
            name=name,
            sub_type_code=sub_type,
            catalog_id=11,
            properties=properties or {},
            internal_properties={
                "metadata-location": "s3://b/m.json",
                "parent-namespace": namespace,
            },
        )
    )


# ``data`` of a parent task, and the drop event (type, identifier) it is matched to.
DROP_KEY_CASES: list[tuple[str | None, tuple[str, str] | None]] = [
    (_dropped(), ("AFTER_DROP_TABLE", "ns.t")),
    (_dropped(sub_type=3), ("AFTER_DROP_VIEW", "ns.t")),
    (_dropped(namespace="a%1Fb+c"), ("AFTER_DROP_TABLE", "a.b c.t")),  # levels a, "b c"
    (_dropped(namespace=""), ("AFTER_DROP_TABLE", "t")),  # the empty namespace
    # Jackson writes non-ASCII as is (Python's json would escape it).
    (_dropped(name="tä").replace("\\u00e4", "ä"), ("AFTER_DROP_TABLE", "ns.tä")),
    (_dropped(name="tä"), None),  # escaped: a JSON escape in the name
    (_dropped(name='t"x'), None),  # a JSON escape in the name
    (_dropped(name="t\\x"), None),
    (_dropped(namespace="a%2Fb"), None),  # a %-escape other than the separator
    (_dropped(sub_type=9), None),  # neither an Iceberg table nor a view
    (_dropped()[:-1] + ',"name":"u"}', None),  # a second name
    (_dropped(properties={"parent-namespace": "evil"}), None),  # in the table's properties too
    (_dropped().replace('"subTypeCode":2', '"subTypeCode": 2'), None),  # not compact
    (_dropped().replace("parent-namespace", "parent-space"), None),
    ('{"name":"t","subTypeCode":2', None),
    ("{", None),
    ("", None),
    (None, None),
]


@pg_only
def test_sql_drop_event_key_matches_python(metastore: Metastore) -> None:
    """The hold's drop event key in SQL, on every shape: the same answers as Python's."""
    bodies = [
        json.dumps({Prop.TASK_TYPE: "1", **({Prop.DATA: d} if d is not None else {})})
        for d, _ in DROP_KEY_CASES
    ]
    with metastore.engine.begin() as conn:
        got = conn.execute(
            text(
                "SELECT k.kind, k.ident FROM (SELECT CAST(b AS JSONB) AS properties, n"
                " FROM unnest(CAST(:bodies AS TEXT[])) WITH ORDINALITY AS u(b, n)) e"
                f" LEFT JOIN LATERAL ({predicates.drop_event_key('e')}) k ON TRUE ORDER BY n"
            ),
            {"bodies": bodies},
        ).all()
    sql = [(r.kind, r.ident) if r.kind is not None and r.ident is not None else None for r in got]
    assert sql == [key for _, key in DROP_KEY_CASES]
    for (data, key), body in zip(DROP_KEY_CASES, bodies, strict=True):
        task = TaskRow("r", 1, "entityCleanup_7", 1, 1, 0, 0, properties=json.loads(body))
        found = drop_key_of(task)
        assert (None if found is None else (found.event_type, found.identifier)) == key, data
