"""Results of a benchmark run, kept as JSON under ``bench/results/`` and rendered to Markdown.

``docs/performance.md`` is generated from those files: running one benchmark
(``python -m bench lease``) refreshes its section and re-renders the others
from their last stored run, each with the date and command that produced it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "performance.md"

DASH = "\u2013"
TIMES = "\u00d7"

# The order of the sections in the document.
# The daemon benchmark leads: it is what a deployment gets. The in-process
# end-to-end figure (dagster_e2e) stays as a secondary line.
ORDER = (
    "daemon_e2e",
    "daemon_kinds",
    "pgbouncer_auth",
    "lease",
    "sweep_query",
    "delete",
    "memory",
    "sensor_tick",
    "dagster_e2e",
    "unreferenced",
    "leaks",
    "manifest_bomb",
    "guards_scale",
)


@dataclass
class Figure:
    """One measured figure, its baseline, and the target it is held to."""

    label: str
    value: float | None
    unit: str = ""
    baseline: float | None = None
    # value / baseline, or baseline / value when lower is better ("times less")
    ratio: float | None = None
    target: str = ""
    met: bool | None = None  # None: no target
    why: str = ""  # said whenever a target is missed, or needs a caveat


@dataclass
class BenchResult:
    name: str
    title: str
    command: str
    scale: str  # "full" | "quick" | a description of a scaled-down run
    started: str = ""
    duration_s: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    # (heading, markdown) pairs: method, plans, per-run tables
    sections: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    def add(self, *figures: Figure) -> None:
        self.figures.extend(figures)

    def section(self, heading: str, markdown: str) -> None:
        self.sections.append((heading, markdown.strip()))

    # -- storage --------------------------------------------------------------------

    def save(self) -> Path:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{self.name}.json"
        path.write_text(json.dumps(asdict(self), indent=2, default=str) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> BenchResult:
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["figures"] = [Figure(**f) for f in raw.get("figures", [])]
        raw["sections"] = [tuple(s) for s in raw.get("sections", [])]
        return cls(**raw)


def load_all() -> dict[str, BenchResult]:
    out: dict[str, BenchResult] = {}
    if RESULTS_DIR.is_dir():
        for path in sorted(RESULTS_DIR.glob("*.json")):
            result = BenchResult.load(path)
            out[result.name] = result
    return out


# ------------------------------------------------------------------ formatting


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if isinstance(value, int) or (float(value).is_integer() and abs(value) >= 100):
        text = f"{int(value):,}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 0.1:
        text = f"{value:.2f}"
    elif value == 0:
        text = "0"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def fmt_ratio(ratio: float | None) -> str:
    return DASH if ratio is None else f"{fmt(ratio)}{TIMES}"


def met_text(f: Figure) -> str:
    if f.met is None:
        return ""
    return "**met**" if f.met else "**MISSED**"


def figures_table(figures: list[Figure], *, with_bench: str | None = None) -> str:
    head = "| figure | ours | baseline | ratio | target | met |"
    rule = "|---|---:|---:|---:|---|---|"
    if with_bench is not None:
        head = "| benchmark " + head
        rule = "|---" + rule
    lines = [head, rule]
    for f in figures:
        cells = [
            f.label,
            fmt(f.value, f.unit),
            fmt(f.baseline, f.unit) if f.baseline is not None else DASH,
            fmt_ratio(f.ratio),
            f.target or "",
            met_text(f),
        ]
        if with_bench is not None:
            cells.insert(0, with_bench)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _machine_lines(m: dict[str, Any]) -> list[str]:
    if not m:
        return []
    pkgs = ", ".join(f"{k} {v}" for k, v in (m.get("packages") or {}).items())
    return [
        f"- nproc {m.get('nproc')}, memory {m.get('memory_mb')} MB, CPU {m.get('cpu_model')}",
        f"- PostgreSQL {m.get('postgresql')}, Python {m.get('python')}, {m.get('platform')}",
        f"- load average at start {m.get('load_average')}",
        f"- {pkgs}",
    ]


def render(results: dict[str, BenchResult]) -> str:
    ordered = [results[n] for n in ORDER if n in results] + [
        r for n, r in sorted(results.items()) if n not in ORDER
    ]
    out: list[str] = [
        "# Performance",
        "",
        "<!-- Generated by `python -m bench` (bench/report.py). Do not edit by hand: "
        "re-run the benchmarks instead. -->",
        "",
        "Every figure below was produced by `python -m bench` (`make bench`); each section "
        "names the command that reproduces it. Each benchmark measures our side and its "
        "baseline in the same process run, on the same data, so the *ratios* are what "
        "carries over to another machine; absolute figures depend on the machine (below) "
        "and on whatever else it was running (the benchmark host is shared, and its load "
        "average at the start of each run is recorded).",
        "",
    ]
    if not ordered:
        out.append("No results yet: run `python -m bench`.")
        return "\n".join(out) + "\n"

    out += ["## Summary", ""]
    rows: list[str] = []
    for r in ordered:
        targeted = [f for f in r.figures if f.met is not None]
        if r.error:
            rows.append(
                f"| {r.title} | {DASH} | {DASH} | {DASH} | {DASH} | did not run: {r.error} |"
            )
            continue
        for f in targeted:
            rows.append(
                "| "
                + " | ".join(
                    c.replace("|", "\\|")
                    for c in (
                        r.title,
                        f.label,
                        fmt(f.value, f.unit),
                        fmt(f.baseline, f.unit) if f.baseline is not None else DASH,
                        fmt_ratio(f.ratio),
                        f"{f.target} {met_text(f)}".strip(),
                    )
                )
                + " |"
            )
    out += [
        "| benchmark | figure | ours | baseline | ratio | target |",
        "|---|---|---:|---:|---:|---|",
        *rows,
        "",
    ]
    missed = [(r, f) for r in ordered for f in r.figures if f.met is False]
    if missed:
        out += ["Targets missed, and why:", ""]
        out += [f"- {r.title}, {f.label}: {f.why or 'see the section'}" for r, f in missed]
        out.append("")

    def facts(m: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in m.items() if k != "load_average"}, sort_keys=True)

    machines = {facts(r.machine) for r in ordered if r.machine}
    same_machine = len(machines) == 1
    if same_machine:
        first = next(r.machine for r in ordered if r.machine)
        lines = [ln for ln in _machine_lines(first) if "load average" not in ln]
        out += [
            "## Machine",
            "",
            *lines,
            "- shared with other work while measuring: each section gives the load average "
            "(1, 5, 15 min) when it started",
            "",
        ]

    for r in ordered:
        out += [f"## {r.title}", ""]
        out.append(f"Reproduce: `{r.command}` — scale: {r.scale}.")
        out.append(f"Run {r.started}, {r.duration_s:.0f} s.")
        out.append("")
        if r.error:
            out += [f"**Did not run:** {r.error}", ""]
        if not same_machine and r.machine:
            out += [*_machine_lines(r.machine), ""]
        elif r.machine:
            out += [f"Host load average at start: {r.machine.get('load_average')}.", ""]
        if r.params:
            out.append("Parameters: " + ", ".join(f"{k} = {v}" for k, v in r.params.items()) + ".")
            out.append("")
        if r.figures:
            out += [figures_table(r.figures), ""]
            caveats = [f for f in r.figures if f.why]
            for f in caveats:
                out.append(f"- *{f.label}*: {f.why}")
            if caveats:
                out.append("")
        for note in r.notes:
            out += [note, ""]
        for heading, body in r.sections:
            out += [f"### {heading}", "", body, ""]
    return "\n".join(out).rstrip() + "\n"


def write_doc(results: dict[str, BenchResult] | None = None) -> Path:
    results = load_all() if results is None else results
    DOC_PATH.parent.mkdir(parents=True, exist_ok=True)
    DOC_PATH.write_text(render(results), encoding="utf-8")
    return DOC_PATH
