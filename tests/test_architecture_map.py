"""docs/architecture.md's module table is the package's tree, row for row.

Every module of ``polaris_pipeline/`` has one row, in the tree's order (paths
compared part by part), and every row names a module that exists. Packages'
``__init__.py`` and ``__main__.py`` files have no row (the doc says so).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "polaris_pipeline"
DOC = ROOT / "docs" / "architecture.md"
# A row of the table: | `path/to/module.py` | its one job |
_ROW = re.compile(r"^\|\s*`([^`]+\.py)`\s*\|\s*(.*?)\s*\|\s*$")


def _map_rows() -> list[tuple[str, str]]:
    """The (path, job) rows of the table under ``## Modules``, in the doc's order."""
    text = DOC.read_text()
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return [(m[1], m[2]) for line in section.splitlines() if (m := _ROW.match(line))]


def _tree() -> list[str]:
    modules = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    ]
    return sorted(modules, key=lambda m: PurePosixPath(m).parts)


def test_the_module_map_has_every_module_once_and_nothing_else() -> None:
    paths = [path for path, _ in _map_rows()]
    assert len(paths) == len(set(paths)), "a module has two rows"
    tree = set(_tree())
    assert sorted(tree - set(paths)) == [], "modules without a row in docs/architecture.md"
    assert sorted(set(paths) - tree) == [], "rows naming no module"


def test_the_module_map_is_in_tree_order_and_says_each_job() -> None:
    rows = _map_rows()
    assert [path for path, _ in rows] == _tree()
    assert [path for path, job in rows if not job] == []
