"""One closing line per Polaris release for tests/test_polaris_classes.py:
``polaris 1.7.0: N passed, M failed`` (an error in setup or teardown counts as failed).

The tests name their release in ``user_properties`` (``polaris_release``).
"""

from __future__ import annotations

from collections import Counter

from _pytest.terminal import TerminalReporter


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    passed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for key in ("passed", "failed", "error"):
        for report in terminalreporter.stats.get(key, []):
            release = dict(getattr(report, "user_properties", ())).get("polaris_release")
            if release is None:
                continue
            if key == "passed" and report.when == "call":
                passed[release] += 1
            elif key != "passed":
                failed[release] += 1
    for release in sorted({*passed, *failed}):
        terminalreporter.write_line(
            f"polaris {release}: {passed[release]} passed, {failed[release]} failed"
        )
