"""The test suite's own layout, as its syntax trees draw it.

Helpers live in ``tests/support/`` (and the reliability harness beside its
scenarios), or in ``builders/`` when the demo or the benchmarks use them too
(``bench/`` and ``builders/`` import nothing of ``tests/``): a test module never
imports another test module, which would run that module's collection side effects
and tie two files' edits together. The pieces once written several times exist
once: the free port, the throwaway PostgreSQL database, the ``store`` and
``policy`` fixtures.
"""

from __future__ import annotations

import ast
import collections
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon_fixtures import starts_a_daemon
from tests.support.scheduling import ONE_WORKER_MODULES

TESTS = Path(__file__).resolve().parent


# What the suite shares with the demo and the benchmarks lives in builders/.
SHARED = ("tests", "builders", "bench")


def _trees(*dirs: str) -> dict[str, ast.Module]:
    """Each module under ``dirs`` (the suite alone by default) -> its syntax tree."""
    return {
        str(path.relative_to(TESTS.parent)): _tree(path)
        for name in dirs or ("tests",)
        for path in sorted((TESTS.parent / name).rglob("*.py"))
    }


@functools.cache
def _tree(path: Path) -> ast.Module:
    # Parsed once per process: five checks walk the same 40,000 lines (5 s of CPU each time).
    return ast.parse(path.read_text(), str(path))


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


def _definitions(tree: ast.Module) -> collections.Counter[str]:
    """How many times each function name is defined in ``tree``."""
    return collections.Counter(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )


@functools.cache
def _definitions_by_path() -> dict[str, collections.Counter[str]]:
    # One walk of every tree for the checks of where a name is defined.
    return {path: _definitions(tree) for path, tree in _trees(*SHARED).items()}


def _where_defined(*names: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for path, defined in _definitions_by_path().items():
        count = sum(defined[name] for name in names)
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


def _imports_of_tests(trees: dict[str, ast.Module], package: str = "tests") -> set[tuple[str, str]]:
    """``(path, module of package)`` for each import of ``package``, in a function too."""
    found: set[tuple[str, str]] = set()
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            found.update((path, m) for m in modules if m.split(".")[0] == package)
    return found


def test_the_benchmarks_and_builders_import_nothing_of_the_suite() -> None:
    # The suite may import builders/; bench/ and builders/ run without tests/ (what
    # both use lives in builders/), so a test helper's edit cannot break a benchmark.
    trees = _trees("bench", "builders")
    assert len(trees) > 20  # the walk found them
    assert _imports_of_tests(trees) == set()
    probe = ast.parse("def f() -> None:\n    import tests.support.tasks\n")
    assert _imports_of_tests({"bench/x.py": probe}) == {("bench/x.py", "tests.support.tasks")}


def test_the_builders_import_nothing_of_the_benchmarks() -> None:
    # builders/ is what the demo, the suite and bench/ share: it sits below all three.
    trees = _trees("builders")
    assert _imports_of_tests(trees, "bench") == set()
    probe = ast.parse("from bench.common import temp_database\n")
    assert _imports_of_tests({"builders/x.py": probe}, "bench") == {
        ("builders/x.py", "bench.common")
    }


def test_a_free_port_is_found_in_one_place() -> None:
    assert _where_defined("free_port", "_free_port") == {"builders/ports.py": 1}


def test_databases_are_created_in_one_place() -> None:
    creators = {
        path
        for path in _trees(*SHARED)
        if "CREATE DATABASE" in (TESTS.parent / path).read_text()
        and not path.endswith("test_test_layout.py")
    }
    assert creators == {"builders/postgres.py"}


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


def test_the_benchmarks_and_the_tests_read_one_admin_url_variable() -> None:
    """bench/ and tests/ reach the test PostgreSQL by POLARIS_PIPELINE_TEST_PG alone."""
    env = {**os.environ, "POLARIS_PIPELINE_TEST_PG": "postgresql+psycopg://x@127.0.0.1:1/y"}
    probe = "import builders.postgres as p; import bench.common as b; print(p.PG_ADMIN_URL)"
    got = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert got.stdout.strip() == "postgresql+psycopg://x@127.0.0.1:1/y", got
