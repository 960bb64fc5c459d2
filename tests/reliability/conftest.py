"""Fixtures of the reliability scenarios.

- ``rel_db``: a PostgreSQL database of this test only (so killing its connections
  touches nobody else's), with the Polaris schema, dropped afterwards.
- ``workers``: starts sweeper subprocesses; none outlives the test.
- ``scenario``: the record of one scenario (load, fault, what was lost, measurements),
  written as JSON to the results directory when the test ends, with its outcome;
  ``python -m tests.reliability.report`` renders ``docs/reliability.md`` from them.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from builders.postgres import PG_ADMIN_URL, database_url, throwaway_database
from builders.restricted_role import restrict, restricted_role_wanted
from polaris_pipeline.metastore import Metastore
from tests.reliability.harness import REPO, PgRole, RelDb, Scenario, Workers
from tests.support.metastore import as_pipeline

RESULTS_ENV = "PP_RELIABILITY_RESULTS"
DEFAULT_RESULTS = REPO / "build" / "reliability-results"


def results_dir() -> Path:
    return Path(os.environ.get(RESULTS_ENV) or DEFAULT_RESULTS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


# -- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture
def rel_db() -> Iterator[RelDb]:
    with throwaway_database("pp_rel") as name:
        store = Metastore(database_url(name))
        store.init_schema()
        store.dispose()
        # The pipeline's URL: the guide's restricted role under PP_TEST_RESTRICTED_ROLE.
        yield RelDb(name, as_pipeline(database_url(name)), PG_ADMIN_URL)


@pytest.fixture
def pg_role(rel_db: RelDb) -> Iterator[PgRole]:
    """A login role with a distinctive password, granted the test database's Polaris schema
    (under ``PP_TEST_RESTRICTED_ROLE``, the operator guide's grants and policy).

    pg_hba trusts 127.0.0.1, so the password is never checked, but it is in every URL
    the scenario uses: exactly what must never be printed.
    """
    user = f"pp_secret_{uuid.uuid4().hex[:8]}"
    # Characters that URL-encode (@ : / %) so both spellings can be searched for.
    password = f"Pp@ss:w0rd/{uuid.uuid4().hex[:10]}%SECRET"
    admin = rel_db.admin()
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {user} LOGIN PASSWORD '{password}'"))
        conn.execute(text(f'GRANT CONNECT ON DATABASE "{rel_db.name}" TO {user}'))
    admin.dispose()
    if restricted_role_wanted():
        # The guide's grants and row-level security (a role without a policy sees no row).
        restrict(rel_db.name, user)
    else:
        rel_db.execute(f"GRANT USAGE ON SCHEMA polaris_schema TO {user}")
        rel_db.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA polaris_schema TO {user}")
    base = make_url(rel_db.url)
    url = URL.create(
        "postgresql+psycopg",
        username=user,
        password=password,
        host=base.host,
        port=base.port,
        database=rel_db.name,
    ).render_as_string(hide_password=False)
    try:
        yield PgRole(user, password, url)
    finally:
        for _ in range(30):
            try:
                rel_db.execute(f"DROP OWNED BY {user}")
                admin = rel_db.admin()
                with admin.connect() as conn:
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE usename = :u"
                        ),
                        {"u": user},
                    )
                    conn.execute(text(f"DROP ROLE IF EXISTS {user}"))
                admin.dispose()
                break
            except Exception:
                time.sleep(1)  # PostgreSQL restarting, or a backend still exiting


# -- workers ---------------------------------------------------------------------------


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    directory = tmp_path / "workers"
    directory.mkdir()
    pool = Workers(directory)
    try:
        yield pool
    finally:
        pool.close()


# -- scenario records ------------------------------------------------------------------


@functools.cache
def _pg_version() -> str:
    engine = create_engine(PG_ADMIN_URL, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return "PostgreSQL " + str(conn.execute(text("SHOW server_version")).scalar_one())
    except Exception:
        return "PostgreSQL (version unknown)"
    finally:
        engine.dispose()


def _slug(text_: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text_).strip("_")[:150]


@pytest.fixture
def scenario(request: pytest.FixtureRequest) -> Iterator[Scenario]:
    marker = request.node.get_closest_marker("scenario")
    if marker is None:
        raise RuntimeError("reliability tests carry @pytest.mark.scenario(number, title)")
    number, title = marker.args
    record = Scenario(
        number=number, title=title, test=request.node.nodeid, line=request.node.location[1] or 0
    )
    started = time.monotonic()
    yield record
    record.seconds = round(time.monotonic() - started, 1)
    call = getattr(request.node, "rep_call", None)
    if call is None:
        record.outcome = "error"
    elif call.skipped:
        record.outcome = "skipped"
        record.failure = str(call.longrepr[-1]) if isinstance(call.longrepr, tuple) else None
    elif call.failed:
        record.outcome = "failed"
        lines = [ln for ln in call.longreprtext.splitlines() if ln.startswith("E ")]
        record.failure = "\n".join(lines[:12]) or call.longreprtext[-2000:]
    else:
        record.outcome = "passed"
    record.metrics.setdefault("cpus", os.cpu_count())
    record.metrics.setdefault("python", platform.python_version())
    record.metrics.setdefault("postgresql", _pg_version())
    record.metrics.setdefault("load_average", round(os.getloadavg()[0], 1))
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{_slug(record.test)}.json").write_text(
        json.dumps(asdict(record), indent=2, sort_keys=True, default=str), encoding="utf-8"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "scenario(number, title): a reliability scenario recorded for the report"
    )
    config.addinivalue_line(
        "markers", "reliability: the reliability scenarios (deselect with -m 'not reliability')"
    )


HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.reliability)
            item.add_marker(pytest.mark.slow)
