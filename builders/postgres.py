"""Throwaway databases on the test PostgreSQL server (127.0.0.1:5432 unless
``POLARIS_PIPELINE_TEST_PG`` names another), for the tests and the benchmarks alike
(``bench/common.py``).

Every database a test or fixture makes comes from :func:`throwaway_database`: its
name carries the process id and a random part, so parallel pytest workers (and two
checkouts on one machine) never share one, and it is dropped on exit even when a
test restarted PostgreSQL meanwhile.

No pytest import: plain context managers, usable by any fixture.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

ADMIN_URL_ENV = "POLARIS_PIPELINE_TEST_PG"


def _admin_url() -> str:
    url = os.environ.get(ADMIN_URL_ENV, "").strip()
    return url or "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


PG_ADMIN_URL = _admin_url()
# How long a drop keeps trying while the server restarts (a reliability scenario).
_DROP_ATTEMPTS = 30


def database_url(name: str, *, drivername: str | None = None) -> str:
    """The admin URL pointed at database ``name`` (password kept), optionally another driver."""
    url = make_url(PG_ADMIN_URL).set(database=name)
    if drivername is not None:
        url = url.set(drivername=drivername)
    return url.render_as_string(hide_password=False)


@contextmanager
def throwaway_database(prefix: str) -> Iterator[str]:
    """A database created now and dropped on exit; yields its name."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    # No pool: each statement opens a fresh connection, even after a server restart.
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    try:
        yield name
    finally:
        _drop_database(name)


def _drop_database(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        for attempt in range(_DROP_ATTEMPTS):
            try:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                return
            except Exception:
                if attempt == _DROP_ATTEMPTS - 1:
                    raise
                time.sleep(1)  # PostgreSQL restarting: try again
    finally:
        admin.dispose()
