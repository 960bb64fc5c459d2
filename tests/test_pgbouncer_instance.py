"""Dagster's database behind PgBouncer, configured from ``deploy/pgbouncer/`` as shipped.

dagster-postgres opens a new connection for every event a run stores; without a
pooler each is a new PostgreSQL backend. Here a real ``dagster-daemon`` with
``deploy/dagster.yaml``'s queue and launcher drains orphaned tasks with its
instance pointed at a PgBouncer of the test's own (example config, pool
settings unchanged, a password of its own): every task is done by one run, and
PostgreSQL started no more sessions on Dagster's database than the pool holds,
while Dagster stored many times more events than that.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterRunStatus
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from builders.daemon import DaemonConfig, DaemonHarness
from builders.pgbouncer import (
    EXAMPLE,
    EXAMPLE_AUTH_TYPE,
    local_config,
    pool_setting,
    running_pgbouncer,
    server_sessions,
)
from tests.support.daemon_fixtures import existing, metastore_for, orphaned_batch_tasks
from tests.support.metastore import PG_ADMIN_URL

REALM = "POLARIS"
TASKS = 8


def _events_stored(database: str) -> int:
    engine = create_engine(
        make_url(PG_ADMIN_URL).set(database=database).render_as_string(False), poolclass=NullPool
    )
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM event_logs")).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_daemon_drains_tasks_through_pgbouncer_on_a_few_server_connections(
    tmp_path: Path, pg_url: str, dagster_pg_env: dict[str, str]
) -> None:
    store = metastore_for(pg_url)
    tasks, every_file = orphaned_batch_tasks(tmp_path, REALM, TASKS, files_each=3)
    store.insert_tasks(tasks)
    database = dagster_pg_env["DAGSTER_PG_DB"]

    with running_pgbouncer(PG_ADMIN_URL, database) as bouncer:
        config = DaemonConfig(metastore_url=pg_url, postgres=bouncer.dagster_pg_env())
        with DaemonHarness(tmp_path / "dagster_home", config) as daemon:
            daemon.wait_for(
                lambda: store.count_tasks() == 0,
                timeout_s=60 + TASKS * 15,
                what=f"all {TASKS} tasks done",
                interval_s=2,
            )
            runs = daemon.wait_runs_finished(timeout_s=60)
            statuses = [r.status for r in runs]
            task_ids = {r.tags.get("polaris/task_id") for r in runs}
        log = bouncer.log()

    assert existing(every_file) == []
    assert statuses == [DagsterRunStatus.SUCCESS] * TASKS
    assert task_ids == {str(t.id) for t in tasks}
    assert "ERROR" not in log, log[-3000:]
    # PgBouncer is stopped: every server backend has ended and flushed its count.
    sessions = server_sessions(PG_ADMIN_URL, database)
    pool_size = int(pool_setting("default_pool_size"))
    events = _events_stored(database)
    assert 1 <= sessions <= pool_size, (sessions, pool_size)
    # Each of these was written on a connection of its own (NullPool).
    assert events >= 5 * pool_size, events


def test_the_local_pgbouncer_refuses_an_example_that_changed() -> None:
    """The lines the tests replace are the example's: a renamed one fails, not passes."""
    example = EXAMPLE.read_text(encoding="utf-8")
    server = make_url(PG_ADMIN_URL)
    config = local_config(example, server=server, database="d", port=1, workdir=Path("/w"))
    settings = "\n".join(line for line in config.splitlines() if not line.startswith(";"))
    assert "db.example" not in settings and "/etc/pgbouncer" not in settings
    assert "listen_addr = 127.0.0.1" in config.splitlines()
    with pytest.raises(ValueError, match="listen_port = 6432"):
        local_config(
            example.replace("listen_port = 6432", "listen_port = 6433"),
            server=server,
            database="d",
            port=1,
            workdir=Path("/w"),
        )


def test_the_example_pools_in_session_mode_with_the_pool_settings_included() -> None:
    assert pool_setting("pool_mode") == "session"
    lines = EXAMPLE.read_text().splitlines()
    assert "%include /etc/pgbouncer/dagster-pool.ini" in lines
    # The cheap login is acceptable only because the password stays on loopback.
    assert "listen_addr = 127.0.0.1" in lines
    assert f"auth_type = {EXAMPLE_AUTH_TYPE}" in lines and EXAMPLE_AUTH_TYPE != "trust"


def test_the_example_refuses_a_wrong_password(dagster_pg_env: dict[str, str]) -> None:
    database = dagster_pg_env["DAGSTER_PG_DB"]
    with running_pgbouncer(PG_ADMIN_URL, database) as bouncer:
        url = URL.create(
            "postgresql+psycopg2",
            username=bouncer.username,
            host="127.0.0.1",
            port=bouncer.port,
            database=database,
        )
        for password in ("wrong", "", bouncer.password[:-1]):
            engine = create_engine(url.set(password=password), poolclass=NullPool)
            with pytest.raises(
                OperationalError, match=r"authentication failed|no password supplied"
            ):
                engine.connect()
            engine.dispose()
        engine = create_engine(url.set(password=bouncer.password), poolclass=NullPool)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar_one() == database
        engine.dispose()
