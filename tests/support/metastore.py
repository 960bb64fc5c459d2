"""Metastore fixtures: every metastore test runs on PostgreSQL and on SQLite.

PostgreSQL: one fresh database per test session, i.e. per xdist worker (created
here, dropped at the end), and a fresh ``polaris_schema`` per test inside it (for the
``metastore`` fixture, the last test's emptied when nothing else of it changed:
``pg_schema``). SQLite: a fresh file
per test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from builders.postgres import PG_ADMIN_URL as PG_ADMIN_URL
from builders.postgres import database_url, throwaway_database
from builders.restricted_role import login_role, restrict, restricted_role_wanted
from polaris_pipeline.metastore import Metastore, queries, transitions
from polaris_pipeline.metastore.queries import Query
from polaris_pipeline.metastore.rows import after_write
from polaris_pipeline.metastore.schema import LATEST_SCHEMA_VERSION
from polaris_pipeline.tasks.model import TaskPolicy, TaskRow
from polaris_pipeline.tasks.ref import Lease
from tests.support.pg_schema import drop_polaris_schema, fresh_polaris_schema
from tests.support.tasks import sqlite_metastore

# Every statement of metastore/queries.py (test_queries checks the list is whole).
ALL_QUERIES: tuple[Query[...], ...] = (
    queries.NOW,
    queries.REALMS,
    queries.ENTITY_REALMS,
    queries.LIST_TASKS,
    queries.GET_TASK,
    queries.TASK_PROPERTIES,
    queries.CATALOG_INTERNAL_PROPERTIES,
    queries.TASK_NAMES,
    queries.CATALOG_NAMES,
    queries.DROP_EVENTS,
    queries.TASKS_NAMED,
    queries.TASK_FAMILY,
    queries.COUNT_TASKS,
    queries.NO_JIT,
    queries.COUNT_BY_STATE,
    queries.TASKS_BY_AGE,
    queries.SELECT_AVAILABLE,
    queries.LEASE_BATCH,
    queries.CAS_WRITE,
    queries.RENEW_HELD_BY,
    queries.COMPLETE,
    queries.LIST_FOR_DISCARD,
    queries.DISCARD,
    queries.INSERT_TASKS,
    queries.BATCH_EVIDENCE,
    queries.INSERT_EVENT,
)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A database created for this test run (one per xdist worker) and dropped afterwards;
    yields its URL."""
    with throwaway_database("pp_test") as name:
        yield database_url(name)


def _reuses_pg_schema(request: pytest.FixtureRequest) -> bool:
    """Whether this test's PostgreSQL metastore is the last one emptied (``pg_schema``):
    for the ``metastore`` fixture, whose schema the pipeline's own role may use as is."""
    return "metastore" in request.fixturenames and not restricted_role_wanted()


@pytest.fixture(params=["postgresql", "sqlite"])
def metastore_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An empty database URL (no Polaris schema yet), on each backend in turn; under the
    ``metastore`` fixture, that fixture makes the schema fresh."""
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_database")
        if not _reuses_pg_schema(request):
            drop_polaris_schema(url)
        return url
    return f"sqlite:///{tmp_path_factory.mktemp('metastore')}/polaris.db"


@pytest.fixture
def policy(request: pytest.FixtureRequest) -> TaskPolicy:
    """The lease policy of ``metastore``: a one-minute lease, no grace period. A module
    or a test asks for another with ``@pytest.mark.lease_policy(**TaskPolicy fields)``."""
    marker = request.node.get_closest_marker("lease_policy")
    fields: dict[str, Any] = {"lease_timeout_ms": 60_000, "grace_ms": 0}
    if marker is not None:
        fields.update(marker.kwargs)
    return TaskPolicy(**fields)


@pytest.fixture
def metastore(
    request: pytest.FixtureRequest, metastore_url: str, policy: TaskPolicy
) -> Iterator[Metastore]:
    """A metastore with the Polaris schema created, on each backend in turn.

    With ``PP_TEST_RESTRICTED_ROLE=1``, on PostgreSQL: connected as a role under the
    operator guide's grants and row-level security (TASK rows only)."""
    if _reuses_pg_schema(request) and metastore_url.startswith("postgresql"):
        fresh_polaris_schema(metastore_url)
        store = Metastore(metastore_url, policy=policy)
    else:
        store = pipeline_store(metastore_url, policy)
    yield store
    store.dispose()


def pipeline_store(
    url: str, policy: TaskPolicy | None = None, schema_version: int = LATEST_SCHEMA_VERSION
) -> Metastore:
    """A store as the pipeline connects to ``url`` (``as_pipeline``), after the admin
    created Polaris's schema of ``schema_version`` there (it must not exist yet)."""
    admin = Metastore(url)
    try:
        assert admin.init_schema(schema_version) is True
    finally:
        admin.dispose()
    return Metastore(as_pipeline(url), policy=policy)


# One login role per test database of this process, dropped at the session's end.
_LOGINS: dict[str, tuple[str, str]] = {}
_LOGIN_ROLES = ExitStack()


@pytest.fixture(scope="session", autouse=True)
def _drop_login_roles() -> Iterator[None]:
    with _LOGIN_ROLES:
        yield


def as_pipeline(url: str) -> str:
    """The URL the pipeline connects by to ``url``'s database, whose Polaris schema the
    admin has created: ``url`` itself, or with ``PP_TEST_RESTRICTED_ROLE=1`` on PostgreSQL
    a login role under the operator guide's grants and row-level security (TASK rows
    only), applied now (a schema reset drops the policies). Seeding what the role may not
    write goes through ``builders.restricted_role.admin_connection``."""
    if not url.startswith("postgresql") or not restricted_role_wanted():
        return url
    database = make_url(url).database
    assert database is not None
    if database not in _LOGINS:
        _LOGINS[database] = _LOGIN_ROLES.enter_context(login_role(database))
    role, login = _LOGINS[database]
    restrict(database, role)
    return login


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Metastore]:
    """A metastore on a SQLite file of this test, schema created (``sqlite_metastore``)."""
    sqlite = sqlite_metastore(tmp_path)
    yield sqlite
    sqlite.dispose()


def with_policy(store: Metastore, **changes: Any) -> Metastore:
    """``store``'s database under its policy with ``changes``: a deployment's other setting
    (a Runner applies its metastore's policy)."""
    return Metastore(policy=dataclasses.replace(store.policy, **changes), engine=store.engine)


def restart_lease(store: Metastore, lease: Lease, executor_id: str | None = None) -> Lease | None:
    """``lease`` restarted now for ``executor_id`` (default its own holder), the same attempt,
    through the holder's compare-and-set: a per-lease renewal, or a hand-over to another
    executor. None when the lease was lost or the task is gone."""
    holder = lease.executor_id if executor_id is None else executor_id

    def transition(task: TaskRow, now: int) -> tuple[dict[str, str], Lease]:
        props = transitions.renew(task.properties, executor_id=holder, now_ms=now)
        return props, Lease.from_row(after_write(task, props, now))

    _, restarted = store._holder_write(lease, transition)
    return restarted
