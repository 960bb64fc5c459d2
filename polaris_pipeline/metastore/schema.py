"""Polaris's ``entities`` and ``version`` tables, as SQLAlchemy Core tables.

The statements use these; creating a metastore uses ``ddl`` (Polaris's whole
schema of a chosen version), and these tables only describe what is queried.

PostgreSQL keeps them in schema ``polaris_schema`` with JSONB properties;
SQLite (the embedded default) has no schemas and stores the JSON as text. One
``MetaData`` serves both through a schema translate map.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Dialect,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    inspect,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.types import TypeDecorator, TypeEngine

from polaris_pipeline.errors import MetastoreError, SchemaMismatchError
from polaris_pipeline.metastore import ddl
from polaris_pipeline.metastore.ddl import LATEST_SCHEMA_VERSION

POLARIS_SCHEMA = "polaris_schema"


class PropertiesJSON(TypeDecorator[Any]):
    """JSONB on PostgreSQL, text elsewhere.

    Results come back raw (a decoded object from JSONB, the text from SQLite)
    so that a malformed value reaches the task model, which reports it on
    that task instead of failing a whole query.
    """

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql" or isinstance(value, str):
            return value
        import json

        return json.dumps(value, separators=(",", ":"))

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return value


metadata = MetaData()

entities = Table(
    "entities",
    metadata,
    Column("realm_id", Text, nullable=False),
    Column("catalog_id", BigInteger, nullable=False),
    Column("id", BigInteger, nullable=False),
    Column("parent_id", BigInteger, nullable=False),
    Column("name", Text, nullable=False),
    Column("entity_version", Integer, nullable=False),
    Column("type_code", Integer, nullable=False),
    Column("sub_type_code", Integer, nullable=False),
    Column("create_timestamp", BigInteger, nullable=False),
    Column("drop_timestamp", BigInteger, nullable=False),
    Column("purge_timestamp", BigInteger, nullable=False),
    Column("to_purge_timestamp", BigInteger, nullable=False),
    Column("last_update_timestamp", BigInteger, nullable=False),
    Column("properties", PropertiesJSON, nullable=False),
    Column("internal_properties", PropertiesJSON, nullable=False),
    Column("grant_records_version", Integer, nullable=False),
    # Schema v2 and later; never read or written, so v1 databases work unchanged.
    Column("location_without_scheme", Text, nullable=True),
    PrimaryKeyConstraint("realm_id", "id"),
    UniqueConstraint(
        "realm_id", "catalog_id", "parent_id", "type_code", "name", name="constraint_name"
    ),
    schema=POLARIS_SCHEMA,
)

# Polaris's audit events (schema v3+). Its own MetaData: ``create_schema`` writes
# Polaris's DDL for it (ddl.py), never ``create_all``.
_events_metadata = MetaData()

events = Table(
    "events",
    _events_metadata,
    Column("realm_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=True),
    Column("event_id", Text, primary_key=True),
    Column("request_id", Text, nullable=True),
    Column("event_type", Text, nullable=False),
    Column("timestamp_ms", BigInteger, nullable=False),
    Column("principal_name", Text, nullable=True),
    Column("resource_type", Text, nullable=False),
    Column("resource_identifier", Text, nullable=False),
    Column("additional_properties", PropertiesJSON, nullable=False),
    schema=POLARIS_SCHEMA,
)

version = Table(
    "version",
    metadata,
    Column("version_key", Text, primary_key=True),
    Column("version_value", Integer, nullable=False),
    schema=POLARIS_SCHEMA,
)

# Column -> accepted type families, as the dialects reflect them.
_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "realm_id": ("TEXT", "VARCHAR", "CHAR"),
    "catalog_id": ("BIGINT", "INTEGER"),
    "id": ("BIGINT", "INTEGER"),
    "parent_id": ("BIGINT", "INTEGER"),
    "name": ("TEXT", "VARCHAR", "CHAR"),
    "entity_version": ("INTEGER", "BIGINT"),
    "type_code": ("INTEGER", "BIGINT"),
    "sub_type_code": ("INTEGER", "BIGINT"),
    "create_timestamp": ("BIGINT", "INTEGER"),
    "drop_timestamp": ("BIGINT", "INTEGER"),
    "purge_timestamp": ("BIGINT", "INTEGER"),
    "to_purge_timestamp": ("BIGINT", "INTEGER"),
    "last_update_timestamp": ("BIGINT", "INTEGER"),
    "properties": ("JSONB", "JSON", "TEXT", "VARCHAR", "CLOB"),
    "internal_properties": ("JSONB", "JSON", "TEXT", "VARCHAR", "CLOB"),
    "grant_records_version": ("INTEGER", "BIGINT"),
}


def schema_name(dialect_name: str) -> str | None:
    return POLARIS_SCHEMA if dialect_name == "postgresql" else None


def check_entities_shape(conn: Connection) -> bool:
    """True when ``entities`` exists with Polaris's shape, False when it is absent.

    Raises SchemaMismatchError naming every difference when it exists with
    another shape, so no command ever writes into a foreign table.
    """
    schema = schema_name(conn.dialect.name)
    inspector = inspect(conn)
    if not inspector.has_table("entities", schema=schema):
        return False
    found = {
        c["name"].lower(): str(c["type"]).upper()
        for c in inspector.get_columns("entities", schema=schema)
    }
    problems: list[str] = []
    for column, families in _REQUIRED_COLUMNS.items():
        if column not in found:
            problems.append(f"missing column {column}")
        elif not any(found[column].startswith(f) for f in families):
            problems.append(f"column {column} is {found[column]}, expected {families[0]}")
    pk = inspector.get_pk_constraint("entities", schema=schema).get("constrained_columns") or []
    if [c.lower() for c in pk] != ["realm_id", "id"]:
        problems.append(f"primary key is {pk}, expected ['realm_id', 'id']")
    if problems:
        where = f"{schema}.entities" if schema else "entities"
        raise SchemaMismatchError(
            f"{where} exists but is not Polaris's entities table: " + "; ".join(problems)
        )
    return True


def create_schema(conn: Connection, schema_version: int = LATEST_SCHEMA_VERSION) -> bool:
    """Create Polaris's tables of ``schema_version``; return False if ``entities`` existed.

    Every table, key and index Polaris's own DDL of that version creates (see
    ``ddl``), and the version row, so a Polaris server of that version can start
    on the database. An existing Polaris ``entities`` table means the database is
    someone's metastore already: nothing is created or changed, not even the
    version row. A foreign ``entities`` table is refused (SchemaMismatchError).
    """
    ddl.check_version(schema_version)
    if check_entities_shape(conn):
        return False
    schema = schema_name(conn.dialect.name)
    if schema:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    for statement in ddl.create_statements(schema_version, conn.dialect.name, schema):
        conn.exec_driver_sql(statement)
    conn.execute(text(ddl.version_row_statement(schema)), {"version": schema_version})
    return True


def read_schema_version(conn: Connection) -> int | None:
    schema = schema_name(conn.dialect.name)
    if not inspect(conn).has_table("version", schema=schema):
        return None
    row = conn.execute(version.select().where(version.c.version_key == "version")).first()
    return int(row.version_value) if row is not None else None


def require_schema(conn: Connection, url_for_humans: str) -> None:
    if not check_entities_shape(conn):
        schema = schema_name(conn.dialect.name)
        if schema:
            # PostgreSQL is where a real Polaris lives: its server creates the tables, so
            # the hint is about where we looked, never to create them here.
            raise MetastoreError(
                f"no Polaris entities table {schema}.entities in {url_for_humans}: point "
                "--metastore at the database Polaris's JDBC persistence uses, as a role "
                f"granted USAGE on schema {schema}"
            )
        raise MetastoreError(
            f"no Polaris entities table in {url_for_humans}: point --metastore at Polaris's "
            "database, or for a scratch SQLite file run `polaris-pipeline init-metastore`"
        )
