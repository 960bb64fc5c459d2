"""A PostgreSQL role restricted as docs/operator-guide.md section 2 restricts the pipeline's.

Row-level security binds a role that is neither superuser nor the table's owner, so
the role logs in with a password of its own (pg_hba.conf asks one of every user but
postgres over loopback: scripts/services.sh); ``SET ROLE`` from the admin would not
do. The policy is applied by running ``polaris-pipeline grant-role``'s script
through psql verbatim, as the guide does.

``PP_TEST_RESTRICTED_ROLE=1``: every PostgreSQL URL the tests hand the pipeline is such a
role's (``as_pipeline`` in tests/support/metastore.py).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from builders.postgres import PG_ADMIN_URL, database_url
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.privileges import role_script

RESTRICTED_ENV = "PP_TEST_RESTRICTED_ROLE"


def restricted_role_wanted() -> bool:
    return os.environ.get(RESTRICTED_ENV, "").strip() not in ("", "0")


def _admin_execute(database: str | None, *statements: str) -> None:
    """Run ``statements`` as the admin in ``database`` (None: the admin's own)."""
    url = PG_ADMIN_URL if database is None else database_url(database)
    engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


@contextmanager
def login_role(database: str) -> Iterator[tuple[str, str]]:
    """A new LOGIN role (not superuser, owning nothing) with CONNECT on ``database``;
    yields (its name, its URL for ``database``). Dropped on exit, with its policies."""
    role = f"pp_role_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    password = secrets.token_hex(16)
    _admin_execute(
        database,
        f"CREATE ROLE \"{role}\" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '{password}'",
        f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"',
    )
    url = make_url(database_url(database)).set(username=role, password=password)
    try:
        yield role, url.render_as_string(hide_password=False)
    finally:
        # DROP OWNED removes its grants and the policies naming it in this database,
        # unless the database was dropped first (a session's end), which removed them.
        with suppress(OperationalError):
            _admin_execute(database, f'DROP OWNED BY "{role}"')
        _admin_execute(None, f'DROP ROLE IF EXISTS "{role}"')


def apply_role_script(database: str, role: str) -> subprocess.CompletedProcess[str]:
    """Run ``grant-role``'s script for ``role`` through psql as the admin; the result."""
    admin = make_url(PG_ADMIN_URL)
    env = {
        **os.environ,
        "PGHOST": admin.host or "127.0.0.1",
        "PGPORT": str(admin.port or 5432),
        "PGUSER": admin.username or "postgres",
        "PGDATABASE": database,
    }
    if admin.password:
        env["PGPASSWORD"] = str(admin.password)
    return subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1"],
        input=role_script(role),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def restrict(database: str, role: str) -> None:
    """Apply the policy for ``role`` in ``database``; fail the test when psql does."""
    done = apply_role_script(database, role)
    assert done.returncode == 0, done.stderr


@contextmanager
def admin_connection(store: Metastore) -> Iterator[Connection]:
    """A transaction on ``store``'s database as its admin, for seeding rows the pipeline's
    role may not write (a live table) under ``PP_TEST_RESTRICTED_ROLE``; otherwise
    ``store``'s own engine, which is the admin's."""
    if store.dialect != "postgresql" or not restricted_role_wanted():
        with store.engine.begin() as conn:
            yield conn
        return
    database = store.url.database
    assert database is not None
    engine = create_engine(database_url(database), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()
