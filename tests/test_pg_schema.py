"""A PostgreSQL ``metastore`` is fresh for every test: the last test's schema emptied when
only its rows changed, created again when anything else of it did (tests/support/pg_schema.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from tests.support.pg_schema import fresh_polaris_schema


def _one(url: str, sql: str) -> object:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            result = conn.execute(text(sql))
            return result.scalar() if result.returns_rows else None
    finally:
        engine.dispose()


def _catalog(url: str) -> list[str]:
    """What pg_dump would write of the schema but the rows: its tables' columns and
    indexes, and which relations it holds."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            columns = conn.execute(
                text(
                    "SELECT table_name || '.' || column_name || ' ' || data_type "
                    "FROM information_schema.columns WHERE table_schema = 'polaris_schema'"
                )
            )
            indexes = conn.execute(
                text("SELECT indexdef FROM pg_indexes WHERE schemaname = 'polaris_schema'")
            )
            return sorted([r[0] for r in columns] + [r[0] for r in indexes])
    finally:
        engine.dispose()


ENTITIES_OID = "SELECT 'polaris_schema.entities'::regclass::oid"


def test_only_rows_changed_the_tables_are_emptied_and_kept(pg_database: str) -> None:
    fresh_polaris_schema(pg_database)
    created = _catalog(pg_database)
    oid = _one(pg_database, ENTITIES_OID)
    store = Metastore(pg_database)
    store.insert_tasks([batch_task("r", ["file:///wh/t/1.avro"])])
    store.dispose()
    assert _one(pg_database, "SELECT count(*) FROM polaris_schema.entities") == 1

    fresh_polaris_schema(pg_database)
    assert _one(pg_database, "SELECT count(*) FROM polaris_schema.entities") == 0
    assert _one(pg_database, "SELECT count(*) FROM polaris_schema.version") == 1
    assert _one(pg_database, ENTITIES_OID) == oid  # emptied, not created again
    assert _catalog(pg_database) == created


@pytest.mark.parametrize(
    "change",
    [
        "CREATE INDEX pp_extra ON polaris_schema.entities (id)",
        "ALTER TABLE polaris_schema.entities ADD COLUMN pp_extra INTEGER",
        "ALTER TABLE polaris_schema.events RENAME COLUMN resource_identifier TO renamed",
        "DROP TABLE polaris_schema.events",
        "UPDATE polaris_schema.version SET version_value = 1",
        "GRANT SELECT ON polaris_schema.entities TO PUBLIC",
        "ALTER TABLE polaris_schema.entities ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY pp_extra ON polaris_schema.entities USING (true)",
        "CREATE VIEW public.pp_extra AS SELECT id FROM polaris_schema.entities",
    ],
)
def test_anything_else_changed_the_schema_is_created_again(pg_database: str, change: str) -> None:
    fresh_polaris_schema(pg_database)
    created = _catalog(pg_database)
    version = _one(pg_database, "SELECT version_value FROM polaris_schema.version")
    oid = _one(pg_database, ENTITIES_OID)
    _one(pg_database, change)

    fresh_polaris_schema(pg_database)
    assert _one(pg_database, ENTITIES_OID) != oid  # created again
    assert _catalog(pg_database) == created
    assert _one(pg_database, "SELECT version_value FROM polaris_schema.version") == version
    entities = "'polaris_schema.entities'::regclass"
    assert _one(pg_database, f"SELECT relrowsecurity FROM pg_class WHERE oid = {entities}") is False
    assert _one(pg_database, f"SELECT count(*) FROM pg_policy WHERE polrelid = {entities}") == 0
    assert _one(pg_database, "SELECT to_regclass('public.pp_extra')") is None
    granted = f"SELECT has_table_privilege('public', {entities}, 'SELECT')"
    assert _one(pg_database, granted) is False
