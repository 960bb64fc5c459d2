"""Every statement the metastore runs, by name, with its PostgreSQL and SQLite variants.

A ``Query`` has a builder per dialect; None where that dialect lacks the statement and
the store applies the Python rule (``TaskRow.state``) to ``TASKS_BY_AGE`` or
``LIST_TASKS`` instead. PostgreSQL variants embed the task-state rule from
``predicates``, its one SQL source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec

from sqlalchemy import (
    Executable,
    and_,
    delete,
    func,
    insert,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.sql.elements import ColumnElement, TextClause

from polaris_pipeline.metastore import predicates
from polaris_pipeline.metastore.connection import DB_NOW_MS
from polaris_pipeline.metastore.rows import after_write
from polaris_pipeline.metastore.schema import POLARIS_SCHEMA, entities, events
from polaris_pipeline.tasks.model import (
    CATALOG_TYPE_CODE,
    CREATOR,
    DROP_EVENT_BY_SUB_TYPE,
    TASK_TYPE_CODE,
    Prop,
    TaskPolicy,
    TaskRow,
)

POSTGRESQL = "postgresql"
SQLITE = "sqlite"

P = ParamSpec("P")


@dataclass(frozen=True)
class Query(Generic[P]):
    """One named statement: a builder per dialect, None where the dialect has none."""

    name: str
    postgresql: Callable[P, Executable] | None
    sqlite: Callable[P, Executable] | None

    def runs_on(self, dialect: str) -> bool:
        return self._variant(dialect) is not None

    def build(self, dialect: str, /, *args: P.args, **kwargs: P.kwargs) -> Executable:
        variant = self._variant(dialect)
        if variant is None:
            raise ValueError(f"statement {self.name} has no {dialect} variant")
        return variant(*args, **kwargs)

    def _variant(self, dialect: str) -> Callable[P, Executable] | None:
        if dialect == POSTGRESQL:
            return self.postgresql
        if dialect == SQLITE:
            return self.sqlite
        raise ValueError(f"unsupported metastore dialect {dialect!r}")


def _both(name: str, build: Callable[P, Executable]) -> Query[P]:
    """A Core statement: SQLAlchemy compiles the one expression for either dialect."""
    return Query(name, build, build)


# The columns ``rows.decode_row`` reads, in the order every task listing returns them.
TASK_COLUMNS = (
    entities.c.realm_id,
    entities.c.id,
    entities.c.catalog_id,
    entities.c.parent_id,
    entities.c.name,
    entities.c.entity_version,
    entities.c.grant_records_version,
    entities.c.create_timestamp,
    entities.c.last_update_timestamp,
    entities.c.properties,
    entities.c.internal_properties,
)

_PG_NOW = DB_NOW_MS[POSTGRESQL]
_SQLITE_NOW = DB_NOW_MS[SQLITE]


def _task_rows(realms: Iterable[str] | None) -> ColumnElement[bool]:
    """``predicates.TASK_ROWS`` as a Core clause, optionally limited to ``realms``."""
    clause = and_(
        entities.c.type_code == TASK_TYPE_CODE,
        entities.c.catalog_id == 0,
        entities.c.parent_id == 0,
    )
    if realms is not None:
        clause = and_(clause, entities.c.realm_id.in_(list(realms)))
    return clause


def _constant(statement: Executable) -> Callable[[], Executable]:
    return lambda: statement


# ------------------------------------------------------------------- the clock

NOW = Query(
    "NOW",
    postgresql=_constant(text(f"SELECT {_PG_NOW}")),
    sqlite=_constant(text(f"SELECT {_SQLITE_NOW}")),
)

# ----------------------------------------------------------------------- reads


# A loose index scan over the primary key visits one row per realm (then, for REALMS,
# one index probe per realm for a task): never the whole entities table.
def _realm_scan(condition: str) -> TextClause:
    return text(f"""
