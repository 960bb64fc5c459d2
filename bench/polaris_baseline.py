"""Polaris's ``loadTasks`` over plain psycopg: the lean form of the lease baseline.

The same algorithm as ``builders/polaris_leaser.polaris_load_tasks`` (list
the realm's tasks, then one compare-and-set UPDATE per available task, each in
its own transaction, a lost CAS skipped; Polaris's local clock; no grace
period, backoff or dead-letter state), without SQLAlchemy: no statement
compilation, no pool pre-ping. Its client costs per task are closer to a Java
server's than the SQLAlchemy model's, so the lease benchmark's ratio against it
is the conservative one.
"""

from __future__ import annotations

import json
import time
from typing import Any

from polaris_pipeline.tasks.model import TASK_TYPE_CODE, Prop

LIST_SQL = (
    "SELECT id, entity_version, grant_records_version, properties "
    "FROM polaris_schema.entities WHERE realm_id = %s AND type_code = %s"
)
CAS_SQL = (
    "UPDATE polaris_schema.entities "
    "SET properties = %s::jsonb, entity_version = %s, last_update_timestamp = %s "
    "WHERE realm_id = %s AND id = %s AND entity_version = %s AND grant_records_version = %s"
)


def load_tasks(
    conn: Any, realm_id: str, executor_id: str, limit: int, timeout_ms: int = 300_000
) -> list[tuple[int, int]]:
    """Lease up to ``limit`` tasks of one realm on a psycopg connection (not autocommit)."""
    now = int(time.time() * 1000)
    rows = conn.execute(LIST_SQL, (realm_id, TASK_TYPE_CODE)).fetchall()
    conn.rollback()
    leased: list[tuple[int, int]] = []
    for task_id, version, grants, raw in rows:
        if len(leased) >= limit:
            break
        props = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(props, dict):
            continue
        executor = props.get(Prop.EXECUTOR)
        start = int(props.get(Prop.START_TIME) or 0)
        if executor and now - start <= timeout_ms:
            continue
        attempt = int(props.get(Prop.ATTEMPT_COUNT) or 0) + 1
        props[Prop.EXECUTOR] = executor_id
        props[Prop.START_TIME] = str(now)
        props[Prop.ATTEMPT_COUNT] = str(attempt)
        cur = conn.execute(
            CAS_SQL,
            (json.dumps(props), version + 1, now, realm_id, task_id, version, grants),
        )
        won = cur.rowcount == 1
        conn.commit()
        if won:
            leased.append((int(task_id), attempt))
    return leased
