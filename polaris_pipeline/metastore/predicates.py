"""The task-state rule of ``tasks.model.TaskRow.state`` written as PostgreSQL SQL.

Used where the rule must run inside the database: the one-statement batch
lease and the per-state counts. ``tests/test_metastore.py`` checks that this
SQL and the Python rule classify the same rows the same way.
"""

from __future__ import annotations

from polaris_pipeline.tasks.model import (
    CREATOR,
    INTEGER_PATTERN,
    STATUS_DEAD,
    TASK_TYPE_CODE,
    Prop,
)

# Tasks always have catalog_id = 0 and parent_id = 0; saying so lets PostgreSQL
# use Polaris's unique index (realm_id, catalog_id, parent_id, type_code, name)
# instead of scanning every entity of the realm.
TASK_ROWS = f"e.type_code = {TASK_TYPE_CODE} AND e.catalog_id = 0 AND e.parent_id = 0"


def _num(key: str) -> str:
    return (
        f"(CASE WHEN e.properties->>'{key}' ~ '^{INTEGER_PATTERN}$' "
        f"THEN CAST(e.properties->>'{key}' AS BIGINT) END)"
    )


EXECUTOR = f"NULLIF(e.properties->>'{Prop.EXECUTOR}', '')"
START = _num(Prop.START_TIME)
END = _num(Prop.END_TIME)
NEXT = _num(Prop.NEXT_ATTEMPT)
ATTEMPTS = f"GREATEST(COALESCE({_num(Prop.ATTEMPT_COUNT)}, 0), 0)"


def state_case(now: str, timeout: str, grace: str, max_attempts: str) -> str:
    """A CASE expression giving the TaskState value of row ``e`` at ``now``."""
    dead = f"COALESCE(e.properties->>'{Prop.STATUS}' = '{STATUS_DEAD}', FALSE)"
    held = (
        f"({EXECUTOR} IS NOT NULL AND {START} IS NOT NULL AND {now} - {START} <= {timeout}"
        f" AND NOT COALESCE({END} >= {START}, FALSE))"
    )
    backing_off = f"COALESCE({NEXT} > {now}, FALSE)"
    pending = (
        f"({EXECUTOR} IS NULL AND COALESCE(e.properties->>'{Prop.CREATED_BY}', '') <> '{CREATOR}'"
        f" AND {now} - e.create_timestamp < {grace})"
    )
    return (
        f"CASE WHEN {dead} THEN 'dead' WHEN {held} THEN 'leased'"
        f" WHEN {ATTEMPTS} >= {max_attempts} THEN 'dead'"
        f" WHEN {backing_off} THEN 'backing-off' WHEN {pending} THEN 'pending'"
        " ELSE 'orphaned' END"
    )
