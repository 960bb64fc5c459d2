"""Best effort: who dropped a leaked root's table and when, from Polaris's ``events`` table.

Polaris's persistence event listener (schema v3+, when enabled) records a drop as
an event whose type names ``DROP_TABLE`` (or ``DROP_VIEW``), with the principal
and the time. The event names the table, not its location, so a root is matched
to an event by its table uuid when the event's properties carry it, else by the
root's last path segment (a default location is ``<namespace>/<table name>``)
being the identifier's last part, and the event not older than the root's
newest metadata. No events table, no listener, no match: nothing is said.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sqlalchemy import Engine, or_, select
from sqlalchemy.exc import DBAPIError, OperationalError

from polaris_pipeline.metastore.ddl import EVENTS_SINCE_SCHEMA_VERSION
from polaris_pipeline.metastore.schema import events

_DROP_TYPES = ("%DROP_TABLE%", "%DROP_VIEW%")
_IDENTIFIER_PARTS = re.compile(r"[.\x1f/]")


@dataclass(frozen=True)
class DropEvent:
    principal: str | None
    timestamp_ms: int
    name: str  # the identifier's last part
    text: str  # the event's properties as text, searched for a uuid


class DropEvents:
    """The drop events of each realm, read once per realm (drops are few)."""

    def __init__(self, engine: Engine, schema_version: int | None) -> None:
        self.engine = engine
        self.available = (schema_version or 0) >= EVENTS_SINCE_SCHEMA_VERSION
        self._by_realm: dict[str, list[DropEvent]] = {}

    def _read(self, realm_id: str) -> list[DropEvent]:
        c = events.c
        stmt = select(
            c.principal_name, c.timestamp_ms, c.resource_identifier, c.additional_properties
        ).where(c.realm_id == realm_id, or_(*(c.event_type.like(t) for t in _DROP_TYPES)))
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(stmt.order_by(c.timestamp_ms)).all()
        except (OperationalError, DBAPIError):
            return []  # best effort: a missing or foreign events table says nothing
        found = []
        for r in rows:
            props = r.additional_properties
            text = props if isinstance(props, str) else json.dumps(props or {})
            name = _IDENTIFIER_PARTS.split(str(r.resource_identifier or ""))[-1]
            found.append(DropEvent(r.principal_name, int(r.timestamp_ms), name, text))
        return found

    def find(
        self, realm_id: str, root_name: str, uuid: str | None, updated_ms: int | None
    ) -> DropEvent | None:
        """The drop event of the root named ``root_name`` (its last segment), if any."""
        if not self.available:
            return None
        if realm_id not in self._by_realm:
            self._by_realm[realm_id] = self._read(realm_id)
        candidates = self._by_realm[realm_id]
        if uuid:
            by_uuid = [e for e in candidates if uuid in e.text]
            if by_uuid:
                return by_uuid[-1]
        by_name = [
            e
            for e in candidates
            if e.name == root_name and (updated_ms is None or e.timestamp_ms >= updated_ms)
        ]
        return by_name[0] if by_name else None
