"""docs/security.md: each rule names the tests that hold it, and each named test exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs/security.md"
_TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def missing_tests(markdown: str, root: Path) -> list[str]:
    """Each ``tests/x.py::test_y`` the text names whose file or function does not exist."""
    missing = []
    for path, name in _TEST_REF.findall(markdown):
        source = root / path
        if not source.is_file() or not re.search(rf"^def {name}\(", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    return missing


def test_every_test_the_security_page_names_exists() -> None:
    text = DOC.read_text()
    assert len(_TEST_REF.findall(text)) >= 9
    assert missing_tests(text, ROOT) == []
    assert missing_tests("`tests/test_supply_chain.py::test_no_such_test`", ROOT) == [
        "tests/test_supply_chain.py::test_no_such_test"
    ]


def test_every_rule_says_what_holds_it() -> None:
    sections = re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]
    rules = [s for s in sections if not s.startswith(("Threat model", "Reporting"))]
    assert len(rules) == 8
    for rule in rules:
        assert "\nHeld by:" in rule, rule.splitlines()[0]
