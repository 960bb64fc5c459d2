"""Task attempt events in Polaris's ``events`` table, as Polaris's own listener writes them.

Read from Polaris (1.7): ``TaskExecutorImpl.handleTask`` emits BEFORE_ATTEMPT_TASK
and AFTER_ATTEMPT_TASK (category TASK_EXECUTION) with the attributes
``task_entity_id``, ``task_attempt`` and, after, ``task_success``;
``PolarisPersistenceEventListener.onEvent`` maps the TASK_EXECUTION category to
resource type REALM, takes the event type's name as the resource identifier,
leaves the catalog null (no catalog attribute), and puts the OpenTelemetry
context (``otel.*``) and then every attribute, as strings, into
``additional_properties``; ``ModelEvent.fromEvent`` stores a null catalog as
``__realm__`` below schema v5, where the column is NOT NULL, and
``JdbcBasePersistenceImpl.writeEvents`` inserts the row with the realm. The
event id is a random UUID (``PolarisEventMetadata.eventId``); request id and
principal come from the HTTP request that created the task, which a sweeper
does not have, so they stay null.

Our one addition, ``task_executor_id``, is another string in the same JSON
object: Polaris reads ``additional_properties`` as a Map<String, String>
(``EventEntity.getAdditionalPropertiesAsMap``), so an extra key is harmless.

Writing an event is best effort: a failure is logged and never reaches the
attempt, and nothing is written to a database without an ``events`` table.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from sqlalchemy import inspect
from sqlalchemy.exc import SQLAlchemyError

from polaris_pipeline.metastore import queries
from polaris_pipeline.metastore.schema import read_schema_version, schema_name
from polaris_pipeline.metastore.store import Metastore
from polaris_pipeline.tasks.ref import Lease

log = logging.getLogger("polaris_pipeline.events")

BEFORE_ATTEMPT_TASK = "BEFORE_ATTEMPT_TASK"
AFTER_ATTEMPT_TASK = "AFTER_ATTEMPT_TASK"
# ModelEvent.LEGACY_REALM_SCOPED_CATALOG_ID: the catalog of a realm-scoped event below v5.
LEGACY_REALM_SCOPED_CATALOG_ID = "__realm__"
NULL_CATALOG_SINCE_SCHEMA_VERSION = 5

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


class TaskEventWriter:
    """Writes attempt events into one metastore's ``events`` table, when it has one."""

    def __init__(self, metastore: Metastore, *, enabled: bool = False) -> None:
        self.metastore = metastore
        self.enabled = enabled
        # None until probed: (has an events table, the catalog_id to write).
        self._target: tuple[bool, str | None] | None = None
        self.failures = 0

    def _probe(self) -> tuple[bool, str | None]:
        if self._target is None:
            with self.metastore.engine.connect() as conn:
                schema = schema_name(conn.dialect.name)
                if not inspect(conn).has_table("events", schema=schema):
                    target: tuple[bool, str | None] = (False, None)
                else:
                    version = read_schema_version(conn)
                    # No version row: the sentinel is safe on every version, since
                    # Polaris reads it back as null whatever the schema.
                    null_catalog = (
                        version is not None and version >= NULL_CATALOG_SINCE_SCHEMA_VERSION
                    )
                    target = (True, None if null_catalog else LEGACY_REALM_SCOPED_CATALOG_ID)
            self._target = target
        return self._target

    def write(self, lease: Lease, event_type: str, properties: Mapping[str, str]) -> bool:
        """Insert one event row; True if written. Never raises."""
        if not self.enabled:
            return False
        try:
            available, catalog_id = self._probe()
            if not available:
                return False
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
