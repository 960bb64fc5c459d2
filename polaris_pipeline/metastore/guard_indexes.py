"""Indexes the shared-location guards look up by, which Polaris's schema lacks.

Polaris's ``idx_locations`` is led by realm and parent, which an overlap lookup
does not know, and nothing indexes ``metadata-location``: without these the guards
of ``overlap.py`` read every row (bounded, warned once). ``polaris-pipeline
guard-indexes`` creates them (opt-in, in Polaris's own database):

- ``polaris_pipeline_guard_locations``: ``location_without_scheme`` alone
  (``text_pattern_ops`` on PostgreSQL, so ``LIKE 'prefix/%'`` ranges over it in any
  collation), rows with a location only;
- ``polaris_pipeline_guard_metadata_files``: the file name of each table's or view's
  ``metadata-location``; every spelling of a file has the same name, so the lookup
  misses none, and candidates are then judged as locations;
- ``polaris_pipeline_guard_write_paths``: only entities naming a ``write.data.path``-style
  root (``tasks/roots.py``): few, so the unreferenced phase and the reclaim read those alone.

PostgreSQL builds them ``CONCURRENTLY`` (no lock on Polaris's writes; about one read of the
table; ~60 MB and 40 MB at 1,000,000 entities); each entity write then maintains two more
entries. Creating needs the table's owner, not the pipeline's role. Schema v1 has no
``location_without_scheme``: only the second index is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, text

from polaris_pipeline.metastore.schema import POLARIS_SCHEMA
from polaris_pipeline.tasks.model import TABLE_LIKE_TYPE_CODE
from polaris_pipeline.tasks.roots import ROOT_PROPERTIES

LOCATIONS_INDEX = "polaris_pipeline_guard_locations"
METADATA_FILES_INDEX = "polaris_pipeline_guard_metadata_files"
WRITE_PATHS_INDEX = "polaris_pipeline_guard_write_paths"
# The first schema version with ``location_without_scheme`` (overlap.py reads it too).
LOCATION_COLUMN_SINCE = 2
# Rendered into SQL as a literal: a partial index serves a query only when the query
# states its condition as written (SQLite never matches a bound parameter).
TABLE_ROWS = f"type_code = {TABLE_LIKE_TYPE_CODE}"


def _metadata_location(dialect: str) -> str:
    if dialect == "postgresql":
        return "(internal_properties ->> 'metadata-location')"
    # A row whose properties are no JSON must not make Polaris's writes fail.
    return (
        "(CASE WHEN json_valid(internal_properties) "
        "THEN json_extract(internal_properties, '$.\"metadata-location\"') END)"
    )


def metadata_file_name(dialect: str) -> str:
    """The SQL expression of a row's ``metadata-location`` file name: the part after
    its last ``/``, trailing slashes dropped (``parse_location(..., directory=True)``'s
    last segment); NULL without one. The index and the query use this one text."""
    trimmed = f"rtrim({_metadata_location(dialect)}, '/')"
    return f"substr({trimmed}, length(rtrim({trimmed}, replace({trimmed}, '/', ''))) + 1)"


def write_path_rows(dialect: str) -> str:
    """The SQL condition of a table or view whose properties name a write root: the
    partial index's, written by the query as it is here (a partial index serves only
    a query stating its condition)."""
    if dialect == "postgresql":
        keys = ", ".join(f"'{key}'" for key in ROOT_PROPERTIES)
        return f"{TABLE_ROWS} AND properties ?| array[{keys}]"
    named = " OR ".join(
        f"json_extract(properties, '$.\"{key}\"') IS NOT NULL" for key in ROOT_PROPERTIES
    )
    # A row whose properties are no JSON must not make Polaris's writes fail.
    return f"{TABLE_ROWS} AND (CASE WHEN json_valid(properties) THEN ({named}) END)"


@dataclass(frozen=True)
class GuardIndex:
    name: str
    what: str  # for messages

    def create_sql(self, dialect: str) -> str:
        pg = dialect == "postgresql"
        table = f"{POLARIS_SCHEMA}.entities" if pg else "entities"
        concurrently = " CONCURRENTLY" if pg else ""
        if self.name == LOCATIONS_INDEX:
            column = "location_without_scheme" + (" text_pattern_ops" if pg else "")
            where = "location_without_scheme IS NOT NULL"
        elif self.name == WRITE_PATHS_INDEX:
            column, where = "(realm_id)", write_path_rows(dialect)
        else:
            column = f"({metadata_file_name(dialect)})"
            where = TABLE_ROWS
        return (
            f"CREATE INDEX{concurrently} IF NOT EXISTS {self.name} ON {table} ({column}) "
            f"WHERE {where}"
        )


LOCATIONS = GuardIndex(LOCATIONS_INDEX, "live entities by location_without_scheme")
METADATA_FILES = GuardIndex(METADATA_FILES_INDEX, "tables and views by metadata-location file")
WRITE_PATHS = GuardIndex(WRITE_PATHS_INDEX, "tables and views naming a write.data.path-style root")


def guard_indexes(schema_version: int | None) -> tuple[GuardIndex, ...]:
    """The guard indexes a metastore of ``schema_version`` can have."""
    if schema_version is not None and schema_version >= LOCATION_COLUMN_SINCE:
        return (LOCATIONS, METADATA_FILES, WRITE_PATHS)
    return (METADATA_FILES, WRITE_PATHS)


def existing_indexes(engine: Engine) -> set[str]:
    """The names of the indexes on ``entities`` (valid ones, on PostgreSQL)."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            rows = conn.execute(
                text(
                    "SELECT c.relname FROM pg_index i "
                    "JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_class t ON t.oid = i.indrelid "
                    "JOIN pg_namespace n ON n.oid = t.relnamespace "
                    "WHERE t.relname = 'entities' AND n.nspname = :schema AND i.indisvalid"
                ),
                {"schema": POLARIS_SCHEMA},
            )
        else:
            rows = conn.execute(
                text("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :t"),
                {"t": "entities"},
            )
        return {r[0] for r in rows}


def missing_guard_indexes(engine: Engine, schema_version: int | None) -> list[GuardIndex]:
    """The guard indexes ``engine``'s metastore lacks."""
    present = existing_indexes(engine)
    return [i for i in guard_indexes(schema_version) if i.name not in present]


def create_guard_indexes(engine: Engine, schema_version: int | None) -> list[str]:
    """Create the missing guard indexes; returns the names created (none: all there).

    On PostgreSQL an index left invalid by an interrupted ``CONCURRENTLY`` build is
    dropped and built again.
    """
    created: list[str] = []
    for index in missing_guard_indexes(engine, schema_version):
        if engine.dialect.name == "postgresql":
            # CREATE INDEX CONCURRENTLY runs outside a transaction.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                qualified = f"{POLARIS_SCHEMA}.{index.name}"
                conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {qualified}"))
                conn.execute(text(index.create_sql("postgresql")))
        else:
            with engine.begin() as conn:
                conn.execute(text(index.create_sql(engine.dialect.name)))
        created.append(index.name)
    return created
