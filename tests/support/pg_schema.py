"""A fresh Polaris schema in a test process's PostgreSQL database, without creating it
again for every test.

Dropping the last test's ``polaris_schema`` and creating Polaris's tables and indexes
again costs about 0.13 s of CPU, most of it the server's; emptying the tables costs
about 3 ms. A test may change more than rows (add an index, a policy or a grant, rename
a column, drop a table), so the tables are only emptied when the schema's catalog, and
the rows it was created with, are still exactly as created; otherwise it is dropped and
created again, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.schema import LATEST_SCHEMA_VERSION, POLARIS_SCHEMA

# Everything of the schema a test could change but its rows, one line per object: the
# relations (owner, grants, row-level security, options), columns (type, default, null,
# grants), indexes, constraints, policies, triggers, functions, types, default
# privileges, comments, sequences' positions, and rules of objects outside the schema
# over its tables (a view elsewhere, which DROP SCHEMA ... CASCADE would drop).
_CATALOG = text(
    """
WITH ns AS (SELECT to_regnamespace(:schema) AS oid),
rel AS (SELECT c.* FROM pg_class c, ns WHERE c.relnamespace = ns.oid)
SELECT concat_ws(' ', 'schema', n.nspowner::regrole, n.nspacl)
  FROM pg_namespace n, ns WHERE n.oid = ns.oid
UNION ALL
SELECT concat_ws(' ', 'relation', relname, relkind, relowner::regrole, relacl, relrowsecurity,
                 relforcerowsecurity, reloptions, relpersistence,
                 CASE WHEN relkind = 'S' THEN pg_sequence_last_value(oid) END)
  FROM rel
UNION ALL
SELECT concat_ws(' ', 'column', r.relname, a.attname, a.attnum,
                 format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attcollation, a.attacl,
                 pg_get_expr(d.adbin, d.adrelid))
  FROM rel r JOIN pg_attribute a ON a.attrelid = r.oid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT concat_ws(' ', 'index', pg_get_indexdef(i.indexrelid))
  FROM rel r JOIN pg_index i ON i.indrelid = r.oid
UNION ALL
SELECT concat_ws(' ', 'constraint', conname, conrelid::regclass, pg_get_constraintdef(o.oid))
  FROM pg_constraint o, ns WHERE o.connamespace = ns.oid
UNION ALL
SELECT concat_ws(' ', 'policy', r.relname, p.polname, p.polcmd, p.polpermissive, p.polroles,
                 pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
  FROM rel r JOIN pg_policy p ON p.polrelid = r.oid
UNION ALL
SELECT concat_ws(' ', 'trigger', pg_get_triggerdef(t.oid))
  FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid WHERE NOT t.tgisinternal
UNION ALL
SELECT concat_ws(' ', 'function', p.oid::regprocedure, md5(p.prosrc), p.proacl)
  FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
UNION ALL
SELECT concat_ws(' ', 'type', t.typname, t.typtype)
  FROM pg_type t, ns WHERE t.typnamespace = ns.oid AND t.typrelid = 0 AND t.typelem = 0
UNION ALL
SELECT concat_ws(' ', 'default privileges', a.defaclrole::regrole, a.defaclobjtype, a.defaclacl)
  FROM pg_default_acl a, ns WHERE a.defaclnamespace = ns.oid
UNION ALL
SELECT concat_ws(' ', 'comment', r.relname, d.objsubid, d.description)
  FROM rel r JOIN pg_description d ON d.objoid = r.oid AND d.classoid = 'pg_class'::regclass
UNION ALL
SELECT concat_ws(' ', 'rule outside', w.ev_class::regclass, w.rulename)
  FROM pg_depend dep JOIN pg_rewrite w ON w.oid = dep.objid
  JOIN pg_class owner ON owner.oid = w.ev_class, ns
  WHERE dep.classid = 'pg_rewrite'::regclass AND owner.relnamespace <> ns.oid
    AND dep.refobjid IN (SELECT oid FROM rel)
ORDER BY 1
"""
)

_TABLES = text(
    "SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(:schema) "
    "AND relkind IN ('r', 'p') ORDER BY relname"
)


@dataclasses.dataclass(frozen=True)
class _Created:
    """What a schema was right after it was created."""

    schema_version: int
    catalog: Sequence[str]
    rows: dict[str, list[tuple[object, ...]]]  # by table: its rows (the version row)


# By database URL: the schema this process created there last.
_CREATED: dict[str, _Created] = {}


def _catalog(conn: Connection) -> list[str]:
    return [row[0] for row in conn.execute(_CATALOG, {"schema": POLARIS_SCHEMA})]


def _rows(conn: Connection, table: str) -> list[tuple[object, ...]]:
    rows = conn.exec_driver_sql(f'SELECT * FROM {POLARIS_SCHEMA}."{table}"')
    return sorted((tuple(r) for r in rows), key=repr)


def _snapshot(conn: Connection, schema_version: int) -> _Created:
    tables = [row[0] for row in conn.execute(_TABLES, {"schema": POLARIS_SCHEMA})]
    rows = {t: _rows(conn, t) for t in tables}
    return _Created(schema_version, _catalog(conn), {t: r for t, r in rows.items() if r})


def _emptied(url: str, created: _Created) -> bool:
    """Empty the tables of the schema at ``url`` if it is still as ``created``, in one
    transaction; False (nothing changed) when it is not."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if _catalog(conn) != list(created.catalog):
                return False
            tables = [row[0] for row in conn.execute(_TABLES, {"schema": POLARIS_SCHEMA})]
            if any(_rows(conn, t) != r for t, r in created.rows.items()):
                return False
            for table in tables:
                if table not in created.rows:
                    conn.exec_driver_sql(f'DELETE FROM {POLARIS_SCHEMA}."{table}"')
            return True
    finally:
        engine.dispose()


def drop_polaris_schema(url: str) -> None:
    """Drop ``polaris_schema`` and everything in it at ``url`` (if there is one)."""
    _CREATED.pop(url, None)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {POLARIS_SCHEMA} CASCADE"))
    finally:
        engine.dispose()


def fresh_polaris_schema(url: str, schema_version: int = LATEST_SCHEMA_VERSION) -> None:
    """Polaris's schema of ``schema_version`` at ``url``, as just created and empty but for
    its version row: the last one emptied when it is still as created, else created again."""
    created = _CREATED.pop(url, None)
    reusable = created is not None and created.schema_version == schema_version
    if reusable and created is not None and _emptied(url, created):
        _CREATED[url] = created
        return
    drop_polaris_schema(url)
    admin = Metastore(url)
    try:
        assert admin.init_schema(schema_version) is True
    finally:
        admin.dispose()
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            _CREATED[url] = _snapshot(conn, schema_version)
    finally:
        engine.dispose()
