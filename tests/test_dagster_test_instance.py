"""The tests' Dagster instances start from a copy of an empty instance's SQLite files:
the same databases Dagster creates, each test's its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dagster import DagsterInstance, DagsterRun, job, op

from tests.support.dagster import (
    NO_CAPTURED_LOGS,
    NO_TELEMETRY,
    SQLITE_STORAGE_DIRS,
    empty_sqlite_storage,
    temp_instance,
)


@op
def nothing() -> None:
    pass


@job
def one_step() -> None:
    nothing()


def _databases(home: Path) -> list[Path]:
    return sorted(
        p.relative_to(home) for name in SQLITE_STORAGE_DIRS for p in (home / name).rglob("*.db")
    )


def _schema(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY 1, 2")
        shape = [tuple(row) for row in objects]
        if any(row[1] == "alembic_version" for row in shape):
            shape += [tuple(r) for r in conn.execute("SELECT * FROM alembic_version")]
    return shape


def _runs(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])


def test_a_copied_instance_has_the_databases_dagster_creates(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    overrides = {**NO_TELEMETRY, **NO_CAPTURED_LOGS}
    DagsterInstance.local_temp(str(fresh), overrides=overrides).dispose()
    with temp_instance(tmp_path / "copied"):
        pass
    copied = tmp_path / "copied"
    assert _databases(copied) == _databases(fresh) != []
    for db in _databases(fresh):
        assert _schema(copied / db) == _schema(fresh / db), db


def test_each_instance_writes_to_its_own_copy(tmp_path: Path) -> None:
    with temp_instance(tmp_path / "one") as one:
        result = one_step.execute_in_process(instance=one)
        assert isinstance(one.get_run_by_id(result.run_id), DagsterRun)
    with temp_instance(tmp_path / "two") as two:
        assert two.get_runs() == []
    assert _runs(tmp_path / "one" / "history" / "runs.db") == 1
    assert _runs(empty_sqlite_storage() / "history" / "runs.db") == 0


def test_a_home_with_storage_keeps_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with temp_instance(home) as first:
        run_id = one_step.execute_in_process(instance=first).run_id
    with temp_instance(home) as again:
        assert again.get_run_by_id(run_id) is not None


def test_an_instance_stored_elsewhere_gets_no_copy(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    storage = {"storage": {"sqlite": {"base_dir": str(elsewhere)}}}
    with temp_instance(tmp_path / "home", overrides=storage) as instance:
        assert instance.get_runs() == []
    assert not any((tmp_path / "home" / name).exists() for name in SQLITE_STORAGE_DIRS)
    assert (elsewhere / "history" / "runs.db").exists()
