"""Render ``docs/soak.md`` and its charts from the soak's results.

    .venv/bin/python -m bench.soak_report [--results DIR] [--out docs/soak.md]

Reads ``bench/results/soak/<instance>.json`` (``bench/soak.py``) and writes the
page and one PNG per instance (``docs/soak-<instance>.png``): the backlog by
state, orphan-to-done latency p50/p95, the RSS of the daemon and the code
server, the sensor's tick duration and cursor size, and Dagster's rows with the
moment retention first deleted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.soak import RESULTS_DIR
from bench.soak_stats import (
    LEVEL_OFF_BOUND,
    TICK_TREND_BOUND_PER_HOUR,
    TREND_BOUND_PER_HOUR,
    before_and_after,
    first_deletion_s,
    invariant_problems,
    latency_figures,
    levels_off,
    load_figures,
    percentile,
    rows,
    run_bound_rows,
    slope,
    trends,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "soak.md"
STATES = ("pending", "orphaned", "leased", "backing-off", "dead", "unhandled")
INSTANCE_NAMES = {"postgres": "dagster-postgres", "sqlite": "SQLite"}
WINDOW_S = 120.0
DASH = "\u2013"


def _f(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def load_results(directory: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(directory.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        out[result["config"]["instance"]] = result
    return out


# ------------------------------------------------------------------ the chart


def _windows(points: list[tuple[float, float]], width: float) -> list[tuple[float, float, float]]:
    """(window middle, p50, p95) of the values in consecutive windows of ``width`` s."""
    if not points:
        return []
    out = []
    end = max(t for t, _ in points)
    start = 0.0
    while start <= end:
        values = [v for t, v in points if start <= t < start + width]
        if values:
            p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
            assert p50 is not None and p95 is not None
            out.append(((start + width / 2) / 60, p50, p95))
        start += width
    return out


def chart(result: dict[str, Any], path: Path) -> None:
    # Deferred: matplotlib is a dev extra, needed only to draw the published chart.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    minutes = [s["t"] / 60 for s in samples]
    writer_end = result["writer_end_s"] / 60
    cut = rows(result).first_deletion_s
    fig, axes = plt.subplots(5, 1, figsize=(10, 14), sharex=True)
    title = INSTANCE_NAMES[result["config"]["instance"]]
    fig.suptitle(
        f"Soak, Dagster storage {title}: {result['config']['minutes']:.0f} min of writes "
        f"from {result['started']}",
        fontsize=12,
    )

    ax = axes[0]
    for state in STATES:
        ys = [s["backlog"].get(state, 0) for s in samples]
        if any(ys):
            ax.plot(minutes, ys, label=state, linewidth=1.2)
    ax.set_ylabel("task rows")
    ax.set_title("Backlog by state", fontsize=10, loc="left")
    ax.legend(loc="upper left", fontsize=8, ncol=3)

    ax = axes[1]
    lat = [(x["t"], x["latency_s"]) for x in result["latencies"]]
    ax.scatter([t / 60 for t, _ in lat], [v for _, v in lat], s=6, color="0.7", label="one event")
    w = _windows(lat, WINDOW_S)
    ax.plot([m for m, _, _ in w], [p for _, p, _ in w], label="p50 (2-min windows)", color="C0")
    ax.plot([m for m, _, _ in w], [p for _, _, p in w], label="p95", color="C3")
    ax.set_ylabel("seconds")
    ax.set_title("Orphan-to-done latency (by end time)", fontsize=10, loc="left")
    ax.legend(loc="upper left", fontsize=8)

    ax = axes[2]
    for role, color in (("daemon", "C0"), ("code server", "C1")):
        ax.plot(minutes, [s["rss"].get(role, 0) for s in samples], label=role, color=color)
    ax.set_ylabel("RSS, MB")
    ax.set_ylim(bottom=0)
    ax.set_title("Resident memory", fontsize=10, loc="left")
    ax.legend(loc="lower right", fontsize=8)

    ax = axes[3]
    ticks = result["ticks"]
    ax.scatter([t["t"] / 60 for t in ticks], [t["s"] for t in ticks], s=6, color="C2")
    ax.set_ylabel("tick, s")
    ax.set_title(
        "Sweeper sensor: tick duration (dots), cursor size (line)", fontsize=10, loc="left"
    )
    twin = ax.twinx()
    twin.plot(minutes, [s["cursor"] or 0 for s in samples], color="C4", linewidth=1)
    twin.set_ylabel("cursor, bytes")
    twin.set_ylim(bottom=0)

    ax = axes[4]
    db = result["db"]
    dm = [d["t"] / 60 for d in db]
    ax.plot(dm, [run_bound_rows(d) for d in db], label="rows of runs (runs, tags, events)")
    ax.plot(dm, [d["runless_events"] for d in db], label="runless events", color="C5")
    ax.set_ylabel("rows")
    ax.set_ylim(bottom=0)
    ax.set_title(
        "Dagster's storage with run retention (runs kept: dash-dot, right)", fontsize=10, loc="left"
    )
    ax.set_xlabel("minutes since the first write")
    if cut is not None:
        ax.axvline(cut / 60, color="0.3", linestyle=":", label="retention's first deletion")
    ax.legend(loc="upper left", fontsize=8)
    runs_ax = ax.twinx()
    runs_ax.plot(dm, [d["runs"] for d in db], color="C0", linestyle="-.", linewidth=1)
    runs_ax.set_ylabel("runs")
    runs_ax.set_ylim(bottom=0)

    load = [s["load"][0] for s in samples]
    lax = axes[0].twinx()
    lax.plot(minutes, load, color="0.6", linewidth=0.8, linestyle="--")
    lax.set_ylabel("1-min load (dashed)", color="0.4")
    lax.set_ylim(bottom=0)
    for a in axes:
        a.axvline(writer_end, color="0.5", linestyle="--", linewidth=0.8)
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------ the page


def _accounting(result: dict[str, Any], which: str) -> list[str]:
    a = result[which]
    states = a["writer_tasks_by_state"]
    left = ", ".join(f"{v} {k}" for k, v in sorted(states.items()) if k != "done") or "none"
    hostile = ", ".join(f"{v} {k}" for k, v in sorted(a["hostile_by_state"].items())) or "none"
    return [
        f"{a['writer_tasks']:,} tasks written = {states.get('done', 0):,} done + {left} "
        f"still in grace, leased, orphaned or backing off",
        f"{a['children_seen']:,} children the pipeline created seen, {a['children_left']} left",
        f"hostile rows, apart: {a['hostile_rows']} ({hostile})",
        f"lost: {len(a['lost'])}; dead that should not be: {len(a['wrongly_dead'])}; "
        f"files outside a table deleted: {len(a['kept_files_deleted'])}",
    ]


def section(result: dict[str, Any]) -> str:
    cfg = result["config"]
    name = INSTANCE_NAMES[cfg["instance"]]
    problems = invariant_problems(result)
    lat = latency_figures(result)
    r = rows(result)
    load = load_figures(result)
    kinds = result["final"]["events_by_kind"]
    lines = [
        f"## Dagster storage: {name}",
        "",
        f"Started {result['started']}; {result['writer_end_s'] / 60:.1f} min of writes "
        f"(one event every {cfg['event_interval_s']:.0f} s: "
        + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
        + f"), then {(result['drained_s'] - result['writer_end_s']) / 60:.1f} min of drain. "
        f"Host load (1-min average, sampled every {cfg['sample_s']:.0f} s): "
        f"min {_f(load['min'])}, median {_f(load['median'])}, max {_f(load['max'])} on "
        f"{result['machine']['nproc']} CPUs, shared with other work.",
        "",
        "**Invariants** " + ("hold." if not problems else "BROKEN: " + "; ".join(problems)),
        "",
        "At the writer's stop:",
        "",
        *[f"- {x}" for x in _accounting(result, "at_writer_end")],
        "",
        "At the end (after the drain):",
        "",
        *[f"- {x}" for x in _accounting(result, "final")],
        f"- two holders on one task at the same time (the rows' executor history, "
        f"{result['task_rows_seen']:,} task rows followed once a second): "
        f"{len(result['overlaps'])}",
        "",
        "**Orphan-to-done latency** (from when all of an event's work was available: its "
        "creation plus the grace period, or a dead executor's lease lapse, to its last row's "
        f"end): {lat['n']} events, p50 {_f(lat['p50'])} s, p95 {_f(lat['p95'])} s, "
        f"max {_f(lat['max'])} s; by kind: "
        + "; ".join(
            f"{k} p50 {_f(v['p50'])} s / p95 {_f(v['p95'])} s ({v['n']})"
            for k, v in lat["by_kind"].items()
        )
        + ".",
        "",
        "**No growth trend** (least-squares slope over the second half of the writes, "
        "projected over an hour; the bound is "
        f"{TREND_BOUND_PER_HOUR:.0%} of the second-half mean per hour, "
        f"{TICK_TREND_BOUND_PER_HOUR:.0%} for tick durations, which follow the shared "
        "host's load):",
        "",
        "| series | samples | second-half mean | slope per hour | bound | holds |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for t in trends(result):
        lines.append(
            f"| {t.name} | {t.n} | {_f(t.mean, 2)} {t.unit} | {t.slope_per_h:+,.2f} {t.unit} | "
            f"±{_f(t.bound_per_h, 2)} {t.unit} | {'yes' if t.ok else '**no**'} |"
        )
    end_db = result["db"][-1] if result["db"] else None
    lines += [
        "",
        "**Dagster's database.** Rows per task: "
        f"{_f(r.rows_per_run)} rows per task-job run (the run, its tags, its events), "
        f"{r.task_runs:,} runs for {r.tasks_done:,} tasks done (the writer's and their "
        f"children): {_f(r.rows_per_task)} rows per task; bytes per task "
        f"{_f(r.bytes_per_task, 0)} (the storage's growth against tasks done, before "
        "retention first deleted).",
        "",
        f"Retention (ages of 1 day, every minute; each finished run backdated by a day "
        f"{cfg['retention_age_s']:.0f} s after it ended) first deleted at "
        f"{_f(r.first_deletion_s and r.first_deletion_s / 60)} min and deleted "
        f"{r.runs_deleted:,} runs in all. Run-bound rows grew "
        f"{r.slope_before:,.0f} rows/h before that, {r.slope_after:,.0f} rows/h over the second "
        f"half of the writes after it (bound: {LEVEL_OFF_BOUND:.0%} of the first): "
        + ("**levelled off**" if r.levelled_off else "**did not level off**")
        + f"; peak {r.max_rows:,}, at the end {r.end_rows:,}"
        + (
            f" ({end_db['runs']:,} runs, {end_db['event_logs']:,} events, "
            f"{end_db['bytes'] / 1e6:,.1f} MB)"
            if end_db
            else ""
        )
        + f". Runless events (each purged table's materialization, kept on purpose as the "
        f"table's history) grow by one per table: {r.runless_end:,} at the end.",
        "",
        *_files_outside(result),
        *[f"Note: {note}\n" for note in result.get("notes", [])],
        f"![soak over time, {name}](soak-{cfg['instance']}.png)",
        "",
    ]
    return "\n".join(lines)


def _files_outside(result: dict[str, Any]) -> list[str]:
    """Compute logs (files under DAGSTER_HOME/storage) and code server replacements."""
    out = []
    db = [d for d in result["db"] if "compute_log_bytes" in d]
    if db:
        runs = len(result["runs"])
        last = db[-1]
        before, after = before_and_after(result, lambda d: d["compute_log_bytes"])
        grew, grows = slope(before) * 3600, slope(after) * 3600
        bounded = levels_off(grew, grows, first_deletion_s(result) is not None)
        verdict = (
            "the retention job bounds them (it deletes each run's captured logs with the run)"
            if bounded
            else "the retention job did not bound them in this run"
        )
        out.append(
            f"Compute logs (stdout and stderr files of each run under DAGSTER_HOME/storage, "
            f"which `DagsterInstance.delete_run` leaves): {last['compute_log_files']:,} files, "
            f"{last['compute_log_bytes'] / 1e6:,.1f} MB at the end for {runs:,} runs; growing "
            f"{grew / 1e6:,.1f} MB/h before retention first deleted, {grows / 1e6:,.1f} MB/h "
            f"over the second half of the writes: {verdict}."
        )
    pids = {p for s in result["samples"] for p in s["rss"].get("code server pids", [])}
    if pids:
        out.append(
            f"The daemon replaced its code server {len(pids) - 1:,} times over the run "
            f"({len(pids):,} server processes seen): its RSS above is the serving one's. "
            "That is Dagster's own refresh: every 60 s the daemon drops the code servers it "
            "started for a `python_module` workspace and starts new ones "
            "(`RELOAD_WORKSPACE_INTERVAL`, dagster/_daemon/controller.py, 1.13); a workspace "
            "that points at a code server run apart (`grpc_server`) has no such restarts."
        )
    return [*(x for line in out for x in (line, "")), ""][:-1] if out else []


HEADER = """# Soak

