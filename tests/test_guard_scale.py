"""The shared-location guards at scale (issue 46): index-served, bounded, never "allowed"
for want of time.

- ``polaris-pipeline guard-indexes`` creates the two indexes Polaris's schema lacks;
  with them every guard statement is an index search (PostgreSQL with sequential
  scans disabled still plans none; SQLite's plan searches, never scans);
- without them the first check warns once, naming the command;
- a guard check past its bound (``POLARIS_PIPELINE_GUARD_BOUND_S``) fails the task's
  attempt (retried, not dead) with one line naming the guard and the time taken,
  and deletes nothing.

Every case on PostgreSQL and SQLite, Polaris's schema v5.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster import DagsterInstance, ExecuteInProcessResult, RetryPolicy
from dagster.components.core.component_tree import ComponentTree
from sqlalchemy import Engine, event, text

from builders import tasks as built_tasks
from polaris_pipeline.cli.main import main as cli
from polaris_pipeline.dagster import PolarisSweeper, build_defs_from_env
from polaris_pipeline.dagster.contract import run_config_for
from polaris_pipeline.dagster.task_job import build_polaris_task_job
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.leaks.catalogs import read_catalogs
from polaris_pipeline.metastore import Metastore, overlap
from polaris_pipeline.metastore.guard_indexes import (
    LOCATIONS_INDEX,
    METADATA_FILES_INDEX,
    WRITE_PATHS_INDEX,
    create_guard_indexes,
    missing_guard_indexes,
)
from polaris_pipeline.metastore.overlap import GuardTimeout, LiveLocations
from polaris_pipeline.settings import GUARD_BOUND_ENV, URL_ENV, SettingsError
from polaris_pipeline.storage.uri import parse_location, split_uri
from polaris_pipeline.tasks.model import TaskPolicy
from tests.support.iceberg import Warehouse, table_files
from tests.support.unreferenced import live_entity

# Enough rows that reading them all takes many SQLite steps and PostgreSQL milliseconds.
ROWS = 20_000
# Pages an index search reads here (a few per equality term of the overlap query); an
# index read through is hundreds.
PAGES_OF_A_SEARCH = 120


def _bulk_live_tables(v5_store: Metastore, n: int = ROWS) -> None:
    """``n`` live tables at s3://bulk/ns/tK, in one statement."""
    pg = v5_store.engine.dialect.name == "postgresql"
    table = "polaris_schema.entities" if pg else "entities"
    json = "CAST({} AS JSONB)" if pg else "{}"
    props = json.format("'{\"location\":\"s3://bulk/ns/t' || n || '\"}'")
    internal = json.format(
        "'{\"metadata-location\":\"s3://bulk/ns/t' || n || '/metadata/00001-' || n "
        "|| '.metadata.json\"}'"
    )
    with v5_store.engine.begin() as conn:
        conn.execute(
            text(
                f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {n}) "
                f"INSERT INTO {table} (realm_id, catalog_id, id, parent_id, name, entity_version, "
                "type_code, sub_type_code, create_timestamp, drop_timestamp, purge_timestamp, "
                "to_purge_timestamp, last_update_timestamp, properties, internal_properties, "
                "grant_records_version, location_without_scheme) "
                f"SELECT 'POLARIS', 1, 5000000 + n, 2, 't' || n, 1, 7, 2, 0, 0, 0, 0, 0, "
                f"{props}, {internal}, 1, '//bulk/ns/t' || n FROM g"
            )
        )
        conn.execute(text("ANALYZE"))


@pytest.fixture
def v5_store(metastore_url: str, policy: TaskPolicy) -> Iterator[Metastore]:
    # The admin's store, also under PP_TEST_RESTRICTED_ROLE: these tests create the guard
    # indexes (the tables' owner does, as `guard-indexes` says) and seed live tables.
    s = Metastore(metastore_url, policy=policy)
    s.init_schema(5)
    yield s
    s.dispose()


