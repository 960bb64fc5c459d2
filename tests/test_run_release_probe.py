"""A run's steps read the schema version and the realm's release once, as a sweep does:
a small table's run has seven steps, and each used to read them again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dagster import DagsterInstance
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from builders import tasks as built_tasks
from builders.tables import build_table
from polaris_pipeline.metastore import Metastore
from tests.support.dagster import run_task_job
from tests.support.iceberg import Warehouse

OLD_MS = 3_600_000


@contextmanager
def version_reads(store: Metastore) -> Iterator[list[str]]:
    """The statements that read the schema's version row of ``store``'s database, on any
    engine (the run's resource opens its own)."""
    seen: list[str] = []
    url = store.engine.url.render_as_string(hide_password=False)

    def before(conn: Connection, cursor: object, statement: str, *args: object) -> None:
        same = conn.engine.url.render_as_string(hide_password=False) == url
        if same and "version_key" in statement and statement.lstrip().startswith("SELECT"):
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", before)


def test_a_tables_run_reads_the_schema_version_once_and_the_next_run_again(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    for name in ("first", "second"):
        table = build_table(local_warehouse.catalog, ("ns", name), appends=1)
        task = built_tasks.drop_table_task(
            table, realm_id="POLARIS", create_timestamp=metastore.now_ms() - OLD_MS
        )
        metastore.insert_tasks([task])
        with version_reads(metastore) as reads:
            result = run_task_job(metastore, instance, task.id, [local_warehouse.uri])
        assert result.success
        steps = {e.step_key for e in result.all_events if e.is_step_success}
        # Root, children, gates and the finish: many steps, one reading (a new run
        # reads again, so an upgraded Polaris is seen at the next run).
        assert len(steps) >= 5, steps
        assert len(reads) == 1, reads
