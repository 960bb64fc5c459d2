"""Metastore fixtures: every metastore test runs on PostgreSQL and on SQLite.

PostgreSQL: one fresh database per test session (created here, dropped at the
end), and a fresh ``polaris_schema`` per test inside it. SQLite: a fresh file
per test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import LeasePolicy

PG_ADMIN_URL = os.environ.get(
    "POLARIS_PIPELINE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A database created for this test run and dropped afterwards; yields its URL."""
    name = f"pp_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        # A fresh engine: a test may have restarted PostgreSQL, killing pooled connections.
        admin.dispose()
        dropper = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with dropper.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        dropper.dispose()


def _reset_pg_schema(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS polaris_schema CASCADE"))
    engine.dispose()


@pytest.fixture(params=["postgresql", "sqlite"])
def metastore_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An empty database URL (no Polaris schema yet), on each backend in turn."""
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_database")
        _reset_pg_schema(url)
        return url
    return f"sqlite:///{tmp_path_factory.mktemp('metastore')}/polaris.db"


@pytest.fixture
def policy() -> LeasePolicy:
    return LeasePolicy(lease_timeout_ms=60_000, grace_ms=0)


@pytest.fixture
def metastore(metastore_url: str, policy: LeasePolicy) -> Iterator[Metastore]:
    """A metastore with the Polaris schema created, on each backend in turn."""
    store = Metastore(metastore_url, policy=policy)
    store.init_schema()
    yield store
    store.dispose()