WITH RECURSIVE r AS (
    (SELECT realm_id FROM {POLARIS_SCHEMA}.entities ORDER BY realm_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.realm_id FROM {POLARIS_SCHEMA}.entities e
            WHERE e.realm_id > r.realm_id ORDER BY e.realm_id LIMIT 1)
    FROM r WHERE r.realm_id IS NOT NULL
)
SELECT r.realm_id FROM r
WHERE r.realm_id IS NOT NULL{condition}
ORDER BY 1
""")


REALMS = Query(
    "REALMS",
    postgresql=_constant(
        _realm_scan(f"""
AND EXISTS (
    SELECT 1 FROM {POLARIS_SCHEMA}.entities e
    WHERE e.realm_id = r.realm_id AND {predicates.TASK_ROWS})""")
    ),
    sqlite=_constant(
        select(entities.c.realm_id).where(_task_rows(None)).distinct().order_by(entities.c.realm_id)
    ),
)

# Every realm with any entity (the overlap check of ``metastore/overlap.py`` asks each
# in turn): the same loose index scan, without the task condition.
ENTITY_REALMS = Query(
    "ENTITY_REALMS",
    postgresql=_constant(_realm_scan("")),
    sqlite=_constant(select(entities.c.realm_id).distinct().order_by(entities.c.realm_id)),
)


def _list_tasks(realms: Iterable[str] | None, limit: int | None) -> Executable:
    query = (
        select(*TASK_COLUMNS)
        .where(_task_rows(realms))
        .order_by(entities.c.create_timestamp, entities.c.realm_id, entities.c.id)
    )
    return query if limit is None else query.limit(limit)


LIST_TASKS = _both("LIST_TASKS", _list_tasks)


def _get_task(realm_id: str, task_id: int) -> Executable:
    return select(*TASK_COLUMNS).where(
        entities.c.realm_id == realm_id,
        entities.c.id == task_id,
        entities.c.type_code == TASK_TYPE_CODE,
    )


GET_TASK = _both("GET_TASK", _get_task)


def _task_properties(realm_id: str, task_id: int) -> Executable:
    return select(entities.c.properties).where(
        entities.c.realm_id == realm_id, entities.c.id == task_id
    )


TASK_PROPERTIES = _both("TASK_PROPERTIES", _task_properties)


def _catalog_internal_properties(realm_id: str, catalog_id: int) -> Executable:
    # A catalog's row: its id is the catalogId its tables and views record.
    return select(entities.c.internal_properties).where(
        entities.c.realm_id == realm_id,
        entities.c.id == catalog_id,
        entities.c.type_code == CATALOG_TYPE_CODE,
    )


CATALOG_INTERNAL_PROPERTIES = _both("CATALOG_INTERNAL_PROPERTIES", _catalog_internal_properties)


def _catalog_names(realms: Sequence[str]) -> Executable:
    """Every catalog's (realm, id, name) in ``realms``: the hold rule's catalog names."""
    return select(entities.c.realm_id, entities.c.id, entities.c.name).where(
        entities.c.type_code == CATALOG_TYPE_CODE, entities.c.realm_id.in_(list(realms))
    )


CATALOG_NAMES = _both("CATALOG_NAMES", _catalog_names)


def _drop_events(realm_id: str, identifiers: Sequence[str]) -> Executable:
    """Polaris's drop events of ``identifiers`` in ``realm_id``: the hold's drop times."""
    return select(
        events.c.catalog_id,
        events.c.event_type,
        events.c.resource_identifier,
        events.c.timestamp_ms,
    ).where(
        events.c.realm_id == realm_id,
        events.c.event_type.in_(sorted(set(DROP_EVENT_BY_SUB_TYPE.values()))),
        events.c.resource_identifier.in_(list(identifiers)),
    )


DROP_EVENTS = _both("DROP_EVENTS", _drop_events)


def _tasks_named(realm_id: str, names: Sequence[str]) -> Executable:
    return select(*TASK_COLUMNS).where(_task_rows([realm_id]), entities.c.name.in_(names))


TASKS_NAMED = _both("TASKS_NAMED", _tasks_named)


def _task_names(realm_id: str, names: Sequence[str]) -> Executable:
    return select(entities.c.name).where(_task_rows([realm_id]), entities.c.name.in_(names))


TASK_NAMES = _both("TASK_NAMES", _task_names)


def _task_family(realm_id: str, parent_name: str) -> Executable:
    # The parent row and every row named "<parent>_...": a range on the name (the
    # next character after "_" is "`"), which the name index serves and which, unlike
    # LIKE, needs no escaping of the name's own "_".
    name = entities.c.name
    return select(*TASK_COLUMNS).where(
        _task_rows([realm_id]),
        (name == parent_name) | and_(name >= f"{parent_name}_", name < f"{parent_name}`"),
    )


TASK_FAMILY = _both("TASK_FAMILY", _task_family)


def _count_tasks(realms: Iterable[str] | None) -> Executable:
    return select(func.count()).select_from(entities).where(_task_rows(realms))


COUNT_TASKS = _both("COUNT_TASKS", _count_tasks)


# What SQLite's per-row lease and selection judge with the Python rule.
def _tasks_by_age(realms: Iterable[str] | None) -> Executable:
    return (
        select(*TASK_COLUMNS)
        .where(_task_rows(realms))
        .order_by(entities.c.create_timestamp, entities.c.id)
    )


TASKS_BY_AGE = _both("TASKS_BY_AGE", _tasks_by_age)

# ------------------------------------------------- the state rule in the database


def policy_params(policy: TaskPolicy) -> dict[str, Any]:
    """The bind parameters of ``policy``, for COUNT_BY_STATE, SELECT_AVAILABLE and LEASE_BATCH."""
    params: dict[str, Any] = {
        "timeout": policy.lease_timeout_ms,
        "grace": policy.effective_grace_ms,
        "max_attempts": policy.max_attempts,
    }
    for i, realm in enumerate(sorted(policy.realm_overrides)):
        own = policy.for_realm(realm)
        params[f"ovr_realm_{i}"] = realm
        params[f"ovr_timeout_{i}"] = own.lease_timeout_ms
        params[f"ovr_grace_{i}"] = own.effective_grace_ms
        params[f"ovr_hold_{i}"] = own.hold_ms
    if policy.holds_any:
        params["hold"] = policy.hold_ms
        for i, (catalog, ms) in enumerate(sorted(policy.catalog_hold_ms.items())):
            params[f"hold_catalog_{i}"] = catalog
            params[f"hold_catalog_ms_{i}"] = ms
    return params


def _state(policy: TaskPolicy, now: str, drop_events: bool) -> tuple[str, str]:
    """(the rule's state of row ``e`` at ``now``, its lease timeout), both as SQL.

    ``drop_events``: the database has Polaris's events table (v3+) for holds to count from.
    Timeout and grace are per realm: one CASE on realm_id over the overridden realms (bound by
    ``policy_params``, never spliced); with none, plain ``:timeout`` and ``:grace``.
    """
    realms = range(len(policy.realm_overrides))
    timeout = predicates.per_realm(
        ":timeout", [(f":ovr_realm_{i}", f":ovr_timeout_{i}") for i in realms]
    )
    grace = predicates.per_realm(":grace", [(f":ovr_realm_{i}", f":ovr_grace_{i}") for i in realms])
    held = None
    if policy.holds_any:
        hold = predicates.per_realm(
            ":hold", [(f":ovr_realm_{i}", f":ovr_hold_{i}") for i in realms]
        )
        catalogs = [
            (f":hold_catalog_{i}", f":hold_catalog_ms_{i}")
            for i in range(len(policy.catalog_hold_ms))
        ]
        held = predicates.held(
            now,
            f"{POLARIS_SCHEMA}.entities",
            hold,
            catalogs,
            f"{POLARIS_SCHEMA}.events" if drop_events else None,
        )
    return predicates.state_case(now, timeout, grace, ":max_attempts", held), timeout


# For one transaction: PostgreSQL's JIT compiles the state rule when its cost estimate
# is high, as the drop events' scans make it (measured: 5.7 s of JIT for a 100-row
# lease over 100,000 events, docs/operator-guide.md), and never pays back on a lease.
NO_JIT = Query("NO_JIT", postgresql=_constant(text("SET LOCAL jit = off")), sqlite=None)


def _count_by_state(policy: TaskPolicy, drop_events: bool, in_realms: bool) -> Executable:
    state, _ = _state(policy, ":now", drop_events)
    realm_filter = "AND e.realm_id = ANY(:realms)" if in_realms else ""
    return text(
        f"SELECT e.realm_id, {state} AS state, count(*) AS n "
        f"FROM {POLARIS_SCHEMA}.entities e WHERE {predicates.TASK_ROWS} "
        f"{realm_filter} GROUP BY 1, 2"
    )


COUNT_BY_STATE = Query("COUNT_BY_STATE", postgresql=_count_by_state, sqlite=None)


def _select_available(policy: TaskPolicy, drop_events: bool) -> Executable:
    clock = "c.now_ms"
    state, timeout = _state(policy, clock, drop_events)
    columns = ", ".join(f"e.{column.name}" for column in TASK_COLUMNS)
    return text(f"""
WITH c AS (SELECT {_PG_NOW} AS now_ms)
SELECT {columns}
FROM {POLARIS_SCHEMA}.entities e, c
WHERE {predicates.TASK_ROWS} AND e.realm_id = ANY(:realms)
  AND NOT {predicates.plainly_held(clock, timeout)}
  AND {state} = 'orphaned'
LIMIT :limit
""")


SELECT_AVAILABLE = Query("SELECT_AVAILABLE", postgresql=_select_available, sqlite=None)


def _lease_batch(policy: TaskPolicy, drop_events: bool) -> Executable:
    now = "c.now_ms"
    state, timeout = _state(policy, now, drop_events)
    attempts = predicates.attempts("t")
    return text(f"""
WITH c AS (
    -- A first lease (the usual case) adds the same three keys to every row: built
    -- once here. jsonb_build_object looks up its arguments' types on every call.
    SELECT now_ms, jsonb_build_object(
            '{Prop.EXECUTOR}', CAST(:executor AS TEXT),
            '{Prop.START_TIME}', CAST(now_ms AS TEXT),
            '{Prop.ATTEMPT_COUNT}', CAST('1' AS TEXT)) AS first_lease
    FROM (SELECT {_PG_NOW} AS now_ms) AS clock
),
picked AS (
    SELECT e.realm_id, e.id, jsonb_typeof(e.properties) = 'object' AS is_object
    FROM {POLARIS_SCHEMA}.entities e, c
    WHERE {predicates.TASK_ROWS} AND e.realm_id = ANY(:realms)
      -- Rows other sweepers plainly hold go first, before the costly CASE.
      AND NOT {predicates.plainly_held(now, timeout)}
      AND {state} = 'orphaned'
    -- No ORDER BY: the scan stops at the first :limit orphans instead of
    -- sorting every candidate; backoff keeps failing tasks from crowding out others.
    LIMIT :limit
    FOR UPDATE OF e SKIP LOCKED
),
leased AS (
    UPDATE {POLARIS_SCHEMA}.entities t
    -- Deleting a key rebuilds the whole value, even when the key is absent.
    SET properties = (CASE WHEN t.properties ? '{Prop.END_TIME}'
            THEN t.properties - '{Prop.END_TIME}' ELSE t.properties END)
        || CASE WHEN {attempts} = 0 THEN c.first_lease ELSE jsonb_object(ARRAY[
            '{Prop.EXECUTOR}', CAST(:executor AS TEXT),
            '{Prop.START_TIME}', CAST(c.now_ms AS TEXT),
            '{Prop.ATTEMPT_COUNT}', CAST({attempts} + 1 AS TEXT)]) END,
        entity_version = t.entity_version + 1,
        last_update_timestamp = c.now_ms
    -- In primary-key order, so consecutive index insertions land on the same leaf
    -- pages: measured a sixth less PostgreSQL CPU with 1 leaser, a quarter with 4.
    FROM (SELECT * FROM picked ORDER BY realm_id, id) AS picked, c
    -- The type again on the written row: every write names it (docs/security.md).
    WHERE t.realm_id = picked.realm_id AND t.id = picked.id AND picked.is_object
      AND t.type_code = {TASK_TYPE_CODE}
    RETURNING t.realm_id, t.id, t.name, t.entity_version,
        -- Written just above as a decimal string, so the cast cannot fail.
        CAST(t.properties->>'{Prop.ATTEMPT_COUNT}' AS BIGINT) AS attempt,
        t.properties->>'{Prop.TASK_TYPE}' AS task_type_code, c.now_ms
)
SELECT TRUE AS leased, realm_id, id, name, entity_version, attempt, task_type_code, now_ms
FROM leased
UNION ALL
SELECT FALSE, realm_id, id, NULL, NULL, NULL, NULL, NULL FROM picked WHERE NOT is_object
""")


# Leases orphans whose properties are a JSON object; returns those leases and,
# marked not leased, the orphans it picked whose properties are not an object.
# ``Lease.from_leased_columns`` reads its columns by position: keep the order.
LEASE_BATCH = Query("LEASE_BATCH", postgresql=_lease_batch, sqlite=None)

# ---------------------------------------------------------------------- writes


def _task_as_read(task: TaskRow) -> tuple[ColumnElement[bool], ...]:
    """``task``'s row, still a task whatever was read, at the version that was read."""
    return (
        entities.c.realm_id == task.realm_id,
        entities.c.id == task.id,
        entities.c.type_code == TASK_TYPE_CODE,
        entities.c.entity_version == task.entity_version,
    )


def _cas_write(task: TaskRow, properties: dict[str, str], now: int) -> Executable:
    """Polaris's compare-and-set: guarded on the (version, grants) that were read, and
    on the row being a task whatever was read."""
    written = after_write(task, properties, now)
    return (
        update(entities)
        .where(
            *_task_as_read(task),
            entities.c.grant_records_version == task.grant_records_version,
        )
        .values(
            properties=written.properties,
            entity_version=written.entity_version,
            last_update_timestamp=written.last_update_timestamp,
        )
    )


CAS_WRITE = _both("CAS_WRITE", _cas_write)

_HELD_BY_PG = predicates.held_by(":executor", "c.now_ms", ":timeout")
_HELD_BY_SQLITE = predicates.sqlite_held_by(":executor", _SQLITE_NOW, ":timeout")

# The heartbeat: restart every live lease of one holder in a realm.
RENEW_HELD_BY = Query(
    "RENEW_HELD_BY",
    postgresql=_constant(
        text(f"""
WITH c AS (SELECT {_PG_NOW} AS now_ms)
UPDATE {POLARIS_SCHEMA}.entities e
SET properties = e.properties || jsonb_build_object('{Prop.START_TIME}', CAST(c.now_ms AS TEXT)),
    entity_version = e.entity_version + 1,
    last_update_timestamp = c.now_ms
FROM c
WHERE {predicates.TASK_ROWS} AND e.realm_id = :realm
  AND jsonb_typeof(e.properties) = 'object' AND {_HELD_BY_PG}
""")
    ),
    sqlite=_constant(
        text(f"""
UPDATE entities
SET properties = json_set(properties, '$.{Prop.START_TIME}', CAST({_SQLITE_NOW} AS TEXT)),
    entity_version = entity_version + 1,
    last_update_timestamp = {_SQLITE_NOW}
WHERE {predicates.task_rows(None)} AND realm_id = :realm
  AND {_HELD_BY_SQLITE}
""")
    ),
)


def _complete(task: TaskRow) -> Executable:
    """The holder's delete; the lease was checked in the same transaction."""
    return delete(entities).where(*_task_as_read(task))


COMPLETE = _both("COMPLETE", _complete)


def _list_for_discard(realms: Iterable[str] | None, task_ids: Sequence[int] | None) -> Executable:
    query = select(*TASK_COLUMNS).where(_task_rows(realms))
    if task_ids is not None:
        query = query.where(entities.c.id.in_(list(task_ids)))
    return query.order_by(entities.c.realm_id, entities.c.id)


LIST_FOR_DISCARD = _both("LIST_FOR_DISCARD", _list_for_discard)


def _discard(task: TaskRow) -> Executable:
    """A compare-and-set delete: refused when the row changed since it was judged."""
    return delete(entities).where(
        *_task_as_read(task), entities.c.grant_records_version == task.grant_records_version
    )


DISCARD = _both("DISCARD", _discard)

# The rows (dicts of every entities column) are given at execution.
INSERT_TASKS = _both("INSERT_TASKS", _constant(insert(entities)))


# The BATCH rows of one realm that Polaris wrote (not our children), for the release
# inference of ``metastore/release_probe.py``: those whose ``data`` looks like it has
# ``type`` first (compact JSON, as Jackson writes it: the probe decodes to be sure),
# then the newest. Bound: ``limit``, ``typed`` (the LIKE pattern) and ``realm``.
_BATCH_TYPE_CODE = "3"
TYPED_BATCH_PATTERN = '%"type":%'


def _batch_evidence_pg() -> Executable:
    data = f"e.properties->>'{Prop.DATA}'"
    return text(f"""
SELECT e.id, {data} AS data FROM {POLARIS_SCHEMA}.entities e
WHERE e.realm_id = :realm AND {predicates.TASK_ROWS}
  AND e.properties->>'{Prop.TASK_TYPE}' = '{_BATCH_TYPE_CODE}'
  AND COALESCE(e.properties->>'{Prop.CREATED_BY}', '') <> '{CREATOR}'
ORDER BY COALESCE({data} LIKE :typed, FALSE) DESC, e.create_timestamp DESC, e.id
LIMIT :limit
""")


def _batch_evidence_sqlite() -> Executable:
    data = predicates.sqlite_field(Prop.DATA)
    return text(f"""
SELECT id, {data} AS data FROM entities
WHERE realm_id = :realm AND {predicates.task_rows(None)}
  AND {predicates.sqlite_field(Prop.TASK_TYPE)} = '{_BATCH_TYPE_CODE}'
  AND COALESCE({predicates.sqlite_field(Prop.CREATED_BY)}, '') <> '{CREATOR}'
ORDER BY COALESCE({data} LIKE :typed, 0) DESC, create_timestamp DESC, id
LIMIT :limit
""")


BATCH_EVIDENCE = Query(
    "BATCH_EVIDENCE", postgresql=_batch_evidence_pg, sqlite=_batch_evidence_sqlite
)


# Polaris's listener files TASK_EXECUTION events under the realm, with the event
# type as the resource identifier (metastore/events.py).
RESOURCE_TYPE_REALM = "REALM"


def _insert_event(now: str) -> Callable[[str, str | None, str, str, dict[str, str]], Executable]:
    def build(
        realm_id: str,
        catalog_id: str | None,
        event_id: str,
        event_type: str,
        properties: dict[str, str],
    ) -> Executable:
        return events.insert().values(
            realm_id=realm_id,
            catalog_id=catalog_id,
            event_id=event_id,
            request_id=None,
            event_type=event_type,
            timestamp_ms=literal_column(now),
            principal_name=None,
            resource_type=RESOURCE_TYPE_REALM,
            resource_identifier=event_type,
            additional_properties=properties,
        )

    return build


INSERT_EVENT = Query(
    "INSERT_EVENT", postgresql=_insert_event(_PG_NOW), sqlite=_insert_event(_SQLITE_NOW)
)
