"""Best effort: who dropped a leaked root's table and when, from Polaris's ``events`` table.

What Polaris 1.6/1.7 writes with its persistence listener on (read at the release tags:
``PolarisPersistenceEventListener``, ``IcebergRestCatalogEventServiceDelegator``,
``EventAttributes``, ``PolarisEventType``, ``schema-v3.sql``..``-v5``, ``ModelEvent``):

- a successful drop writes ``AFTER_DROP_TABLE`` / ``AFTER_DROP_VIEW``; ``BEFORE_DROP_*``
  is written for failed drops too, so it proves nothing and is not read;
- ``catalog_id`` holds the catalog's *name*;
- ``resource_identifier`` is ``TableIdentifier.of(namespace, name)``: levels and name
  joined by ``.``;
- ``additional_properties``: string attributes (``catalog_name``, ``namespace``,
  ``table_name`` or ``view_name``, ``purge_requested``) plus OpenTelemetry keys; no
  table uuid to match by;
- ``principal_name`` (null without one); ``timestamp_ms`` after the drop.

A root matches its realm's and catalog's drops named as its last segment, made no earlier
than its newest metadata's last update (earlier drops were another table's); an event
whose namespace levels are the segments before is preferred, then the earliest. Table
roots take table drops, view roots view drops. Nothing found: nothing said. Before 1.6
no drop is persisted (1.2-1.5 wrote only ``AFTER_CREATE_TABLE``/``_CATALOG``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.exc import DBAPIError, OperationalError

from polaris_pipeline.metastore.ddl import EVENTS_SINCE_SCHEMA_VERSION
from polaris_pipeline.metastore.overlap import json_object
from polaris_pipeline.metastore.schema import events
from polaris_pipeline.tasks.model import DROP_TABLE_EVENT, DROP_VIEW_EVENT

# The leak walk's root kind (``leaks/metadata.py``) each event type can be.
_KINDS = {DROP_TABLE_EVENT: ("table", "unknown"), DROP_VIEW_EVENT: ("view", "unknown")}
_NAME_KEYS = {DROP_TABLE_EVENT: "table_name", DROP_VIEW_EVENT: "view_name"}


@dataclass(frozen=True)
class DropEvent:
    principal: str | None
    timestamp_ms: int
    catalog: str | None
    event_type: str
    name: str  # the table's or view's name
    namespace: tuple[str, ...]  # its namespace levels, as far as they could be told


def drop_event(
    event_type: str,
    catalog: str | None,
    principal: str | None,
    timestamp_ms: int,
    identifier: str,
    properties: object,
) -> DropEvent:
    """One events row as a :class:`DropEvent`: the name and namespace from the
    attributes Polaris stores, else from the rendered identifier."""
    props = json_object(properties) or {}
    name = props.get(_NAME_KEYS.get(event_type, ""))
    namespace = props.get("namespace")
    if isinstance(name, str) and name:
        levels = namespace.split(".") if isinstance(namespace, str) and namespace else []
    else:
        # ``ns1.ns2.name``: a name with a dot in it is told apart only by the attributes.
        *levels, name = identifier.split(".")
    return DropEvent(principal, timestamp_ms, catalog, event_type, name, tuple(levels))


class DropEvents:
    """The drop events of each realm, read once per realm (drops are few)."""

    def __init__(self, engine: Engine, schema_version: int | None) -> None:
        self.engine = engine
        self.available = (schema_version or 0) >= EVENTS_SINCE_SCHEMA_VERSION
        self._by_realm: dict[str, list[DropEvent]] = {}

    def _read(self, realm_id: str) -> list[DropEvent]:
        c = events.c
        stmt = select(
            c.event_type,
            c.catalog_id,
            c.principal_name,
            c.timestamp_ms,
            c.resource_identifier,
            c.additional_properties,
        ).where(c.realm_id == realm_id, c.event_type.in_(list(_KINDS)))
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(stmt.order_by(c.timestamp_ms)).all()
        except (OperationalError, DBAPIError):
            return []  # best effort: a missing or foreign events table says nothing
        return [
            drop_event(
                r.event_type,
                r.catalog_id,
                r.principal_name,
                int(r.timestamp_ms),
                str(r.resource_identifier or ""),
                r.additional_properties,
            )
            for r in rows
        ]

    def find(
        self,
        realm_id: str,
        catalog: str,
        segments: Sequence[str],
        kind: str,
        updated_ms: int | None,
    ) -> DropEvent | None:
        """The drop event of the root of ``kind`` at path ``segments`` in ``catalog``, if any."""
        if not self.available or not segments:
            return None
        if realm_id not in self._by_realm:
            self._by_realm[realm_id] = self._read(realm_id)
        name, before = segments[-1], tuple(segments[:-1])
        candidates = [
            e
            for e in self._by_realm[realm_id]
            if e.catalog == catalog
            and e.name == name
            and kind in _KINDS[e.event_type]
            and (updated_ms is None or e.timestamp_ms >= updated_ms)
        ]
        placed = [
            e for e in candidates if e.namespace and before[-len(e.namespace) :] == e.namespace
        ]
        found = placed or candidates
        return found[0] if found else None
