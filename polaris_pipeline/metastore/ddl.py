"""The tables, keys and indexes of Polaris's relational-JDBC schema, per schema version.

From Polaris's ``postgres/schema-v1.sql`` .. ``schema-v5.sql`` (read at 1.7.0; every
release's file of a version is the same), so that ``init-metastore --schema-version N``
leaves a database that Polaris version can start on. PostgreSQL gets Polaris's types;
SQLite stores JSON as text, as Polaris's H2 schema does. Not reproduced: ``COMMENT ON`` and
v1's ``DROP TABLE IF EXISTS policy_mapping_record`` (this tool never drops a table).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SCHEMA_VERSION = 1
LATEST_SCHEMA_VERSION = 5

# Polaris added the ``events`` table in schema v3 (Polaris 1.2).
EVENTS_SINCE_SCHEMA_VERSION = 3


@dataclass(frozen=True)
class Col:
    name: str
    type: str  # JSON is rendered per dialect; every other type is the same on both
    not_null: bool = False
    default: str | None = None  # an SQL literal; "{}" for JSON is rendered per dialect


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]
    where: str | None = None  # a partial index


@dataclass(frozen=True)
class TableDef:
    name: str
    columns: tuple[Col, ...]
    primary_key: tuple[str, ...]
    unique: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (constraint name, columns)
    indexes: tuple[Index, ...] = ()


JSON = "JSON"
EMPTY_JSON = "{}"


def _not_null(name: str, type_: str) -> Col:
    return Col(name, type_, not_null=True)


def _counter(name: str, default: str = "0", type_: str = "BIGINT") -> Col:
    return Col(name, type_, default=default)


def _version_table() -> TableDef:
    return TableDef(
        "version",
        (Col("version_key", "TEXT"), _not_null("version_value", "INTEGER")),
        primary_key=("version_key",),
    )


def _entities(v: int) -> TableDef:
    columns = [
        _not_null("realm_id", "TEXT"),
        _not_null("catalog_id", "BIGINT"),
        _not_null("id", "BIGINT"),
        _not_null("parent_id", "BIGINT"),
        _not_null("name", "TEXT"),
        _not_null("entity_version", "INT"),
        _not_null("type_code", "INT"),
        _not_null("sub_type_code", "INT"),
        *(
            _not_null(c, "BIGINT")
            for c in (
                "create_timestamp",
                "drop_timestamp",
                "purge_timestamp",
                "to_purge_timestamp",
                "last_update_timestamp",
            )
        ),
        Col("properties", JSON, not_null=True, default=EMPTY_JSON),
        Col("internal_properties", JSON, not_null=True, default=EMPTY_JSON),
        _not_null("grant_records_version", "INT"),
    ]
    indexes = [Index("idx_entities", ("realm_id", "catalog_id", "id"))]
    if v >= 4:
        indexes.append(Index("idx_entities_catalog_id_id", ("catalog_id", "id")))
    if v >= 2:
        columns.append(Col("location_without_scheme", "TEXT"))
        indexes.append(
            Index(
                "idx_locations",
                ("realm_id", "parent_id", "location_without_scheme"),
                where="location_without_scheme IS NOT NULL",
            )
        )
    return TableDef(
        "entities",
        tuple(columns),
        primary_key=("realm_id", "id"),
        unique=(("constraint_name", ("realm_id", "catalog_id", "parent_id", "type_code", "name")),),
        indexes=tuple(indexes),
    )


def _grant_records(v: int) -> TableDef:
    indexes: tuple[Index, ...] = ()
    if v >= 4:
        indexes = (
            Index("idx_grants_realm_grantee", ("realm_id", "grantee_id")),
            Index("idx_grants_realm_securable", ("realm_id", "securable_id")),
        )
    keys = ("securable_catalog_id", "securable_id", "grantee_catalog_id", "grantee_id")
    return TableDef(
        "grant_records",
        (
            _not_null("realm_id", "TEXT"),
            *(_not_null(k, "BIGINT") for k in keys),
            # Declared without NOT NULL, as Polaris does; the primary key makes it
            # NOT NULL on PostgreSQL.
            Col("privilege_code", "INTEGER"),
        ),
        primary_key=("realm_id", *keys, "privilege_code"),
        indexes=indexes,
    )


def _principal_authentication_data() -> TableDef:
    return TableDef(
        "principal_authentication_data",
        (
            _not_null("realm_id", "TEXT"),
            _not_null("principal_id", "BIGINT"),
            *(
                _not_null(c, "VARCHAR(255)")
                for c in (
                    "principal_client_id",
                    "main_secret_hash",
                    "secondary_secret_hash",
                    "secret_salt",
                )
            ),
        ),
        primary_key=("realm_id", "principal_client_id"),
    )


def _policy_mapping_record() -> TableDef:
    target = ("target_catalog_id", "target_id")
    policy = ("policy_type_code", "policy_catalog_id", "policy_id")
    return TableDef(
        "policy_mapping_record",
        (
            _not_null("realm_id", "TEXT"),
            _not_null("target_catalog_id", "BIGINT"),
            _not_null("target_id", "BIGINT"),
            _not_null("policy_type_code", "INTEGER"),
            _not_null("policy_catalog_id", "BIGINT"),
            _not_null("policy_id", "BIGINT"),
            Col("parameters", JSON, not_null=True, default=EMPTY_JSON),
        ),
        primary_key=("realm_id", *target, *policy),
        indexes=(Index("idx_policy_mapping_record", ("realm_id", *policy, *target)),),
    )


def _events(v: int) -> TableDef:
    return TableDef(
        "events",
        (
            _not_null("realm_id", "TEXT"),
            # NOT NULL before v5, where Polaris stores "__realm__" for realm-scoped events.
            Col("catalog_id", "TEXT", not_null=v < 5),
            _not_null("event_id", "TEXT"),
            Col("request_id", "TEXT"),
            _not_null("event_type", "TEXT"),
            _not_null("timestamp_ms", "BIGINT"),
            Col("principal_name", "TEXT"),
            _not_null("resource_type", "TEXT"),
            _not_null("resource_identifier", "TEXT"),
            Col("additional_properties", JSON, not_null=True, default=EMPTY_JSON),
        ),
        primary_key=("event_id",),
    )


def _idempotency_records() -> TableDef:
    # Schema v4 only: Polaris 1.7 removed the table from v5.
    return TableDef(
        "idempotency_records",
        (
            _not_null("realm_id", "TEXT"),
            _not_null("idempotency_key", "TEXT"),
            _not_null("operation_type", "TEXT"),
            _not_null("resource_id", "TEXT"),
            Col("http_status", "INTEGER"),
            Col("error_subtype", "TEXT"),
            Col("response_summary", "TEXT"),
            Col("response_headers", "TEXT"),
            Col("finalized_at", "TIMESTAMP"),
            _not_null("created_at", "TIMESTAMP"),
            _not_null("updated_at", "TIMESTAMP"),
            Col("heartbeat_at", "TIMESTAMP"),
            Col("executor_id", "TEXT"),
            Col("expires_at", "TIMESTAMP"),
        ),
        primary_key=("realm_id", "idempotency_key"),
        indexes=(Index("idx_idemp_realm_expires", ("realm_id", "expires_at")),),
    )


def _metrics_head() -> tuple[Col, ...]:
    """The columns both metrics report tables start with."""
    return (
        _not_null("report_id", "TEXT"),
        _not_null("realm_id", "TEXT"),
        _not_null("catalog_id", "BIGINT"),
        _not_null("table_id", "BIGINT"),
        _not_null("timestamp_ms", "BIGINT"),
        Col("principal_name", "TEXT"),
        Col("request_id", "TEXT"),
        Col("otel_trace_id", "TEXT"),
        Col("otel_span_id", "TEXT"),
        Col("report_trace_id", "TEXT"),
    )


def _metrics_indexes(prefix: str) -> tuple[Index, ...]:
    return (
        Index(f"idx_{prefix}_report_timestamp", ("realm_id", "timestamp_ms")),
        Index(
            f"idx_{prefix}_report_lookup", ("realm_id", "catalog_id", "table_id", "timestamp_ms")
        ),
    )


# Nullable JSON with a default: the metrics tables' ``metadata`` has no NOT NULL.
_METRICS_METADATA = Col("metadata", JSON, default=EMPTY_JSON)


def _scan_metrics_report() -> TableDef:
    counters = (
        "result_data_files",
        "result_delete_files",
        "total_file_size_bytes",
        "total_data_manifests",
        "total_delete_manifests",
        "scanned_data_manifests",
        "scanned_delete_manifests",
        "skipped_data_manifests",
        "skipped_delete_manifests",
        "skipped_data_files",
        "skipped_delete_files",
        "total_planning_duration_ms",
        "equality_delete_files",
        "positional_delete_files",
        "indexed_delete_files",
        "total_delete_file_size_bytes",
    )
    return TableDef(
        "scan_metrics_report",
        (
            *_metrics_head(),
            Col("snapshot_id", "BIGINT"),
            Col("schema_id", "INTEGER"),
            Col("filter_expression", "TEXT"),
            Col("projected_field_ids", "TEXT"),
            Col("projected_field_names", "TEXT"),
            *(_counter(c) for c in counters),
            _METRICS_METADATA,
        ),
        primary_key=("realm_id", "report_id"),
        indexes=_metrics_indexes("scan"),
    )


def _commit_metrics_report() -> TableDef:
    counters = (
        "added_data_files",
        "removed_data_files",
        "total_data_files",
        "added_delete_files",
        "removed_delete_files",
        "total_delete_files",
        "added_equality_delete_files",
        "removed_equality_delete_files",
        "added_positional_delete_files",
        "removed_positional_delete_files",
        "added_records",
        "removed_records",
        "total_records",
        "added_file_size_bytes",
        "removed_file_size_bytes",
        "total_file_size_bytes",
        "total_duration_ms",
    )
    return TableDef(
        "commit_metrics_report",
        (
            *_metrics_head(),
            _not_null("snapshot_id", "BIGINT"),
            Col("sequence_number", "BIGINT"),
            _not_null("operation", "TEXT"),
            *(_counter(c) for c in counters),
            _counter("attempts", default="1", type_="INTEGER"),
            _METRICS_METADATA,
        ),
        primary_key=("realm_id", "report_id"),
        indexes=_metrics_indexes("commit"),
    )


def check_version(schema_version: int) -> int:
    if not MIN_SCHEMA_VERSION <= schema_version <= LATEST_SCHEMA_VERSION:
        raise ValueError(
            f"Polaris schema version {schema_version} is unknown: "
            f"use {MIN_SCHEMA_VERSION}..{LATEST_SCHEMA_VERSION}"
        )
    return schema_version


def tables(schema_version: int) -> tuple[TableDef, ...]:
    """Polaris's tables for ``schema_version``, in the order its DDL creates them."""
    v = check_version(schema_version)
    out = [
        _version_table(),
        _entities(v),
        _grant_records(v),
        _principal_authentication_data(),
        _policy_mapping_record(),
    ]
    if v >= EVENTS_SINCE_SCHEMA_VERSION:
        out.append(_events(v))
    if v == 4:
        out.append(_idempotency_records())
    if v >= 4:
        out += [_scan_metrics_report(), _commit_metrics_report()]
    return tuple(out)


