"""The package's layers, as its imports draw them.

The engine (everything under ``polaris_pipeline`` but ``dagster/`` and
``testing/``) imports no Dagster, and nothing of the package imports the test and
demo builders of ``polaris_pipeline.testing``; the integration library never
imports this repository's own code location (``assets``, ``jobs``, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "polaris_pipeline"
CODE_LOCATION = {"assets", "jobs", "resources", "sensors", "definitions", "celery_definitions"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(*exclude: str) -> dict[Path, set[str]]:
    return {
        path: _imports(path)
        for path in PACKAGE.rglob("*.py")
        if not any(part in exclude for part in path.relative_to(PACKAGE).parts[:-1])
    }


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_engine_imports_no_dagster() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in names if _top(n).startswith("dagster"))
        for path, names in _modules("dagster", "testing").items()
    }
    assert {p: n for p, n in offenders.items() if n} == {}
    assert len(offenders) > 20  # the walk found the engine


def test_nothing_of_the_package_imports_the_testing_builders() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            n for n in names if n.startswith("polaris_pipeline.testing")
        )
        for path, names in _modules("testing").items()
    }
    assert {p: n for p, n in offenders.items() if n} == {}


def test_the_library_never_imports_the_repositorys_code_location() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in names if _top(n) in CODE_LOCATION)
        for path, names in _modules().items()
    }
    assert {p: n for p, n in offenders.items() if n} == {}
