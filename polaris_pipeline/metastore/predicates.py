"""The task-state rule of ``tasks.model.TaskRow.state`` written as SQL.

PostgreSQL has the whole rule (batch lease, available tasks, per-state counts, heartbeat);
SQLite only the held test the heartbeat needs, and lists rows for the Python rule.
``tests/test_metastore_lease_rule.py`` checks both rules classify rows alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from polaris_pipeline.tasks.hold import DROP_EVENT_SLACK_MS
from polaris_pipeline.tasks.model import (
    CATALOG_ID_DATA_PATTERN,
    CATALOG_TYPE_CODE,
    CHILD_NAME_PATTERN,
    CREATOR,
    DROP_EVENT_BY_SUB_TYPE,
    DROP_KEYS,
    DROP_NAME_DATA_PATTERN,
    DROP_NAMESPACE_DATA_PATTERN,
    DROP_SUB_TYPE_DATA_PATTERN,
    INTEGER_PATTERN,
    NAMESPACE_LEVEL_SEPARATOR,
    STATUS_DEAD,
    TABLE_LIKE_TYPE_CODE,
    TASK_TYPE_CODE,
    UNHANDLED_DATA_PATTERN,
    UNHANDLED_TASK_TYPE,
    UNHANDLED_TYPE_KEY,
    Prop,
)


# Tasks always have catalog_id = 0 and parent_id = 0; saying so lets PostgreSQL
# use Polaris's unique index (realm_id, catalog_id, parent_id, type_code, name)
# instead of scanning every entity of the realm.
def task_rows(alias: str | None = "e") -> str:
    """Row ``alias`` is a task (no alias: the table's own columns, as SQLite's UPDATE has them)."""
    p = f"{alias}." if alias else ""
    return f"{p}type_code = {TASK_TYPE_CODE} AND {p}catalog_id = 0 AND {p}parent_id = 0"


TASK_ROWS = task_rows()


# INTEGER_PATTERN, spelled for PostgreSQL as an unbounded regex plus a length
# test on the digits: the same strings, but PostgreSQL's regex engine runs the
# bounded repeat {1,18} several times slower, and this test runs on every row.
_MAX_DIGITS = 18
_MAX_INTEGER = 10**_MAX_DIGITS - 1
if f"-?[0-9]{{1,{_MAX_DIGITS}}}" != INTEGER_PATTERN:
    raise RuntimeError("tasks.model.INTEGER_PATTERN changed: update predicates._num to match")


def _num(key: str, alias: str = "e") -> str:
    value = f"{alias}.properties->>'{key}'"
    return (
        f"(CASE WHEN {value} ~ '^-?[0-9]+$' AND length(ltrim({value}, '-')) <= {_MAX_DIGITS} "
        f"THEN CAST({value} AS BIGINT) END)"
    )


EXECUTOR = f"NULLIF(e.properties->>'{Prop.EXECUTOR}', '')"
START = _num(Prop.START_TIME)
END = _num(Prop.END_TIME)
NEXT = _num(Prop.NEXT_ATTEMPT)


def attempts(alias: str = "e") -> str:
    """The attempt count of row ``alias`` as the rule reads it: 0 when absent or not a number."""
    return f"GREATEST(COALESCE({_num(Prop.ATTEMPT_COUNT, alias)}, 0), 0)"


ATTEMPTS = attempts()


def _literal(value: str) -> str:
    """A PostgreSQL E'' string literal: the same text whatever standard_conforming_strings is."""
    return "E'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _unhandled() -> str:
    """``tasks.model.is_unhandled_cleanup`` in SQL, on the text of ``data``.

    The task-type test is one key look-up and settles almost every row; only
    ENTITY_CLEANUP_SCHEDULER rows run the anchored regex, which stops within the
    first members of the entity. No JSON cast: a cast error would abort the lease.
    """
    data = f"(e.properties->>'{Prop.DATA}')"
    key = _literal(UNHANDLED_TYPE_KEY)
    return (
        f"COALESCE(e.properties->>'{Prop.TASK_TYPE}' = '{UNHANDLED_TASK_TYPE}'"
        f" AND right({data}, 1) = '}}'"
        f" AND substring({data} FROM {_literal(UNHANDLED_DATA_PATTERN)})"
        f" <> '{TABLE_LIKE_TYPE_CODE}'"
        f" AND strpos(substr({data}, strpos({data}, {key}) + {len(UNHANDLED_TYPE_KEY)}), {key}) = 0"
        f" AND strpos({data}, {_literal(chr(92) + 'u')}) = 0, FALSE)"
    )


UNHANDLED = _unhandled()
# SQLAlchemy's text() reads ":name" as a bind parameter; the rule's literals must not
# contain one, or every statement embedding it would ask for a missing parameter.
if re.search(r"(?<![:\w]):\w", UNHANDLED):
    raise RuntimeError("predicates.UNHANDLED contains ':<word>': reword the pattern")


def per_realm(default: str, overrides: Sequence[tuple[str, str]], alias: str = "e") -> str:
    """A SQL value that is ``overrides``' value for its realm, else ``default``.

    ``overrides`` pairs bind-parameter names (realm, value); without any the
    statement is unchanged, so the usual single policy costs nothing.
    """
    if not overrides:
        return default
    whens = " ".join(f"WHEN {realm} THEN CAST({value} AS BIGINT)" for realm, value in overrides)
    return f"(CASE {alias}.realm_id {whens} ELSE CAST({default} AS BIGINT) END)"


def plainly_held(now: str, timeout: str) -> str:
    """True only for rows ``state_case`` calls leased (or dead), never orphaned; cheap.

    An executor, no end time, and a start within ``timeout`` of ``now``; placed before the CASE
    it drops other sweepers' rows cheaply. The start is compared as text with
    ``last_update_timestamp``, which our leases write with the same value: no regex on our
    rows. Rows it misses are still judged by the CASE.
    """
    start = f"e.properties->>'{Prop.START_TIME}'"
    written_with_update = (
        f"(e.last_update_timestamp BETWEEN GREATEST({now} - {timeout}, 0) AND {_MAX_INTEGER}"
        f" AND {start} = CAST(e.last_update_timestamp AS TEXT))"
    )
    return (
        f"COALESCE({EXECUTOR} IS NOT NULL AND NOT e.properties ? '{Prop.END_TIME}'"
        f" AND ({written_with_update} OR {START} >= {now} - {timeout}), FALSE)"
    )


def _lease_live(now: str, timeout: str) -> str:
    """A start time within ``timeout`` of ``now`` and no end written since: a live lease."""
    return (
        f"{START} IS NOT NULL AND {now} - {START} <= {timeout}"
        f" AND NOT COALESCE({END} >= {START}, FALSE)"
    )


def held_by(executor: str, now: str, timeout: str) -> str:
    """Row ``e`` is held by ``executor``: the held test of ``state_case`` for one holder."""
    return f"{EXECUTOR} = {executor} AND {_lease_live(now, timeout)}"


def sqlite_field(key: str) -> str:
    """Property ``key`` of the row in SQLite (JSON text); NULL when the text is not JSON."""
    return f"(CASE WHEN json_valid(properties) THEN json_extract(properties, '$.{key}') END)"


def sqlite_held_by(executor: str, now: str, timeout: str) -> str:
    """``held_by`` in SQLite, on the unaliased row of an UPDATE; properties are JSON text."""
    start = f"CAST({sqlite_field(Prop.START_TIME)} AS INTEGER)"
    end = f"CAST({sqlite_field(Prop.END_TIME)} AS INTEGER)"
    return (
        f"{sqlite_field(Prop.EXECUTOR)} = {executor} AND {now} - {start} <= {timeout}"
        f" AND NOT COALESCE({end} >= {start}, 0)"
    )


def _catalog_id(alias: str) -> str:
    """The catalogId of the entity parent task ``alias`` drops (``hold.catalog_id_of``)."""
    pattern = _literal(CATALOG_ID_DATA_PATTERN)
    found = f"substring({alias}.properties->>'{Prop.DATA}' FROM {pattern})"
    return (
        f"(CASE WHEN length(ltrim({found}, '-')) <= {_MAX_DIGITS} THEN CAST({found} AS BIGINT) END)"
    )


def _catalog_name(alias: str, entities: str) -> str:
    """The name of the catalog parent task ``alias`` drops from (``HoldView.catalog_name``)."""
    return (
        f"(SELECT c.name FROM {entities} c"
        f" WHERE c.realm_id = {alias}.realm_id AND c.id = {_catalog_id(alias)}"
        f" AND c.type_code = {CATALOG_TYPE_CODE})"
    )


def _hold_ms(
    alias: str, entities: str, realm_hold: str, catalogs: Sequence[tuple[str, str]]
) -> str:
    """The hold of parent task ``alias``: its catalog's (``catalogs``: bound name, bound
    hold), else ``realm_hold`` (``TaskPolicy.hold_ms_for``)."""
    if not catalogs:
        return realm_hold
    whens = " ".join(f"WHEN {name} THEN CAST({ms} AS BIGINT)" for name, ms in catalogs)
    own = f"(SELECT CASE {_catalog_name(alias, entities)} {whens} END)"
    return f"COALESCE({own}, {realm_hold})"


def drop_event_key(alias: str) -> str:
    """A query of the drop event parent task ``alias`` would have (``hold.drop_key_of``):
    one row (kind, ident), no row or NULLs where the payload cannot be read plainly."""
    data = f"({alias}.properties->>'{Prop.DATA}')"
    once = " AND ".join(
        f"strpos(substr({data}, strpos({data}, {_literal(k)}) + {len(k)}), {_literal(k)}) = 0"
        for k in DROP_KEYS
    )
    kinds = " ".join(
        f"WHEN '{code}' THEN '{kind}'" for code, kind in DROP_EVENT_BY_SUB_TYPE.items()
    )
    kind = f"CASE substring({data} FROM {_literal(DROP_SUB_TYPE_DATA_PATTERN)}) {kinds} END"
    name = f"substring({data} FROM {_literal(DROP_NAME_DATA_PATTERN)})"
    levels = (
        f"replace(replace(substring({data} FROM {_literal(DROP_NAMESPACE_DATA_PATTERN)}),"
        f" '+', ' '), '{NAMESPACE_LEVEL_SEPARATOR}', '.')"
    )
    return (
        f"SELECT {kind} AS kind,"
        f" CASE WHEN d.levels = '' THEN d.name ELSE d.levels || '.' || d.name END AS ident"
        f" FROM (SELECT {name} AS name, {levels} AS levels WHERE {once}) d"
    )


def _drop_event_time(alias: str, entities: str, events: str) -> str:
    """The earliest drop event of parent task ``alias`` (``HoldView.drop_time``); NULL: none.

    The event's kind, identifier and catalog are worked out once per task, in a
    subquery kept apart by OFFSET 0 (else PostgreSQL would work them out again for
    each events row it scans), and reach the events scan as values: an index on
    (realm_id, resource_identifier) serves it where the operator made one (Polaris's
    schema has none: docs/operator-guide.md says the cost).
    """
    return (
        f"(SELECT (SELECT min(ev.timestamp_ms) FROM {events} ev"
        f" WHERE ev.realm_id = {alias}.realm_id AND ev.resource_identifier = k.ident"
        f" AND ev.event_type = k.kind AND ev.catalog_id = k.catalog"
        f" AND ev.timestamp_ms >= {alias}.create_timestamp - {DROP_EVENT_SLACK_MS})"
        f" FROM (SELECT d.kind, d.ident, {_catalog_name(alias, entities)} AS catalog"
        f" FROM ({drop_event_key(alias)}) d OFFSET 0) k)"
    )


def _parent_held(alias: str, now: str, hold_ms: str, entities: str, events: str | None) -> str:
    created = f"{alias}.create_timestamp"
    within = f"{now} < {created} + {hold_ms}"
    if events is not None:
        # No event counts from before ``created - slack``: within that much of the
        # hold the task is held whatever the events say, and none is read.
        drop_time = f"COALESCE({_drop_event_time(alias, entities, events)}, {created})"
        within = (
            f"({now} < {created} - {DROP_EVENT_SLACK_MS} + {hold_ms}"
            f" OR {now} < {drop_time} + {hold_ms})"
        )
    return (
        f"(COALESCE({alias}.properties->>'{Prop.TASK_TYPE}' = '1', FALSE)"
        f" AND {hold_ms} > 0 AND {within})"
    )


def held(
    now: str,
    entities: str,
    realm_hold: str,
    catalogs: Sequence[tuple[str, str]],
    events: str | None,
) -> str:
    """Row ``e`` is held at ``now`` (``tasks.hold.HoldView.held_until_ms``).

    A parent within its hold, or a child (MANIFEST/BATCH named after its parent) whose parent
    row exists and is held: one probe of Polaris's unique name index. ``realm_hold`` is per
    row's realm (a child shares its parent's). ``events`` None: no events table (drop time is
    the task's creation).
    """
    parent_hold = _hold_ms("p", entities, realm_hold, catalogs)
    child = (
        f"(COALESCE(e.properties->>'{Prop.TASK_TYPE}' IN ('2', '3'), FALSE)"
        f" AND e.name ~ {_literal(CHILD_NAME_PATTERN)}"
        f" AND EXISTS (SELECT 1 FROM {entities} p WHERE p.realm_id = e.realm_id"
        f" AND {task_rows('p')}"
        f" AND p.name = substring(e.name FROM {_literal(CHILD_NAME_PATTERN)})"
        f" AND {_parent_held('p', now, parent_hold, entities, events)}))"
    )
    own_hold = _hold_ms("e", entities, realm_hold, catalogs)
    own = _parent_held("e", now, own_hold, entities, events)
    return f"({own} OR {child})"


# No ":<word>" in the drop event's literals either (see UNHANDLED).
if re.search(r"(?<![:\w]):\w", _drop_event_time("e", "x", "y")):
    raise RuntimeError("predicates._drop_event_time contains ':<word>': reword the pattern")


def state_case(
    now: str, timeout: str, grace: str, max_attempts: str, on_hold: str | None = None
) -> str:
    """A CASE expression giving the TaskState value of row ``e`` at ``now``.

    ``timeout`` and ``grace`` may be per-realm expressions (``per_realm``);
    ``on_hold`` the hold rule (``held``), None when no realm or catalog has a hold.
    """
    dead = f"COALESCE(e.properties->>'{Prop.STATUS}' = '{STATUS_DEAD}', FALSE)"
    held = f"({EXECUTOR} IS NOT NULL AND {_lease_live(now, timeout)})"
    backing_off = f"COALESCE({NEXT} > {now}, FALSE)"
    pending = (
        f"({EXECUTOR} IS NULL AND COALESCE(e.properties->>'{Prop.CREATED_BY}', '') <> '{CREATOR}'"
        f" AND {now} - e.create_timestamp < {grace})"
    )
    return (
        f"CASE WHEN {UNHANDLED} THEN 'unhandled'"
        f" WHEN {dead} THEN 'dead' WHEN {held} THEN 'leased'"
        f" WHEN {ATTEMPTS} >= {max_attempts} THEN 'dead'"
        f" WHEN {backing_off} THEN 'backing-off'"
        + (f" WHEN {on_hold} THEN 'held'" if on_hold is not None else "")
        + f" WHEN {pending} THEN 'pending'"
        " ELSE 'orphaned' END"
    )
