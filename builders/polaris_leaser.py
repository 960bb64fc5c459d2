"""A faithful model of Polaris's own lease algorithm (``loadTasks``), for tests and benchmarks.

Our own model, kept because no real Polaris can race us here: its server and its JDBC
persistence are not published to the registry this project installs from, so Polaris's own
``loadTasks`` runs only over its in-memory store (tests/test_polaris_classes.py checks there
the timeout boundary this model follows), never against a shared database.

List the tasks, then one compare-and-set UPDATE per available task, guarded on
(realm_id, id, entity_version, grant_records_version); a task lost to a
concurrent writer is skipped. Polaris uses its local clock and knows no grace
period, no backoff and no dead-letter state: exactly that is modelled here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Engine, select, update

from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.tasks.model import TASK_TYPE_CODE, Prop


def _props(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


def polaris_load_tasks(
    engine: Engine, realm_id: str, executor_id: str, limit: int, timeout_ms: int = 300_000
) -> list[tuple[int, int]]:
    """Lease up to ``limit`` tasks of one realm the way Polaris does; return (id, attempt) pairs."""
    now = int(time.time() * 1000)
    leased: list[tuple[int, int]] = []
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                entities.c.id,
                entities.c.entity_version,
                entities.c.grant_records_version,
                entities.c.properties,
            ).where(entities.c.realm_id == realm_id, entities.c.type_code == TASK_TYPE_CODE)
        ).all()
        conn.rollback()
    for row in rows:
        if len(leased) >= limit:
            break
        props = _props(row.properties)
        if props is None:
            continue
        executor = props.get(Prop.EXECUTOR)
        start = int(props.get(Prop.START_TIME) or 0)
        if executor and now - start <= timeout_ms:
            continue
        attempt = int(props.get(Prop.ATTEMPT_COUNT) or 0) + 1
        props.update(
            {
                Prop.EXECUTOR: executor_id,
                Prop.START_TIME: str(now),
                Prop.ATTEMPT_COUNT: str(attempt),
            }
        )
        with engine.begin() as conn:
            result = conn.execute(
                update(entities)
                .where(
                    entities.c.realm_id == realm_id,
                    entities.c.id == row.id,
                    entities.c.entity_version == row.entity_version,
                    entities.c.grant_records_version == row.grant_records_version,
                )
                .values(
                    properties=props,
                    entity_version=row.entity_version + 1,
                    last_update_timestamp=now,
                )
            )
        if result.rowcount == 1:
            leased.append((int(row.id), attempt))
    return leased


def polaris_batch_files(engine: Engine, realm_id: str, task_id: int) -> list[str] | None:
    """The batchFiles of a BATCH_FILE_CLEANUP task, read as Polaris's executor reads them
    after leasing; None if the row is gone (the caller decides whether that may happen)."""
    with engine.connect() as conn:
        raw = conn.execute(
            select(entities.c.properties).where(
                entities.c.realm_id == realm_id, entities.c.id == task_id
            )
        ).scalar_one_or_none()
    if raw is None:
        return None
    props = _props(raw) or {}
    files = json.loads(props.get(Prop.DATA, "{}")).get("batchFiles", [])
    return [str(f) for f in files]
