"""The Polaris releases' verdict on tests/test_polaris_classes.py,
tests/test_polaris_oracle.py and tests/test_polaris_oracle_faults.py, per release.

- One closing line per release: ``polaris 1.7.0: N passed, M failed, K not served`` (an
  error in setup or teardown counts as failed; a case skipped with a reason starting
  ``not served:`` counts as not served, never as passed).
- With ``PP_POLARIS_COMPAT_DOC`` naming a file (``make test-polaris`` sets it to
  docs/polaris-compatibility.md), that page is written from the same run: each release,
  each case's outcome and what the case checks (its docstring's first paragraph, or its
  name), and what a release's tests recorded in ``user_properties`` (``polaris_fact:*``,
  and ``polaris_difference:*``: a difference between Polaris and us, valued by its reason).

The tests name their release in ``user_properties`` (``polaris_release``).
"""

from __future__ import annotations

import datetime
import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from _pytest.terminal import TerminalReporter

DOC_ENV = "PP_POLARIS_COMPAT_DOC"
_FACT = "polaris_fact:"
_DIFFERENCE = "polaris_difference:"
_OUTCOME_WORD = {"passed": "passed", "failed": "FAILED", "error": "ERROR"}
NOT_SERVED = "not served:"


# Seconds each test module took in this run (setup, call and teardown: the install
# check and the JVMs included), for the page's cost section.
_SECONDS: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "polaris" in report.nodeid.split("::")[0]:
        _SECONDS[report.nodeid.split("::")[0]] += report.duration


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def _case_name(report: pytest.TestReport) -> str:
    return report.nodeid.split("::")[-1].split("[")[0]


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    passed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    unserved: Counter[str] = Counter()
    outcomes: dict[str, dict[str, str]] = defaultdict(dict)
    facts: dict[str, dict[str, str]] = defaultdict(dict)
    differences: dict[str, dict[str, str]] = defaultdict(dict)
    for key in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(key, []):
            props = dict(getattr(report, "user_properties", ()))
            release = props.get("polaris_release")
            if release is None:
                continue
            for name, value in props.items():
                if str(name).startswith(_FACT):
                    facts[release][str(name)[len(_FACT) :]] = str(value)
                elif str(name).startswith(_DIFFERENCE):
                    differences[release][str(name)[len(_DIFFERENCE) :]] = str(value)
            if key == "passed" and report.when == "call":
                passed[release] += 1
                outcomes[release].setdefault(_case_name(report), "passed")
            elif key == "skipped":
                reason = _skip_reason(report)
                if reason.startswith(NOT_SERVED):
                    unserved[release] += 1
                    outcomes[release][_case_name(report)] = reason.rstrip(".")
                else:  # a skip for any other reason is no verdict: counted as failed
                    failed[release] += 1
                    outcomes[release][_case_name(report)] = f"SKIPPED: {reason}"
            elif key != "passed":
                failed[release] += 1
                outcomes[release][_case_name(report)] = _OUTCOME_WORD[key]
    releases = sorted({*passed, *failed, *unserved})
    for release in releases:
        terminalreporter.write_line(
            f"polaris {release}: {passed[release]} passed, {failed[release]} failed, "
            f"{unserved[release]} not served"
        )
    target = os.environ.get(DOC_ENV, "").strip()
    if target and releases:
        docs = _case_docs(terminalreporter.config)
        counts = {r: (passed[r], failed[r], unserved[r]) for r in releases}
        Path(target).write_text(_page(releases, outcomes, facts, differences, docs, counts))
        terminalreporter.write_line(f"wrote {target}")


def _case_docs(config: pytest.Config) -> dict[str, str]:
    """Each collected case's name -> the first paragraph of its docstring."""
    docs: dict[str, str] = {}
    session = getattr(config, "_pp_session", None)
    for item in getattr(session, "items", []) if session is not None else []:
        doc = (getattr(getattr(item, "function", None), "__doc__", None) or "").strip()
        docs.setdefault(item.name.split("[")[0], " ".join(doc.split("\n\n")[0].split()))
    return docs


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config._pp_session = session  # type: ignore[attr-defined]


