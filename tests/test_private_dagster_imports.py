"""``dagster._`` imports only where Dagster has no public API, each saying why."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "polaris_pipeline"
_PRIVATE_IMPORT = re.compile(r"^\s*(from|import)\s+dagster\._")


def private_imports_without_a_reason(source: str) -> list[int]:
    """The line numbers of the ``dagster._`` imports in ``source`` whose line above is no
    comment (the one line that says which public API is missing)."""
    lines = source.splitlines()
    return [
        number
        for number, line in enumerate(lines, start=1)
        if _PRIVATE_IMPORT.match(line)
        and (number < 2 or not lines[number - 2].lstrip().startswith("#"))
    ]


def test_the_rule_sees_an_import_without_a_reason() -> None:
    assert private_imports_without_a_reason("import os\nfrom dagster._core import x\n") == [2]
    assert private_imports_without_a_reason("# no public name\nfrom dagster._core import x\n") == []
    assert private_imports_without_a_reason("from dagster import asset\n") == []


def test_each_private_dagster_import_says_why() -> None:
    found = {
        str(path.relative_to(PACKAGE)): missing
        for path in sorted(PACKAGE.rglob("*.py"))
        if (missing := private_imports_without_a_reason(path.read_text()))
    }
    assert found == {}
