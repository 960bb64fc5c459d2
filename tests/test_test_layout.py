"""The test suite's own layout, as its syntax trees draw it.

Helpers live in ``tests/support/`` (and the reliability harness beside its
scenarios): a test module never imports another test module, which would run
that module's collection side effects and tie two files' edits together. The
pieces once written several times exist once: the free port, the throwaway
PostgreSQL database, the ``store`` and ``policy`` fixtures.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon_fixtures import starts_a_daemon
from tests.support.scheduling import ONE_WORKER_MODULES

TESTS = Path(__file__).resolve().parent


def _trees() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(TESTS.parent)): ast.parse(path.read_text(), str(path))
        for path in sorted(TESTS.rglob("*.py"))
    }


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def _imported_modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(base)
            # ``from tests import test_cli`` imports the module test_cli.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _definitions(tree: ast.Module, name: str) -> int:
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
    )


def _where_defined(*names: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for path, tree in _trees().items():
        count = sum(_definitions(tree, name) for name in names)
        if count:
            found[path] = count
    return found


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    trees = _trees()
    offenders = {
        path: sorted(name for name in _imported_modules(tree) if _is_test_module(name))
        for path, tree in trees.items()
    }
    assert {p: names for p, names in offenders.items() if names} == {}
    assert len(trees) > 50  # the walk found the suite


def test_the_check_sees_every_spelling_of_a_test_module_import() -> None:
    tree = ast.parse(
        "import tests.test_cli\n"
        "from tests.reliability.test_crash import x\n"
        "from tests import test_dagster_job\n"
        "from .test_races import y\n"
        "from tests.support.cli import run\n"
    )
    flagged = sorted(name for name in _imported_modules(tree) if _is_test_module(name))
    assert flagged == [
        ".test_races",
        ".test_races.y",
        "tests.reliability.test_crash",
        "tests.reliability.test_crash.x",
        "tests.test_cli",
        "tests.test_dagster_job",
    ]


def test_a_free_port_is_found_in_one_place() -> None:
    assert _where_defined("free_port", "_free_port") == {"tests/support/ports.py": 1}


def test_databases_are_created_in_one_place() -> None:
    creators = {
        path
        for path in _trees()
        if "CREATE DATABASE" in (TESTS.parent / path).read_text()
        and not path.endswith("test_test_layout.py")
    }
    assert creators == {"tests/support/postgres.py"}


def test_the_store_and_policy_fixtures_are_defined_once() -> None:
    assert _where_defined("store") == {"tests/support/metastore.py": 1}
    assert _where_defined("policy") == {"tests/support/metastore.py": 1}


def test_every_one_worker_module_exists() -> None:
    # A renamed module would silently leave its group and start its servers on every worker.
    missing = sorted(m for m in ONE_WORKER_MODULES if not (TESTS.parent / m).is_file())
    assert missing == []


def test_a_test_that_starts_a_daemon_is_slow(request: pytest.FixtureRequest) -> None:
    # What this session collected: under ``-m "not slow"`` an unmarked daemon test
    # would be here, and in a full run every daemon test is.
    unmarked = [
        item.nodeid
        for item in request.session.items
        if starts_a_daemon(item) and item.get_closest_marker("slow") is None
    ]
    assert not unmarked


def test_the_benchmarks_old_admin_url_variable_still_works_with_a_warning() -> None:
    """bench/ and tests/ read one admin URL variable; the benchmarks' old name is kept."""
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    import tests.support.postgres\n"
        "except DeprecationWarning as w:\n"
        "    print('warned:', w)\n"
    )
    env = {**os.environ, "POLARIS_PIPELINE_BENCH_PG": "postgresql+psycopg://x@127.0.0.1:1/y"}
    env.pop("POLARIS_PIPELINE_TEST_PG", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "warned: POLARIS_PIPELINE_BENCH_PG is deprecated" in out, out
    probe = "import tests.support.postgres as p; import bench.common as b; print(p.PG_ADMIN_URL)"
    got = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", probe], env=env, capture_output=True, text=True
    )
    assert got.stdout.strip() == "postgresql+psycopg://x@127.0.0.1:1/y", got
