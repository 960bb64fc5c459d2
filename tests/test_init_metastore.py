"""init-metastore creates Polaris's own schema of each version, on PostgreSQL and SQLite.

The expectations below are written out by hand from Polaris's postgres/schema-v1..v5.sql,
not derived from polaris_pipeline.metastore.ddl, so a slip in the DDL module fails here.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from sqlalchemy import Connection, inspect, text

from polaris_pipeline.cli import main
from polaris_pipeline.errors import SchemaMismatchError
from polaris_pipeline.metastore import Metastore

VERSIONS = [1, 2, 3, 4, 5]

BASE_TABLES = {
    "version",
    "entities",
    "grant_records",
    "principal_authentication_data",
    "policy_mapping_record",
}


def expected_tables(v: int) -> set[str]:
    tables = set(BASE_TABLES)
    if v >= 3:
        tables.add("events")
    if v == 4:
        tables.add("idempotency_records")
    if v >= 4:
        tables |= {"scan_metrics_report", "commit_metrics_report"}
    return tables


# entities: (column, PostgreSQL data_type, nullable, PostgreSQL default)
ENTITY_COLUMNS: list[tuple[str, str, bool, str | None]] = [
    ("realm_id", "text", False, None),
    ("catalog_id", "bigint", False, None),
    ("id", "bigint", False, None),
    ("parent_id", "bigint", False, None),
    ("name", "text", False, None),
    ("entity_version", "integer", False, None),
    ("type_code", "integer", False, None),
    ("sub_type_code", "integer", False, None),
    ("create_timestamp", "bigint", False, None),
    ("drop_timestamp", "bigint", False, None),
    ("purge_timestamp", "bigint", False, None),
    ("to_purge_timestamp", "bigint", False, None),
    ("last_update_timestamp", "bigint", False, None),
    ("properties", "jsonb", False, "'{}'::jsonb"),
    ("internal_properties", "jsonb", False, "'{}'::jsonb"),
    ("grant_records_version", "integer", False, None),
]


def entity_columns(v: int) -> list[tuple[str, str, bool, str | None]]:
    extra = [("location_without_scheme", "text", True, None)] if v >= 2 else []
    return ENTITY_COLUMNS + extra


def entity_indexes(v: int) -> dict[str, list[str]]:
    indexes = {"idx_entities": ["realm_id", "catalog_id", "id"]}
    if v >= 2:
        indexes["idx_locations"] = ["realm_id", "parent_id", "location_without_scheme"]
    if v >= 4:
        indexes["idx_entities_catalog_id_id"] = ["catalog_id", "id"]
    return indexes


def events_columns(v: int) -> list[tuple[str, str, bool, str | None]]:
    return [
        ("realm_id", "text", False, None),
        ("catalog_id", "text", v >= 5, None),
        ("event_id", "text", False, None),
        ("request_id", "text", True, None),
        ("event_type", "text", False, None),
        ("timestamp_ms", "bigint", False, None),
        ("principal_name", "text", True, None),
        ("resource_type", "text", False, None),
        ("resource_identifier", "text", False, None),
        ("additional_properties", "jsonb", False, "'{}'::jsonb"),
    ]


UNIQUE_COLUMNS = ["realm_id", "catalog_id", "parent_id", "type_code", "name"]
SQLITE_TYPES = {"text": "TEXT", "bigint": "BIGINT", "integer": "INT", "jsonb": "TEXT"}


def pg_columns(conn: Connection, table: str) -> list[tuple[str, str, bool, str | None]]:
    rows = conn.execute(
        text(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns "
            "WHERE table_schema = 'polaris_schema' AND table_name = :t ORDER BY ordinal_position"
        ),
        {"t": table},
    )
    return [(r[0], r[1], r[2] == "YES", r[3]) for r in rows]


def pg_indexes(conn: Connection, table: str) -> dict[str, str]:
    rows = conn.execute(
        text(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = 'polaris_schema' AND tablename = :t"
        ),
        {"t": table},
    )
    return {r[0]: r[1] for r in rows}


def sqlite_columns(conn: Connection, table: str) -> list[tuple[str, str, bool, str | None]]:
    rows = conn.exec_driver_sql(f"PRAGMA table_info({table})").fetchall()
    # (cid, name, type, notnull, dflt_value, pk)
    return [(r[1], r[2], not r[3], r[4]) for r in rows]


def sqlite_index_columns(conn: Connection, index: str) -> list[str]:
    return [r[2] for r in conn.exec_driver_sql(f"PRAGMA index_info({index})")]


def tables_in(store: Metastore, conn: Connection) -> set[str]:
    schema = "polaris_schema" if store.dialect == "postgresql" else None
    return set(inspect(conn).get_table_names(schema=schema))


@pytest.mark.parametrize("version", VERSIONS)
def test_creates_polaris_schema_of_each_version(metastore_url: str, version: int) -> None:
    store = Metastore(metastore_url)
    assert store.init_schema(version) is True
    assert store.check_schema() == version
    with store.engine.connect() as conn:
        assert tables_in(store, conn) == expected_tables(version)
        if store.dialect == "postgresql":
            assert pg_columns(conn, "entities") == entity_columns(version)
            constraint = conn.execute(
                text(
                    "SELECT contype, pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conname = 'constraint_name' "
                    "AND connamespace = 'polaris_schema'::regnamespace"
                )
            ).one()
            assert constraint[0] == "u"
            assert constraint[1] == f"UNIQUE ({', '.join(UNIQUE_COLUMNS)})"
            primary = conn.execute(
                text(
                    "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conrelid = 'polaris_schema.entities'::regclass AND contype = 'p'"
                )
            ).scalar_one()
            assert primary == "PRIMARY KEY (realm_id, id)"
            indexes = pg_indexes(conn, "entities")
            # The key and the unique constraint have their own indexes besides Polaris's.
            assert set(indexes) == {"entities_pkey", "constraint_name", *entity_indexes(version)}
            for name, columns in entity_indexes(version).items():
                assert f"USING btree ({', '.join(columns)})" in indexes[name], indexes[name]
            if version >= 2:
                assert indexes["idx_locations"].endswith(
                    "WHERE (location_without_scheme IS NOT NULL)"
                )
            if version >= 3:
                assert pg_columns(conn, "events") == events_columns(version)
        else:
            expected = [
                (name, SQLITE_TYPES[t], nullable, "'{}'" if default else None)
                for name, t, nullable, default in entity_columns(version)
            ]
            assert sqlite_columns(conn, "entities") == expected
            uniques = inspect(conn).get_unique_constraints("entities")
            assert [(u["name"], u["column_names"]) for u in uniques] == [
                ("constraint_name", UNIQUE_COLUMNS)
            ]
            listed = {r[1]: bool(r[4]) for r in conn.exec_driver_sql("PRAGMA index_list(entities)")}
            for name, columns in entity_indexes(version).items():
                assert sqlite_index_columns(conn, name) == columns
                assert listed[name] is (name == "idx_locations")  # partial
            if version >= 3:
                assert sqlite_columns(conn, "events") == [
                    (n, SQLITE_TYPES[t], nullable, "'{}'" if d else None)
                    for n, t, nullable, d in events_columns(version)
                ]
        rows = conn.execute(
            text(f"SELECT version_key, version_value FROM {_q(store)}version")
        ).all()
        assert [tuple(r) for r in rows] == [("version", version)]
    store.dispose()


def _q(store: Metastore) -> str:
    return "polaris_schema." if store.dialect == "postgresql" else ""


def test_other_tables_have_polaris_keys_and_defaults(metastore_url: str) -> None:
    """The tables a Polaris server needs besides entities: keys, JSON defaults, v4 indexes."""
    store = Metastore(metastore_url)
    store.init_schema(4)
    insp_schema = "polaris_schema" if store.dialect == "postgresql" else None
    with store.engine.begin() as conn:
        insp = inspect(conn)
        pks: dict[str, Any] = {
            t: insp.get_pk_constraint(t, schema=insp_schema)["constrained_columns"]
            for t in ("grant_records", "principal_authentication_data", "policy_mapping_record")
        }
        assert pks == {
            "grant_records": [
                "realm_id",
                "securable_catalog_id",
                "securable_id",
                "grantee_catalog_id",
                "grantee_id",
                "privilege_code",
            ],
            "principal_authentication_data": ["realm_id", "principal_client_id"],
            "policy_mapping_record": [
                "realm_id",
                "target_catalog_id",
                "target_id",
                "policy_type_code",
                "policy_catalog_id",
                "policy_id",
            ],
        }
        grant_indexes = {
            i["name"]: i["column_names"]
            for i in insp.get_indexes("grant_records", schema=insp_schema)
        }
        assert grant_indexes == {
            "idx_grants_realm_grantee": ["realm_id", "grantee_id"],
            "idx_grants_realm_securable": ["realm_id", "securable_id"],
        }
        # Polaris inserts rows without the JSON and counter columns: the defaults fill them.
        q = _q(store)
        conn.execute(
            text(
                f"INSERT INTO {q}policy_mapping_record (realm_id, target_catalog_id, target_id, "
                "policy_type_code, policy_catalog_id, policy_id) VALUES ('r', 1, 2, 0, 1, 3)"
            )
        )
        parameters = conn.execute(text(f"SELECT parameters FROM {q}policy_mapping_record")).scalar()
        assert parameters in ({}, "{}")
        conn.execute(
            text(
                f"INSERT INTO {q}commit_metrics_report (report_id, realm_id, catalog_id, "
                "table_id, timestamp_ms, snapshot_id, operation) "
                "VALUES ('x', 'r', 1, 2, 0, 9, 'append')"
            )
        )
        attempts, added = conn.execute(
            text(f"SELECT attempts, added_data_files FROM {q}commit_metrics_report")
        ).one()
        assert (attempts, added) == (1, 0)
    store.dispose()


def test_init_twice_is_a_no_op_and_keeps_the_first_version(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    assert store.init_schema(3) is True
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"INSERT INTO {_q(store)}events (realm_id, catalog_id, event_id, event_type, "
                "timestamp_ms, resource_type, resource_identifier) "
                "VALUES ('r', '__realm__', 'e1', 'X', 1, 'REALM', 'X')"
            )
        )
    # A second init, even asking for another version, changes nothing.
    assert store.init_schema(5) is False
    assert store.check_schema() == 3
    with store.engine.connect() as conn:
        assert tables_in(store, conn) == expected_tables(3)
        assert conn.execute(text(f"SELECT count(*) FROM {_q(store)}events")).scalar() == 1
    store.dispose()


def test_refuses_entities_table_with_another_shape(metastore_url: str) -> None:
    """Right column names, one wrong type: refused, and nothing else is created."""
    store = Metastore(metastore_url)
    pg = store.dialect == "postgresql"
    columns = ", ".join(
        f"{name} {'INTEGER' if name == 'properties' else SQLITE_TYPES[t]}"
        for name, t, _, _ in ENTITY_COLUMNS
    )
    with store.engine.begin() as conn:
        if pg:
            conn.execute(text("CREATE SCHEMA polaris_schema"))
        conn.execute(
            text(f"CREATE TABLE {_q(store)}entities ({columns}, PRIMARY KEY (realm_id, id))")
        )
    with pytest.raises(SchemaMismatchError, match="column properties is INTEGER"):
        store.init_schema(5)
    with store.engine.connect() as conn:
        assert tables_in(store, conn) == {"entities"}
    store.dispose()


def test_unknown_schema_version_is_refused(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    for bad in (0, 6, -1):
        with pytest.raises(ValueError, match="schema version"):
            store.init_schema(bad)
    with store.engine.connect() as conn:
        assert tables_in(store, conn) == set()
    store.dispose()


def test_cli_schema_version_option(metastore_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert (
        main(["init-metastore", "--metastore", metastore_url, "--schema-version", "2"], out=out)
        == 0
    )
    assert out.getvalue().startswith("created Polaris entities table")
    assert "(schema version 2)" in out.getvalue()
    out = io.StringIO()
    assert main(["init-metastore", "--metastore", metastore_url], out=out) == 0
    assert out.getvalue().startswith("found existing") and "(schema version 2)" in out.getvalue()
    for bad in ("0", "6", "five", ""):
        with pytest.raises(SystemExit) as exit_info:
            main(["init-metastore", "--metastore", metastore_url, "--schema-version", bad])
        assert exit_info.value.code == 2
        assert "--schema-version" in capsys.readouterr().err