<!-- Generated by `python -m bench.soak_report` from `bench/results/soak/*.json`, written by
`python -m bench.soak`; edit those, not this file. -->

A Polaris-like writer (`builders/polaris_writer.py`) keeps dropping pyiceberg
tables into a PostgreSQL metastore while the deployment sweeps: a real
`dagster-daemon run` with the repository's code location (deploy/dagster.yaml's run
queue, launcher and run monitoring; lease timeout {lease} s, grace period {grace} s,
sweep every {sweep} s, at most {conc} runs at once). Its events, in a fixed rotation:
dropped tables (the pipeline plans their children in the table's run), tables whose
purge a Polaris executor died in (children written, the parent's row gone, half the
children leased by the dead executor, one of their files already deleted), orphaned
batch and manifest tasks, and hostile rows (unknown task type, data not JSON,
manifest bytes not base64, a batch naming a file outside its table, a dropped
namespace), counted apart: they must end refused (dead, or backing off towards it)
or unhandled, with their row kept.

Run retention is on at the smallest ages the settings take (1 day: they are whole
days), its schedule every minute. So that it acts within the soak, the soak
backdates each finished run's `update_timestamp` by one day once the run has been
finished for the retention age below, as `tests/test_retention.py` gives ages
(Dagster has no API to age a run); the deployment is otherwise untouched.

The CI version, `tests/reliability/test_soak.py` (marked slow), writes for 2 minutes
(about 3 in all) and asserts the same invariants. Reproduce:
`python -m bench.soak --instance postgres --minutes 30` (and `--instance sqlite`),
then `python -m bench.soak_report`.

"""


def render(results: dict[str, dict[str, Any]], out: Path) -> Path:
    first = next(iter(results.values()))["config"]
    text = HEADER.format(
        lease=first["lease_timeout_ms"] // 1000,
        grace=first["grace_ms"] // 1000,
        sweep=f"{first['sweep_interval_s']:g}",
        conc=first["max_concurrent_runs"],
    )
    for kind in ("postgres", "sqlite"):
        if kind in results:
            chart(results[kind], out.parent / f"soak-{kind}.png")
            text += section(results[kind]) + "\n"
    out.write_text(text.rstrip() + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak_report", description=__doc__)
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    results = load_results(args.results)
    if not results:
        parser.error(f"no results under {args.results}")
    print(f"wrote {render(results, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["chart", "render", "run_bound_rows", "section"]