# ------------------------------------------------------------------ rendering


def _column_sql(col: Col, dialect: str) -> str:
    pg = dialect == "postgresql"
    type_ = ("JSONB" if pg else "TEXT") if col.type == JSON else col.type
    parts = [col.name, type_]
    if col.not_null:
        parts.append("NOT NULL")
    if col.default is not None:
        if col.type == JSON:
            parts.append(f"DEFAULT '{col.default}'::JSONB" if pg else f"DEFAULT '{col.default}'")
        else:
            parts.append(f"DEFAULT {col.default}")
    return " ".join(parts)


def create_statements(schema_version: int, dialect: str, schema: str | None) -> list[str]:
    """CREATE ... IF NOT EXISTS statements for every table and index of the version.

    ``schema`` qualifies the names (PostgreSQL's ``polaris_schema``); None on SQLite.
    Index names are not qualified: PostgreSQL puts an index in its table's schema.
    """
    prefix = f"{schema}." if schema else ""
    statements: list[str] = []
    for table in tables(schema_version):
        body = [_column_sql(c, dialect) for c in table.columns]
        body.append(f"PRIMARY KEY ({', '.join(table.primary_key)})")
        body += [f"CONSTRAINT {name} UNIQUE ({', '.join(cols)})" for name, cols in table.unique]
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {prefix}{table.name} (\n    "
            + ",\n    ".join(body)
            + "\n)"
        )
        for index in table.indexes:
            where = f" WHERE {index.where}" if index.where else ""
            statements.append(
                f"CREATE INDEX IF NOT EXISTS {index.name} ON {prefix}{table.name} "
                f"({', '.join(index.columns)}){where}"
            )
    return statements


def version_row_statement(schema: str | None) -> str:
    """Set the version row to ``:version``, as Polaris's DDL does (insert or overwrite)."""
    prefix = f"{schema}." if schema else ""
    return (
        f"INSERT INTO {prefix}version (version_key, version_value) VALUES ('version', :version) "
        "ON CONFLICT (version_key) DO UPDATE SET version_value = excluded.version_value"
    )
