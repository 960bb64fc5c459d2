"""Render ``docs/reliability.md`` from the results the reliability tests wrote.

    .venv/bin/pytest tests/reliability            # writes build/reliability-results/*.json
    .venv/bin/python -m tests.reliability.report  # writes docs/reliability.md

Options: ``--results DIR`` (default ``$PP_RELIABILITY_RESULTS`` or
``build/reliability-results``), ``--out FILE`` (default ``docs/reliability.md``),
``--check`` (exit 1 unless every scenario passed and lost nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = REPO / "build" / "reliability-results"
DEFAULT_OUT = REPO / "docs" / "reliability.md"

CLAIM = (
    "Every task is eventually executed; no two executors run a task at the same time; "
    "nothing outside a dropped table is ever deleted; no task is lost."
)

# The soak has a page of its own, generated from its own results (bench/soak_report.py).
SOAK_LINE = (
    "**The soak.** A Polaris-like writer dropping tables for 30 minutes while the deployment "
    "sweeps (a real dagster-daemon, run retention on): its invariants, memory, tick and "
    "database figures over time are in [soak.md](soak.md); `tests/reliability/test_soak.py` "
    "is its 3-minute version."
)

SIZE_VARIABLES = [
    ("PP_REL_RACE_TASKS", "tasks in the race (scenario 1)", "5000"),
    ("PP_REL_RACE_SWEEPERS", "sweeper processes in the race", "4"),
    ("PP_REL_MANIFEST_ENTRIES", "data files in the big manifest (scenarios 2, 3)", "200"),
    ("PP_REL_DB_FAULT_TASKS", "tasks under database faults (scenario 4)", "800"),
    ("PP_REL_DB_KILLS", "rounds of pg_terminate_backend", "12"),
    ("PP_REL_FAULT_TASKS", "batch tasks under storage faults (scenario 5)", "40"),
    ("PP_REL_BIG_BATCH", "paths in the huge batch (scenario 6)", "100000"),
    ("PP_REL_LONG_PATH", "characters in the very long path (scenario 6)", "10000"),
    ("PP_RELIABILITY_PG_RESTART", "0 skips the real PostgreSQL restart", "1"),
    (
        "PP_RELIABILITY_RESULTS",
        "where the tests write their JSON results",
        "build/reliability-results",
    ),
]


def _still_exists(record: dict[str, Any]) -> bool:
    """Drop results of tests that were renamed or removed since they ran."""
    path, _, name = record["test"].partition("::")
    source = REPO / path
    function = name.split("[", 1)[0]
    return source.exists() and f"def {function}(" in source.read_text(encoding="utf-8")


def load(results: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(results.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if _still_exists(record):
            records.append(record)
    records.sort(key=lambda r: (r["number"], r["test"].split("::")[0], r.get("line", 0), r["test"]))
    return records


def lost_text(record: dict[str, Any]) -> str:
    lost = {k: v for k, v in record.get("lost", {}).items() if v}
    if record["outcome"] == "skipped":
        return "not run"
    if not record.get("lost"):
        return "not measured"
    if not lost:
        return "**nothing**"
    return "; ".join(f"{k.replace('_', ' ')}: **{v}**" for k, v in sorted(lost.items()))


def result_text(record: dict[str, Any]) -> str:
    return {"passed": "passed", "failed": "**FAILED**", "skipped": "skipped"}.get(
        record["outcome"], record["outcome"]
    )


_SCRUB = [
    # Per-run names: temporary directories, databases, roles, buckets, process ids.
    (re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s'\"]+"), "<tmp>"),
    # make test's short xdist base directory (mktemp /tmp/pp.XXXXXX), one folder a worker;
    # also where a recorded text was cut short inside it.
    (re.compile(r"/tmp/pp\.[A-Za-z0-9]+(?:/popen-gw\d+/[^/\s'\"]+)?"), "<tmp>"),
    (re.compile(r"pp_rel_\d+_[0-9a-f]+"), "<database>"),
    (re.compile(r"pp_secret_[0-9a-f]+"), "<role>"),
    (re.compile(r"pp-test-[0-9a-f]{16}"), "<bucket>"),
    (re.compile(r"(polaris-pipeline:[\w.-]+):[\w.-]+:\d+:[0-9a-f]{12}"), r"\1:<host>:<pid>:<id>"),
    (re.compile(r"(hostile_[^/']*?)_\d{6,}"), r"\1_<id>"),
    (re.compile(r"hostile/\d{6,}"), "hostile/<id>"),
    (re.compile(r"((.)\2{30})\2+"), r"\1…"),
]


def scrub(text: str) -> str:
    """``text`` without what changes from run to run (so the document diffs cleanly)."""
    for pattern, replacement in _SCRUB:
        text = pattern.sub(replacement, text)
    return text


def _cell(text: str, limit: int = 400) -> str:
    flat = scrub(" ".join(str(text).split())).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _value(value: Any) -> str:
    if isinstance(value, dict):
        if not value:
            return "—"
        return "; ".join(f"{k}: {_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value) if value else "—"
    return str(value)


def _test_name(record: dict[str, Any]) -> str:
    path, _, name = record["test"].partition("::")
    return f"`{Path(path).name}::{name}`"


def render(records: list[dict[str, Any]], generated: datetime) -> str:
    lines: list[str] = []
    add = lines.append
    add("# Reliability")
    add("")
    add(
        "<!-- Generated by `python -m tests.reliability.report` from the results of "
        "`tests/reliability/`; edit the tests or the generator, not this file. -->"
    )
    add("")
    add(f"**The claim.** {CLAIM}")
    add("")
    add(
        "Each scenario below is a test in `tests/reliability/` that runs in the normal "
        "`pytest` command and fails if the claim fails. The tests run the engine itself "
        "(the `Runner`, its handlers, heartbeat and fencing, the `polaris-pipeline` CLI and "
        "the Dagster code location) in separate processes against a real PostgreSQL, real "
        "files, a real S3 server (moto) and real pyiceberg tables. Every process appends "
        "each delete to a journal *before* deleting (task, attempt, executor, path, time), "
        "and the tests judge the journal, the task table and the storage afterwards."
    )
    add("")
    add("What *lost* counts, per scenario (all must be zero):")
    add("")
    add(
        "- **tasks lost**: tasks whose work was not done at the end (row left, or row gone "
        "with files left);"
    )
    add(
        "- **files left behind** / **files wrongly deleted**: the difference between the "
        "storage after the run and the oracle (the table's files from pyiceberg's own "
        "readers, or the batches' lists);"
    )
    add(
        "- **concurrent holders**: tasks on which two holders (executor id, attempt) deleted "
        "during overlapping spans;"
    )
    add(
        "- the scenario's own measures (deletes after losing a lease, secrets exposed, "
        "unclear errors...)."
    )
    add("")
    passed = sum(r["outcome"] == "passed" for r in records)
    clean = sum(lost_text(r) == "**nothing**" for r in records)
    env = records[0]["metrics"] if records else {}
    loads = [r["metrics"]["load_average"] for r in records if "load_average" in r["metrics"]]
    load = f"; load average {min(loads)} to {max(loads)} (times scale with it)" if loads else ""
    add(
        f"Last run: {generated:%Y-%m-%d %H:%M} UTC, {len(records)} scenario tests, "
        f"{passed} passed, {clean} lost nothing; {env.get('cpus', '?')} CPUs, Python "
        f"{env.get('python', '?')}, {env.get('postgresql', 'PostgreSQL')}{load}."
    )
    add("")
    add(SOAK_LINE)
    add("")
    add("## Summary")
    add("")
    add("| # | scenario | load | fault | lost | result |")
    add("|---|---|---|---|---|---|")
    for r in records:
        add(
            f"| {r['number']} | {_cell(r['title'], 120)} | {_cell(r['load'], 300)} | "
            f"{_cell(r['fault'], 300)} | {lost_text(r)} | {result_text(r)} |"
        )
    add("")
    for r in records:
        add(f"## {r['number']}. {r['title']}")
        add("")
        add(f"Test: {_test_name(r)} — {result_text(r)} in {r.get('seconds', '?')} s.")
        add("")
        add(f"- **Load**: {r['load'] or '—'}")
        add(f"- **Fault**: {r['fault'] or '—'}")
        add(f"- **Lost**: {lost_text(r)}")
        if r.get("lost"):
            counted = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(r["lost"].items()))
            add(f"  (counted: {counted})")
        if r.get("checks"):
            add("- **Verified**:")
            for check in r["checks"]:
                add(f"  - {check}")
        metrics = {
            k: v
            for k, v in r.get("metrics", {}).items()
            if k not in ("cpus", "python", "postgresql", "load_average")
        }
        if metrics:
            add("- **Measured**:")
            for key, value in metrics.items():
                if isinstance(value, dict) and len(value) > 3:
                    add(f"  - {key.replace('_', ' ')}:")
                    for k, v in value.items():
                        add(f"    - {_cell(str(k), 80)}: {_cell(_value(v), 240)}")
                elif isinstance(value, list) and value and len(_value(value)) > 240:
                    add(f"  - {key.replace('_', ' ')}:")
                    for v in value:
                        add(f"    - {_cell(_value(v), 240)}")
                else:
                    add(f"  - {key.replace('_', ' ')}: {_cell(_value(value), 600)}")
        for note in r.get("notes", []):
            add(f"- Note: {note}")
        if r["outcome"] == "failed" and r.get("failure"):
            add("- **Failure** (the claim does not hold here yet):")
            add("")
            add("  ```text")
            for line in _failure_lines(r["failure"]):
                add(f"  {line}")
            add("  ```")
            for note in r.get("if_failed", []):
                add(f"- {note}")
        add("")
    add("## Running it bigger")
    add("")
    add(
        "The defaults keep the whole suite within a few minutes on two cores. Every load is "
        "an environment variable; for example "
        "`PP_REL_RACE_TASKS=50000 PP_REL_BIG_BATCH=1000000 .venv/bin/pytest tests/reliability` "
        "then `.venv/bin/python -m tests.reliability.report`."
    )
    add("")
    add(
        "The scenarios carry the `reliability` marker: `pytest -m 'not reliability'` leaves "
        "them out of a quick run, `pytest -m reliability` runs only them."
    )
    add("")
    add("| variable | what | default |")
    add("|---|---|---|")
    for name, what, default in SIZE_VARIABLES:
        add(f"| `{name}` | {what} | {default} |")
    add("")
    add(
        "Scenario 7 uses libfaketime (`apt-get install faketime`) when it is installed and "
        "otherwise patches `time.time` in the child process; scenario 4's restart needs root "
        "and `pg_ctlcluster`, and is skipped without them. Scenario 10's database restarts "
        "stop and start a PostgreSQL server of their own (initialised as the `postgres` "
        "user, on a free port), never the machine's: they need root and the server "
        "binaries, and are skipped without them."
    )
    add("")
    return "\n".join(lines)


def _failure_lines(text: str) -> Iterable[str]:
    for line in scrub(text).splitlines()[:12]:
        line = re.sub(r"^E\s+", "", line)
        if line.startswith(("assert ", "+  where", "+    where")):
            continue  # pytest's rendering of the operands: run-specific noise
        yield line if len(line) <= 300 else line[:297] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results",
        type=Path,
        default=Path(os.environ.get("PP_RELIABILITY_RESULTS") or DEFAULT_RESULTS),
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 unless all is well")
    args = parser.parse_args(argv)
    records = load(args.results)
    if not records:
        print(f"no results in {args.results}: run pytest tests/reliability first", file=sys.stderr)
        return 2
    args.out.write_text(render(records, datetime.now(UTC)), encoding="utf-8")
    bad = [r for r in records if r["outcome"] == "failed" or lost_text(r) not in ("**nothing**",)]
    bad = [r for r in bad if r["outcome"] != "skipped"]
    print(f"wrote {args.out}: {len(records)} scenario tests, {len(bad)} not clean")
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