class Statements:
    """The statements a block of guard checks ran, with their parameters."""

    def __init__(self, v5_store: Metastore) -> None:
        self.v5_store = v5_store
        self.seen: list[tuple[str, Any]] = []

    def __enter__(self) -> Statements:
        # On the Engine class: SQLite's metastore engine is a schema-translating proxy.
        event.listen(Engine, "before_cursor_execute", self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(Engine, "before_cursor_execute", self._on)

    def _on(self, conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if re.search(r"FROM (\w+\.)?entities\b", statement):
            self.seen.append((statement, params))


def _plans(v5_store: Metastore, statements: list[tuple[str, Any]]) -> list[str]:
    pg = v5_store.engine.dialect.name == "postgresql"
    plans = []
    with v5_store.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        if pg:
            # Chosen only where no index serves: a plan that still scans needs one.
            raw.execute("SET enable_seqscan = off")
        for statement, params in statements:
            prefix = "EXPLAIN (ANALYZE, BUFFERS) " if pg else "EXPLAIN QUERY PLAN "
            rows = raw.execute(prefix + statement, params).fetchall()
            plans.append("\n".join(str(r[-1]) for r in rows))
    return plans


def test_with_the_guard_indexes_every_guard_statement_is_an_index_search(
    v5_store: Metastore,
) -> None:
    """Overlap (every realm, equal and under), catalogs, metadata-file users, enclosing
    table: none reads the table through."""
    _bulk_live_tables(v5_store)
    version = v5_store.check_schema()
    assert create_guard_indexes(v5_store.engine, version) == [
        LOCATIONS_INDEX,
        METADATA_FILES_INDEX,
        WRITE_PATHS_INDEX,
    ]
    assert missing_guard_indexes(v5_store.engine, version) == []
    live = LiveLocations(v5_store.engine, version)
    prefix = parse_location("s3://bulk/ns/t77", directory=True)
    with Statements(v5_store) as seen:
        [overlap] = live.overlaps(prefix)
        [user] = live.metadata_users(["s3a://bulk/ns/t77/metadata/00001-77.metadata.json"])
        enclosing = live.enclosing_table(parse_location("s3://bulk/ns/t77/data", directory=True))
        if v5_store.engine.dialect.name == "postgresql":
            # The leak walk's catalogs too (SQLite's statistics may prefer a scan there).
            assert read_catalogs(v5_store.engine) == []
    assert (overlap.name, user.name, enclosing and enclosing.name) == ("t77", "t77", "t77")
    plans = _plans(v5_store, seen.seen)
    assert len(plans) >= 4
    for (statement, _), plan in zip(seen.seen, plans, strict=True):
        scans = "Seq Scan" in plan or re.search(r"\bSCAN\b", plan)
        # PostgreSQL may read a whole partial index instead: every index node needs a
        # condition (SQLite says SCAN ... USING INDEX for that).
        searches = len(re.findall(r"Index (Only )?Scan", plan))
        assert not scans and plan.count("Index Cond") >= searches, f"{statement}\n-> {plan}"
        # ... and a condition on a later column of an index is a read of all of it.
        touched = re.search(r"Buffers: shared (?:hit=(\d+))? ?(?:read=(\d+))?", plan)
        if touched is not None:
            pages = sum(int(g) for g in touched.groups() if g)
            assert pages < PAGES_OF_A_SEARCH, f"{statement}\n-> {plan}"


def test_with_the_guard_indexes_the_write_path_lookup_reads_only_rows_naming_one(
    v5_store: Metastore,
) -> None:
    """A live table writing under a prefix by its write.data.path is found through the
    partial index of the rows that name a write root, not by reading every table."""
    _bulk_live_tables(v5_store)
    live_entity(
        v5_store,
        "s3://elsewhere/ns/writer",
        name="writer",
        properties={"location": "s3://elsewhere/ns/writer", "write.data.path": "s3://bulk/ns/t9/d"},
    )
    version = v5_store.check_schema()
    create_guard_indexes(v5_store.engine, version)
    live = LiveLocations(v5_store.engine, version)
    with Statements(v5_store) as seen:
        [hit] = live.write_path_users(parse_location("s3://bulk/ns/t9", directory=True))
        assert live.write_path_users(parse_location("s3://bulk/ns/t8", directory=True)) == []
    assert hit.name == "writer" and "write.data.path is at or under the prefix" in hit.why
    lookups = [(st, p) for st, p in seen.seen if "json" in st.lower() or "?|" in st]
    assert lookups, seen.seen
    for (statement, _), plan in zip(lookups, _plans(v5_store, lookups), strict=True):
        assert WRITE_PATHS_INDEX in plan, f"{statement}\n-> {plan}"
        # The partial index read whole is these rows alone; the table is never read through.
        assert "Seq Scan" not in plan and not re.search(r"SCAN (main\.)?entities$", plan, re.M)
        touched = re.search(r"Buffers: shared (?:hit=(\d+))? ?(?:read=(\d+))?", plan)
        if touched is not None:
            assert sum(int(g) for g in touched.groups() if g) < PAGES_OF_A_SEARCH, plan


def test_without_the_guard_indexes_the_first_check_warns_once(
    v5_store: Metastore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh process's memory of the engines warned of (a database URL may be reused).
    monkeypatch.setattr(overlap, "_indexes", {})
    # The check's own bound (a resource's, say), never the environment's, is the one said.
    monkeypatch.setenv(GUARD_BOUND_ENV, "45")
    live = LiveLocations(v5_store.engine, v5_store.check_schema(), bound_s=7)
    prefix = parse_location("s3://bulk/ns/t1", directory=True)
    with caplog.at_level(logging.WARNING, logger="polaris_pipeline.metastore.overlap"):
        live.overlaps(prefix)
        live.metadata_users(["s3://bulk/ns/t1/metadata/x.metadata.json"])
        LiveLocations(v5_store.engine, v5_store.check_schema()).overlaps(prefix)
    [warning] = [r.getMessage() for r in caplog.records]
    assert LOCATIONS_INDEX in warning and METADATA_FILES_INDEX in warning
    assert "polaris-pipeline guard-indexes" in warning and GUARD_BOUND_ENV in warning
    assert "bounded by 7 s" in warning, warning


def test_with_the_guard_indexes_no_warning(
    v5_store: Metastore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overlap, "_indexes", {})
    create_guard_indexes(v5_store.engine, v5_store.check_schema())
    with caplog.at_level(logging.WARNING, logger="polaris_pipeline.metastore.overlap"):
        LiveLocations(v5_store.engine, v5_store.check_schema()).overlaps(
            parse_location("s3://bulk/ns/t1", directory=True)
        )
    assert caplog.records == []


@pytest.mark.parametrize(
    "spelt",
    ["{path}", "file:{path}", "FILE://localhost{path}", "file://{path}/"],
    ids=["bare", "file-colon", "upper-localhost", "extra-slashes"],
)
def test_the_indexed_metadata_lookup_finds_every_spelling_of_the_file(
    v5_store: Metastore, spelt: str
) -> None:
    """The lookup by file name misses no spelling a location compares equal to."""
    create_guard_indexes(v5_store.engine, v5_store.check_schema())
    path = "/wh/ns/t/metadata/00003-abc.metadata.json"
    raw = spelt.format(path=path)
    assert parse_location(raw, directory=True) == parse_location(f"file://{path}", directory=True)
    live_entity(v5_store, "s3://elsewhere/t", name="registered", internal_properties={
        "metadata-location": raw,
    })  # fmt: skip
    live = LiveLocations(v5_store.engine, v5_store.check_schema())
    [hit] = live.metadata_users([f"file://{path}"])
    assert hit.name == "registered"


def test_a_guard_past_its_bound_fails_the_attempt_and_deletes_nothing(
    v5_store: Metastore, local_warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metastore too large for the bound (no guard index): the attempt fails, retried,
    with one line naming the guard and the time; every file is still there."""
    _bulk_live_tables(v5_store)
    table = local_warehouse.build("t", appends=1)
    files = table_files(table)
    task = built_tasks.drop_table_task(table)
    v5_store.insert_tasks([task])
    monkeypatch.setenv(GUARD_BOUND_ENV, "0.001")

    with Runner(v5_store, local_warehouse.config, resolver=local_warehouse.resolver) as runner:
        [outcome] = sweep_tasks(runner, ["POLARIS"])

    assert (outcome.status, outcome.permanent) == (Status.FAILED, False), outcome.error
    assert outcome.error is not None and "\n" not in outcome.error
    assert "GuardTimeout" in outcome.error
    # Whichever check the bound stops first (SQLite may skip-scan Polaris's index).
    assert re.search(
        r"the (shared-location overlap|metadata-file) guard gave no answer within its "
        r"bound of 0\.001 s \(took \d+\.\d+ s\)",
        outcome.error,
    ), outcome.error
    row = v5_store.get_task("POLARIS", task.id)
    assert row is not None and row.status != "dead" and not row.failure_permanent
    assert all(Path(split_uri(f)[1]).exists() for f in files), "a file was deleted"


def test_the_metastore_s_bound_reaches_the_runner_s_checks(
    v5_store: Metastore,
    local_warehouse: Warehouse,
    policy: TaskPolicy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's --guard-bound-s travels as the store's bound (the environment's unset)."""
    monkeypatch.delenv(GUARD_BOUND_ENV, raising=False)
    _bulk_live_tables(v5_store)
    table = local_warehouse.build("t", appends=1)
    task = built_tasks.drop_table_task(table)
    v5_store.insert_tasks([task])
    bounded = Metastore(policy=policy, engine=v5_store.engine, guard_bound_s=0.001)

    with Runner(bounded, local_warehouse.config, resolver=local_warehouse.resolver) as runner:
        [outcome] = sweep_tasks(runner, ["POLARIS"])

    assert outcome.status is Status.FAILED, outcome.error
    assert outcome.error is not None and "within its bound of 0.001 s" in outcome.error


def _guard_failure(result: ExecuteInProcessResult) -> str:
    """The one-line error the run's root step failed with."""
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return str(failure.event_specific_data)


@pytest.mark.parametrize("door", ["component", "environment"])
def test_a_bound_set_through_a_deployment_s_door_reaches_the_run_s_guard_checks(
    door: str,
    v5_store: Metastore,
    local_warehouse: Warehouse,
    policy: TaskPolicy,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The component's ``metastore: {guard: {bound_s: ...}}`` block, or the environment the
    code location is built from, bounds the checks of a run's steps, which read no
    variable of their own (unset here)."""
    monkeypatch.delenv(GUARD_BOUND_ENV, raising=False)
    _bulk_live_tables(v5_store)
    task = built_tasks.drop_table_task(local_warehouse.build("t", appends=1))
    v5_store.insert_tasks([task])
    url = v5_store.url.render_as_string(hide_password=False)
    if door == "component":
        metastore = {
            "url": url,
            "grace_ms": policy.grace_ms,
            "lease_timeout_ms": policy.lease_timeout_ms,
            "guard": {"bound_s": 0.001},
        }
        component = PolarisSweeper.resolve_from_yaml(yaml.safe_dump({"metastore": metastore}))
        defs = component.build_defs(ComponentTree.for_test().load_context)
    else:
        env = {
            URL_ENV: url,
            "POLARIS_PIPELINE_GRACE_MS": str(policy.grace_ms),
            "POLARIS_PIPELINE_LEASE_TIMEOUT_MS": str(policy.lease_timeout_ms),
            GUARD_BOUND_ENV: "0.001",
        }
        monkeypatch.setenv(URL_ENV, url)  # the resource's EnvVar, read in the run
        defs = build_defs_from_env(env)

    # The deployment's resources, in the task job without its retries' delays.
    job = build_polaris_task_job("polaris_task_job_once", retry_policy=RetryPolicy(max_retries=0))
    result = job.execute_in_process(
        run_config=run_config_for("POLARIS", task.id),
        instance=instance,
        resources={key: (defs.resources or {})[key] for key in ("metastore", "storage")},
        raise_on_error=False,
    )

    assert not result.success
    message = _guard_failure(result)
    assert "GuardTimeout" in message and "within its bound of 0.001 s" in message, message
    row = v5_store.get_task("POLARIS", task.id)
    assert row is not None and row.status != "dead" and not row.failure_permanent


def test_a_bound_that_is_no_number_is_one_clear_error(
    v5_store: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GUARD_BOUND_ENV, "soon")
    with pytest.raises(
        SettingsError,
        match=f"^{GUARD_BOUND_ENV}='soon': Input should be a valid number, unable to parse",
    ):
        LiveLocations(v5_store.engine, 5)
    monkeypatch.setenv(GUARD_BOUND_ENV, "0")
    with pytest.raises(SettingsError, match=f"^{GUARD_BOUND_ENV}='0': .*greater than 0"):
        LiveLocations(v5_store.engine, 5)
    monkeypatch.setenv(GUARD_BOUND_ENV, "2.5")
    assert LiveLocations(v5_store.engine, 5).bound_s == 2.5


def test_the_guard_indexes_command_checks_and_creates(
    v5_store: Metastore, capsys: pytest.CaptureFixture[str]
) -> None:
    url = v5_store.engine.url.render_as_string(hide_password=False)
    assert cli(["guard-indexes", "--check", "--metastore", url]) == 1
    assert f"missing: {LOCATIONS_INDEX}" in capsys.readouterr().out
    assert cli(["guard-indexes", "--metastore", url]) == 0
    out = capsys.readouterr().out
    assert f"created {LOCATIONS_INDEX}" in out and f"created {METADATA_FILES_INDEX}" in out
    assert cli(["guard-indexes", "--check", "--metastore", url]) == 0
    assert cli(["guard-indexes", "--metastore", url]) == 0
    assert "already" in capsys.readouterr().out
    v5_store.check_schema()  # Polaris's schema check still accepts the database


def test_a_check_of_a_held_connection_past_its_bound_is_a_guard_timeout(
    v5_store: Metastore,
) -> None:
    """The leak walk's one connection is bounded too (once for its session)."""
    _bulk_live_tables(v5_store)
    live = LiveLocations(v5_store.engine, v5_store.check_schema(), bound_s=0.001)
    with live.held(), pytest.raises(GuardTimeout, match=r"the metadata-file guard gave no"):
        live.metadata_users(["s3://bulk/ns/t1/metadata/00001-1.metadata.json"])
