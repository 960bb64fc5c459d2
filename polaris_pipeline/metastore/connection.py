"""Opening a metastore from a SQLAlchemy URL, and the database clock.

A URL that cannot name a metastore (``nonsense``, ``sqlite://relative``) is one
``MetastoreError`` line. ``read_only=True`` opens a metastore so that nothing
can be created or changed: a missing SQLite file is an error instead of a new
empty database, SQLite opens the file with ``mode=ro``, and PostgreSQL sessions
are read-only transactions.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from polaris_pipeline.errors import MetastoreError
from polaris_pipeline.metastore.schema import NOSQL_UNSUPPORTED, POLARIS_SCHEMA
from polaris_pipeline.settings import URL_ENV, setting_from_env
from polaris_pipeline.storage.redact import looks_secret, maskable, redact

# Polaris's NoSQL persistence: named and refused at once (``schema.NOSQL_UNSUPPORTED``).
NOSQL_BACKENDS = frozenset({"mongodb"})

# Epoch milliseconds on the database server. All lease arithmetic uses this,
# so a worker whose own clock is off can neither steal nor lose leases.
DB_NOW_MS = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
}


def resolve_url(url: str | URL | None) -> URL:
    """``url`` (else ``$POLARIS_METASTORE_URL``) as a metastore URL, or one MetastoreError."""
    raw = url or setting_from_env("metastore", "url")
    if not raw:
        raise MetastoreError(f"no metastore URL: pass --metastore or set {URL_ENV}")
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError):
        # ValueError: a port that is not a number. The URL is not echoed: it may hold
        # a password.
        raise MetastoreError(
            "metastore URL is not a SQLAlchemy URL (e.g. sqlite:///polaris.db)"
        ) from None
    backend = parsed.get_backend_name()
    if backend in NOSQL_BACKENDS:
        raise MetastoreError(
            f"metastore URL is a {backend} URL, not a relational Polaris "
            f"metastore: {NOSQL_UNSUPPORTED}; only Polaris's relational JDBC persistence "
            "(PostgreSQL) is supported"
        )
    if backend not in DB_NOW_MS:
        raise MetastoreError(f"unsupported metastore backend {backend!r}: use postgresql or sqlite")
    if backend == "sqlite":
        _check_sqlite_url(parsed)
    if parsed.drivername == "postgresql":
        # psycopg 3 is the driver this project installs; SQLAlchemy 2.0 would pick psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _check_sqlite_url(url: URL) -> None:
    if url.host:
        # sqlite://name reads "name" as a host: almost always a path missing a slash.
        raise MetastoreError(
            f"SQLite URL {safe_url(url)!r} names a host; a file is sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    if url.database in (None, "", ":memory:"):
        raise MetastoreError("an in-memory SQLite metastore cannot be shared; use a file")


def safe_url(url: URL) -> str:
    """The URL with its passwords masked (userinfo, and a query's ``password=``,
    ``sslpassword=``...), for messages and logs."""
    return redact(url.render_as_string(hide_password=True))


def url_secrets(url: URL) -> list[str]:
    """The URL's password and the values of its secret-named query keys, to mask
    wherever a driver's message may quote them."""
    found = [str(url.password)] if url.password else []
    for name, value in url.query.items():
        if looks_secret(name):
            found.extend([value] if isinstance(value, str) else value)
    return maskable(found)


def make_engine(
    url: str | URL | None,
    *,
    idle_in_transaction_timeout_ms: int | None = None,
    read_only: bool = False,
    **kwargs: Any,
) -> Engine:
    """An engine for the metastore; ``read_only`` for the commands that only look.

    ``idle_in_transaction_timeout_ms`` (PostgreSQL): the server ends a session frozen in a
    transaction (a paused VM, a partition), so its row locks cannot block sweepers and Polaris.
    """
    parsed = resolve_url(url)
    backend = parsed.get_backend_name()
    options: dict[str, Any] = {}
    if backend == "sqlite":
        options["connect_args"] = {"timeout": 60}
        options["poolclass"] = NullPool
        if read_only:
            options["creator"] = _sqlite_read_only(str(parsed.database))
    else:
        options["pool_pre_ping"] = True
        connect_args: dict[str, Any] = {
            "connect_timeout": 10,
            "application_name": "polaris-pipeline",
        }
        settings = []
        if idle_in_transaction_timeout_ms:
            settings.append(
                f"-c idle_in_transaction_session_timeout={int(idle_in_transaction_timeout_ms)}"
            )
        if read_only:
            settings.append("-c default_transaction_read_only=on")
        if settings:
            connect_args["options"] = " ".join(settings)
        options["connect_args"] = connect_args
    options.update(kwargs)
    try:
        engine = create_engine(parsed, **options)
    except NoSuchModuleError:
        raise MetastoreError(f"no database driver for {parsed.drivername!r}") from None
    if backend == "sqlite":
        _sqlite_transactions(engine, read_only=read_only)
        engine = engine.execution_options(schema_translate_map={POLARIS_SCHEMA: None})
    return engine


def _sqlite_transactions(engine: Engine, *, read_only: bool) -> None:
    """Begin every SQLite transaction ourselves.

    Writable: BEGIN IMMEDIATE takes the write lock up front, so a read-then-write waits for
    it instead of failing "database is locked" when another process wrote in between:
    several sweepers can share a file. Read-only: one snapshot, no lock written.
    """
    begin = "BEGIN" if read_only else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not read_only:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)


def _sqlite_read_only(database: str) -> Any:
    """A connection factory opening ``database`` read-only; the file must exist (SQLite would
    create an empty one, later mistaken for a metastore without tables).
    """
    path = Path(database).expanduser()
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise MetastoreError(f"no SQLite metastore at {database}: the file {what}")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, timeout=60, check_same_thread=False)

    return connect
