"""Task attempt events in Polaris's ``events`` table, as Polaris's own listener writes them.

Polaris 1.7: ``TaskExecutorImpl.handleTask`` emits BEFORE_/AFTER_ATTEMPT_TASK (category
TASK_EXECUTION) with ``task_entity_id``, ``task_attempt`` and, after, ``task_success``;
``PolarisPersistenceEventListener`` maps it to resource type REALM, the event type's name
as identifier, a null catalog, and the ``otel.*`` context then every attribute, as
strings, in ``additional_properties``; ``ModelEvent.fromEvent`` stores a null catalog as
``__realm__`` below schema v5 (NOT NULL there); ``JdbcBasePersistenceImpl.writeEvents``
adds the realm; event ids are random UUIDs. Request id and principal come from the
HTTP request, which a sweeper lacks: null. Our extra ``task_executor_id`` key is harmless
(Polaris reads the JSON as Map<String, String>).

Best effort: a failure is logged, never reaches the attempt; nothing is written without
an ``events`` table. By release (``tasks/release.py``): before 1.6 none is written unless
the setting says ``always``; 1.6 writes catalog ``__realm__`` on any schema, 1.7+ below v5
only. Every row gets a fresh ``event_id`` (1.7's rows of one task share one, losing them).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from sqlalchemy.exc import SQLAlchemyError

from polaris_pipeline.metastore import queries
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.metastore.schema import has_events_table
from polaris_pipeline.metastore.store import Metastore
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.tasks.release import (
    ALWAYS,
    LEGACY_REALM_SCOPED_CATALOG_ID,
    TaskEvents,
    parse_task_events,
)

log = logging.getLogger("polaris_pipeline.events")

BEFORE_ATTEMPT_TASK = "BEFORE_ATTEMPT_TASK"
AFTER_ATTEMPT_TASK = "AFTER_ATTEMPT_TASK"

# EventAttributes.TASK_ENTITY_ID / TASK_ATTEMPT / TASK_SUCCESS.
TASK_ENTITY_ID = "task_entity_id"
TASK_ATTEMPT = "task_attempt"
TASK_SUCCESS = "task_success"
TASK_EXECUTOR_ID = "task_executor_id"  # ours


def attempt_properties(
    lease: Lease,
    executor_id: str,
    *,
    success: bool | None = None,
    otel_context: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``additional_properties`` of one event, in Polaris's order: trace context, then attributes.

    ``success`` None is the BEFORE event, which has no ``task_success``.
    Booleans are Java's ``Boolean.toString``: ``true`` / ``false``.
    """
    props = dict(otel_context or {})
    props[TASK_ENTITY_ID] = str(lease.task_id)
    props[TASK_ATTEMPT] = str(lease.attempt)
    if success is not None:
        props[TASK_SUCCESS] = "true" if success else "false"
    props[TASK_EXECUTOR_ID] = executor_id
    return props


def event_catalog(value: str | None) -> str | None:
    """An event row's ``catalog_id`` as Polaris reads it: ``__realm__`` is NULL."""
    return None if value in (None, LEGACY_REALM_SCOPED_CATALOG_ID) else value


class TaskEventWriter:
    """Writes attempt events into one metastore's ``events`` table, when it has one
    and the realm's Polaris release writes task events itself."""

    def __init__(
        self,
        metastore: Metastore,
        *,
        enabled: TaskEvents = False,
        releases: ReleaseProbe | None = None,
    ) -> None:
        """``enabled``: False, True (where the realm's release writes task events) or
        ``"always"``. ``releases``: the probe of the sweep or run (one per writer when
        None)."""
        self.metastore = metastore
        self.enabled = bool(enabled)
        self.any_release = parse_task_events(enabled) == ALWAYS
        self.releases = releases or ReleaseProbe(metastore)
        # None until probed: whether the database has an events table.
        self._has_table: bool | None = None
        self.failures = 0

    def _events_table(self) -> bool:
        if self._has_table is None:
            with self.metastore.engine.connect() as conn:
                self._has_table = has_events_table(conn)
        return self._has_table

    def write(self, lease: Lease, event_type: str, properties: Mapping[str, str]) -> bool:
        """Insert one event row; True if written. Never raises."""
        if not self.enabled:
            return False
        try:
            if not self._events_table():
                return False
            resolved = self.releases.resolve(lease.realm_id)
            if not (resolved.release.writes_task_events or self.any_release):
                return False  # that Polaris has no task events: audit tools expect none
            catalog_id = resolved.release.event_catalog_id(resolved.schema_version)
            with self.metastore.engine.begin() as conn:
                conn.execute(
                    queries.INSERT_EVENT.build(
                        conn.dialect.name,
                        lease.realm_id,
                        catalog_id,
                        str(uuid.uuid4()),
                        event_type,
                        dict(properties),
                    )
                )
            return True
        except Exception as exc:  # an audit row must never cost the attempt
            self.failures += 1
            reason = (
                self.metastore._describe(exc)
                if isinstance(exc, SQLAlchemyError)
                else f"{type(exc).__name__}: {exc}"
            )
            log.warning("%s event for %s not written: %s", event_type, lease.label, reason)
            return False

    def before(
        self, lease: Lease, executor_id: str, otel_context: Mapping[str, str] | None = None
    ) -> bool:
        return self.write(
            lease,
            BEFORE_ATTEMPT_TASK,
            attempt_properties(lease, executor_id, otel_context=otel_context),
        )

    def after(
        self,
        lease: Lease,
        executor_id: str,
        success: bool,
        otel_context: Mapping[str, str] | None = None,
    ) -> bool:
        return self.write(
            lease,
            AFTER_ATTEMPT_TASK,
            attempt_properties(lease, executor_id, success=success, otel_context=otel_context),
        )
