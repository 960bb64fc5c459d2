"""Polaris's ``entities`` and ``version`` tables, as SQLAlchemy Core tables to query.

Creating a metastore uses ``ddl``. PostgreSQL keeps them in schema ``polaris_schema``
with JSONB; SQLite has no schemas and stores JSON as text: one ``MetaData`` serves both
through a schema translate map.
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
# Why a Polaris on NoSQL persistence (MongoDB, 1.4+) is refused rather than guessed at
# (docs/polaris-releases.md): what any message about such a metastore says.
NOSQL_UNSUPPORTED = (
    "Polaris's NoSQL persistence (MongoDB) cannot be leased from outside: its tasks are "
    "binary objects with no row to compare-and-set, and its own loadTasks stores no lease"
)


class PropertiesJSON(TypeDecorator[Any]):
    """JSONB on PostgreSQL, text elsewhere; results come back raw, so a malformed value reaches
    the task model, which reports it on that task instead of failing a whole query.
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


# Each ddl type: its SQLAlchemy type, and the type families the dialects reflect it as
# (the first is the one an error names).
_TYPES: dict[str, tuple[type[TypeEngine[Any]], tuple[str, ...]]] = {
    "TEXT": (Text, ("TEXT", "VARCHAR", "CHAR")),
    "BIGINT": (BigInteger, ("BIGINT", "INTEGER")),
    "INT": (Integer, ("INTEGER", "BIGINT")),
    "INTEGER": (Integer, ("INTEGER", "BIGINT")),
    ddl.JSON: (PropertiesJSON, ("JSONB", "JSON", "TEXT", "VARCHAR", "CLOB")),
}

metadata = MetaData()


def _table(definition: ddl.TableDef) -> Table:
    """A table of ``ddl``'s latest schema, for the statements (``create_schema`` writes the DDL)."""
    return Table(
        definition.name,
        metadata,
        *(Column(c.name, _TYPES[c.type][0], nullable=not c.not_null) for c in definition.columns),
        PrimaryKeyConstraint(*definition.primary_key),
        schema=POLARIS_SCHEMA,
    )


def _tables(schema_version: int) -> dict[str, ddl.TableDef]:
    return {t.name: t for t in ddl.tables(schema_version)}


_LATEST = _tables(LATEST_SCHEMA_VERSION)
# ``location_without_scheme`` (v2+) is never written, so v1 databases work unchanged.
entities = _table(_LATEST["entities"])
events = _table(_LATEST["events"])  # Polaris's audit events (schema v3+)
version = _table(_LATEST["version"])

# What an existing ``entities`` must have: the columns of the first schema version.
_REQUIRED_COLUMNS = {
    c.name: _TYPES[c.type][1] for c in _tables(ddl.MIN_SCHEMA_VERSION)["entities"].columns
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

    Every table, key and index of that version's DDL (``ddl``) and the version row, so that
    Polaris version can start on it. An existing Polaris ``entities`` is someone's metastore:
    nothing is changed. A foreign ``entities`` is refused (SchemaMismatchError).
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


def has_events_table(conn: Connection) -> bool:
    """Whether the database has Polaris's ``events`` table (schema v3+)."""
    return inspect(conn).has_table("events", schema=schema_name(conn.dialect.name))


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
                f"granted USAGE on schema {schema} (a Polaris on NoSQL has none: "
                f"{NOSQL_UNSUPPORTED})"
            )
        raise MetastoreError(
            f"no Polaris entities table in {url_for_humans}: point --metastore at Polaris's "
            "database, or for a scratch SQLite file run `polaris-pipeline init-metastore` "
            f"(a Polaris on NoSQL has none: {NOSQL_UNSUPPORTED})"
        )