def _page(
    releases: list[str],
    outcomes: dict[str, dict[str, str]],
    facts: dict[str, dict[str, str]],
    differences: dict[str, dict[str, str]],
    docs: dict[str, str],
    counts: dict[str, tuple[int, int, int]],
) -> str:
    cases = sorted({case for per in outcomes.values() for case in per})
    fact_names = sorted({name for per in facts.values() for name in per})
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    lines = [
        "# Polaris compatibility",
        "",
        f"Generated by `make test-polaris` on {today} from tests/test_polaris_classes.py,",
        "tests/test_polaris_oracle.py and tests/test_polaris_oracle_faults.py: do not edit by",
        "hand. Each release's own classes",
        "(polaris-core, and polaris-runtime-service where the registry serves it) judge the",
        "rows our code writes, through our small Java harness (tests/polaris/harness). No",
        "Polaris server could be assembled from the registry this project reaches (its server",
        "modules are not served), so these are the release's classes, not its running server.",
        "A check whose Polaris class the registry does not serve at a release is `not served`",
        "there, with the reason.",
        "",
        "tests/test_polaris_oracle.py runs Polaris 1.4.1's own purge beside ours",
        "(tests/polaris/oracle): per table shape, (A) Polaris's executor plans and runs its",
        "purge, (B) we run ours, (C) Polaris's executor runs the children we wrote, on the same",
        "files; the `oracle, ...` facts below give the files each deleted and the rows each",
        "left, and every file we delete beyond Polaris is listed with its reason. The executor",
        "is the release's own TaskExecutorImpl, over its in-memory metastore, with the three",
        "handlers its init() registers (TableCleanupTaskHandler, ManifestFileCleanupTaskHandler,",
        "BatchFileCleanupTaskHandler, with a TaskFileIOSupplier): its attempts, the delays",
        "between them, the children the table handler hands back to it and the rows it drops",
        "are its own. It is built outside CDI with three more jars Maven Central serves",
        "(jakarta.enterprise.cdi-api 4.1.0, opentelemetry-api and -context 1.44.1) and 22",
        "empty stand-ins for the API model classes its task events name, whose modules are",
        "not served (tests/polaris/harness/stand-ins/empty-classes, one line each saying why).",
        "At 1.0, 1.6 and 1.7 the executor and handlers are in polaris-runtime-service, which",
        "is not served. A table pyiceberg writes at format version 3 is a shape where",
        "pyiceberg can write one; the `oracle, pyiceberg v3` line says whether it could in",
        "this run, and its error where not.",
        "Installing 1.4.1 (scripts/install-polaris-classes.sh, measured 2026-12-06 on the",
        "shared 2-core machine): 365 s on a first run with an empty Maven cache (53 MB",
        "downloaded), 131 s with Maven's cache warm, 2 to 4 s once installed (the stamp",
        "check and the pin check of every jar).",
        "A dropped view's row runs through (A) and (B) too: 1.4.1's table handler takes it",
        "and fails reading the view metadata as a table's, so Polaris keeps the row and",
        "deletes nothing (the `oracle, a dropped view` lines). Where Polaris's purge fails",
        "part-way (storage refusing deletes, a run stopped after 5 deletes), the rows it leaves",
        "are finished by our CLI sweep and, in one case, by our sensor and runs through a real",
        "`dagster-daemon`. The reliability worker's Polaris-style executor is held to the",
        "oracle: the same BATCH rows leave the same rows, files and delete calls in both.",
        "",
        "| release | passed | failed | not served |",
        "|---|---|---|---|",
        *(f"| {r} | {counts[r][0]} | {counts[r][1]} | {counts[r][2]} |" for r in releases),
        "",
        "## Cases",
        "",
        "| case | what it checks | " + " | ".join(releases) + " |",
        "|---|---|" + "---|" * len(releases),
    ]
    for case in cases:
        cells = [outcomes[r].get(case, "not run") for r in releases]
        lines.append(f"| `{case}` | {docs.get(case, '')} | " + " | ".join(cells) + " |")
    if fact_names:
        lines += [
            "",
            "## What differs between releases",
            "",
            "| fact | " + " | ".join(releases) + " |",
            "|---|" + "---|" * len(releases),
        ]
        for name in fact_names:
            cells = [facts[r].get(name, "") for r in releases]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    difference_names = sorted({name for per in differences.values() for name in per})
    if difference_names:
        lines += [
            "",
            "## Where we differ from Polaris, and why",
            "",
            "| difference | " + " | ".join(releases) + " |",
            "|---|" + "---|" * len(releases),
        ]
        for name in difference_names:
            cells = [differences[r].get(name, "no difference") for r in releases]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if _SECONDS:
        lines += ["", "## What this run cost", "", "| module | seconds |", "|---|---|"]
        lines += [f"| {module} | {_SECONDS[module]:.0f} |" for module in sorted(_SECONDS)]
    return "\n".join(lines) + "\n"
