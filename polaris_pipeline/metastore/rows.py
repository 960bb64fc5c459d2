"""Rows of ``entities`` as ``TaskRow``s: decoded from the database, and as a write leaves them.

``Lease.from_row`` reads the lease a write recorded from the row that write left
(``after_write``, ``inserted``), so a lease is never assembled field by field.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from polaris_pipeline.tasks.model import TASK_TYPE_CODE, NewTask, TaskRow, parse_properties


def decode_row(row: Any) -> TaskRow:
    """A TaskRow from a database row; undecodable properties become properties_error."""
    props: dict[str, str] = {}
    internal: dict[str, str] = {}
    error: str | None = None
    try:
        props = parse_properties(row.properties, column="properties")
    except ValueError as exc:
        error = str(exc)
    try:
        internal = parse_properties(row.internal_properties, column="internal_properties")
    except ValueError as exc:
        error = error or str(exc)
    return TaskRow(
        realm_id=row.realm_id,
        id=int(row.id),
        name=row.name,
        entity_version=int(row.entity_version),
        grant_records_version=int(row.grant_records_version),
        create_timestamp=int(row.create_timestamp),
        last_update_timestamp=int(row.last_update_timestamp),
        properties=props,
        internal_properties=internal,
        properties_error=error,
        catalog_id=int(row.catalog_id),
        parent_id=int(row.parent_id),
    )


def raw_text(value: Any) -> str:
    """A ``properties`` column's value as text, whatever the driver returned."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return json.dumps(value)


def after_write(task: TaskRow, properties: dict[str, str], now_ms: int) -> TaskRow:
    """``task`` as Polaris's compare-and-set (``queries.CAS_WRITE``) leaves it."""
    return dataclasses.replace(
        task,
        properties=properties,
        properties_error=None,
        entity_version=task.entity_version + 1,
        last_update_timestamp=now_ms,
    )


def inserted(task: NewTask, properties: dict[str, str], now_ms: int) -> TaskRow:
    """The row ``queries.INSERT_TASKS`` writes for ``task`` (created at ``now_ms`` unless set)."""
    created = task.create_timestamp if task.create_timestamp is not None else now_ms
    return TaskRow(
        realm_id=task.realm_id,
        id=task.id,
        name=task.name,
        entity_version=1,
        grant_records_version=1,
        create_timestamp=created,
        last_update_timestamp=created,
        properties=properties,
        internal_properties=dict(task.internal_properties),
    )


def insert_values(row: TaskRow) -> dict[str, Any]:
    """Every ``entities`` column of a task row, for ``queries.INSERT_TASKS``."""
    return {
        "realm_id": row.realm_id,
        "catalog_id": row.catalog_id,
        "id": row.id,
        "parent_id": row.parent_id,
        "name": row.name,
        "entity_version": row.entity_version,
        "type_code": TASK_TYPE_CODE,
        "sub_type_code": 0,
        "create_timestamp": row.create_timestamp,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": row.last_update_timestamp,
        "properties": row.properties,
        "internal_properties": row.internal_properties,
        "grant_records_version": row.grant_records_version,
    }
