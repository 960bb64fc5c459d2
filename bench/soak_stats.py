"""Figures of a soak's results (``bench/soak.py``): trends, percentiles, the invariants.

One place for every judgement the published page (``bench/soak_report.py``) and
the CI test (``tests/reliability/test_soak.py``) make, so both state the same
bounds.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# A series has no growth trend when its least-squares slope over the second half,
# projected over one hour, stays within this share of its second-half mean.
TREND_BOUND_PER_HOUR = 0.10
# Tick durations are seconds of a shared host's CPU: a looser bound.
TICK_TREND_BOUND_PER_HOUR = 0.50
# Dagster's run-bound rows level off: their slope over the last half of the run is
# at most this share of their slope before retention's first deletion.
LEVEL_OFF_BOUND = 0.25


@dataclass(frozen=True)
class Trend:
    """A least-squares line through the second half of a series."""

    name: str
    unit: str
    n: int
    mean: float
    slope_per_h: float
    bound_per_h: float

    @property
    def ok(self) -> bool:
        return abs(self.slope_per_h) <= self.bound_per_h or self.slope_per_h <= 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "n": self.n,
            "mean": self.mean,
            "slope_per_h": self.slope_per_h,
            "bound_per_h": self.bound_per_h,
            "ok": self.ok,
        }


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 with fewer than two distinct x)."""
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return 0.0
    return statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope


def second_half(points: Sequence[tuple[float, float]], t_end: float) -> list[tuple[float, float]]:
    return [(t, y) for t, y in points if t >= t_end / 2]


def trend(
    name: str,
    unit: str,
    points: Sequence[tuple[float, float]],
    t_end: float,
    share: float = TREND_BOUND_PER_HOUR,
) -> Trend:
    half = second_half(points, t_end)
    mean = statistics.fmean(y for _, y in half) if half else 0.0
    return Trend(name, unit, len(half), mean, slope(half) * 3600, share * abs(mean))


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def series(result: dict[str, Any], what: str) -> list[tuple[float, float]]:
    """(t, value) of one measured series: ``daemon``, ``code server``, ``cursor``, ``tick``."""
    if what == "tick":
        return [(t["t"], t["s"]) for t in result["ticks"] if t["t"] >= 0]
    if what == "cursor":
        return [(s["t"], float(s["cursor"])) for s in result["samples"] if s["cursor"] is not None]
    return [(s["t"], s["rss"][what]) for s in result["samples"] if s["rss"].get(what)]


def trends(result: dict[str, Any]) -> list[Trend]:
    """The four no-growth series over the writer's time."""
    end = result["writer_end_s"]
    within = {
        k: [(t, y) for t, y in series(result, k) if t <= end]
        for k in ("daemon", "code server", "cursor", "tick")
    }
    return [
        trend("daemon RSS", "MB", within["daemon"], end),
        trend("code server RSS", "MB", within["code server"], end),
        trend("sensor cursor size", "bytes", within["cursor"], end),
        trend("sensor tick duration", "s", within["tick"], end, TICK_TREND_BOUND_PER_HOUR),
    ]


def run_bound_rows(d: dict[str, Any]) -> int:
    """Rows that belong to runs: the run, its tags, its events."""
    return int(d["runs"] + d["run_tags"] + d["event_logs"])


def first_deletion_s(result: dict[str, Any]) -> float | None:
    """When the run storage first held fewer runs than had been seen (retention acted)."""
    for s in result["samples"]:
        if s["runs_now"] < s["runs_seen"]:
            return float(s["t"])
    return None


@dataclass(frozen=True)
class Rows:
    """Dagster's storage over the soak: per task, and whether it levelled off."""

    tasks_done: int
    task_runs: int
    rows_per_run: float | None
    rows_per_task: float | None
    bytes_per_task: float | None
    slope_before: float  # run-bound rows per hour before retention's first deletion
    slope_after: float  # over the second half of the writes, after that deletion
    first_deletion_s: float | None
    max_rows: int
    end_rows: int
    runs_deleted: int
    runless_end: int

    @property
    def levelled_off(self) -> bool:
        return levels_off(self.slope_before, self.slope_after, self.first_deletion_s is not None)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "levelled_off": self.levelled_off}


def tasks_done(result: dict[str, Any]) -> int:
    final = result["final"]
    by_state = final["writer_tasks_by_state"]
    return int(by_state.get("done", 0)) + final["children_seen"] - final["children_left"]


Point = tuple[float, float]


def before_and_after(result: dict[str, Any], value: Any) -> tuple[list[Point], list[Point]]:
    """A storage series (``value`` of each database sample) before retention's first
    deletion, and over the second half of the writes after it: the two windows whose
    slopes say whether the series levelled off."""
    db = result["db"]
    cut = first_deletion_s(result)
    before = [(d["t"], float(value(d))) for d in db if cut is None or d["t"] <= cut]
    # While the writer still writes: the drain after it only empties the storage.
    writing = result["writer_end_s"]
    after = [
        (d["t"], float(value(d)))
        for d in db
        if writing / 2 <= d["t"] <= writing and (cut is None or d["t"] >= cut)
    ]
    return before, after


def levels_off(slope_before: float, slope_after: float, deleted: bool) -> bool:
    """Whether a series that grew before retention first deleted (``deleted``) grows
    after it at most LEVEL_OFF_BOUND as fast."""
    return deleted and slope_before > 0 and slope_after <= LEVEL_OFF_BOUND * slope_before


def rows(result: dict[str, Any]) -> Rows:
    db = result["db"]
    cut = first_deletion_s(result)
    runs = [r for r in result["runs"].values() if r["job"] == "polaris_task_job"]
    counted = [r for r in runs if r["events"] is not None]
    per_run = (
        statistics.fmean(1 + (r["tags"] or 0) + r["events"] for r in counted) if counted else None
    )
    done = tasks_done(result)
    before, after = before_and_after(result, run_bound_rows)
    # Bytes per task: the database's growth against tasks done, before anything is deleted.
    done_at = _done_by_time(result)
    byte_points = [(done_at(d["t"]), float(d["bytes"])) for d in db if cut is None or d["t"] <= cut]
    bytes_slope = slope(byte_points) if len({x for x, _ in byte_points}) > 1 else None
    seen = result["samples"][-1]["runs_seen"] if result["samples"] else 0
    now = result["samples"][-1]["runs_now"] if result["samples"] else 0
    return Rows(
        tasks_done=done,
        task_runs=len(runs),
        rows_per_run=per_run,
        rows_per_task=per_run * len(runs) / done if per_run is not None and done else None,
        bytes_per_task=bytes_slope,
        slope_before=slope(before) * 3600,
        slope_after=slope(after) * 3600,
        first_deletion_s=cut,
        max_rows=max((run_bound_rows(d) for d in db), default=0),
        end_rows=run_bound_rows(db[-1]) if db else 0,
        runs_deleted=seen - now,
        runless_end=int(db[-1]["runless_events"]) if db else 0,
    )


def _done_by_time(result: dict[str, Any]) -> Any:
    """Task rows gone (done) by time t, from the row watcher's record."""
    gone = result["gone_times"]

    def done(t: float) -> float:
        return float(bisect.bisect_right(gone, t))

    return done


def hostile_states(final: dict[str, Any]) -> dict[str, int]:
    """Hostile rows by their state at the end (a state outside the expected ones is kept
    as recorded, e.g. "orphaned (waiting)": not refused yet)."""
    return dict(final["hostile_by_state"])


def latency_figures(result: dict[str, Any]) -> dict[str, Any]:
    values = [x["latency_s"] for x in result["latencies"]]
    kinds = sorted({x["kind"] for x in result["latencies"]})
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values) if values else None,
        "by_kind": {
            k: {
                "n": len(v := [x["latency_s"] for x in result["latencies"] if x["kind"] == k]),
                "p50": percentile(v, 0.5),
                "p95": percentile(v, 0.95),
            }
            for k in kinds
        },
    }


def load_figures(result: dict[str, Any]) -> dict[str, float | None]:
    ones = [s["load"][0] for s in result["samples"]]
    return {
        "min": min(ones) if ones else None,
        "median": statistics.median(ones) if ones else None,
        "max": max(ones) if ones else None,
    }


def invariant_problems(result: dict[str, Any]) -> list[str]:
    """Every broken invariant of a soak (empty: all hold)."""
    f = result["final"]
    problems = []
    if f["lost"]:
        problems.append(f"lost: {f['lost'][:5]}")
    if f["wrongly_dead"]:
        problems.append(f"dead that should not be: {f['wrongly_dead'][:5]}")
    if f["kept_files_deleted"]:
        problems.append(f"files outside their table deleted: {f['kept_files_deleted'][:5]}")
    if f["hostile_by_state"].get("row gone (wrong)"):
        problems.append(f"hostile rows gone: {f['hostile_by_state']}")
    if result["overlaps"]:
        problems.append(f"two holders at once: {result['overlaps'][:5]}")
    by_state = f["writer_tasks_by_state"]
    accounted = sum(by_state.values())
    if accounted != f["writer_tasks"]:
        problems.append(f"tasks created {f['writer_tasks']} != accounted {accounted}")
    odd = {k: v for k, v in by_state.items() if k not in _ALLOWED_END_STATES}
    if odd:
        problems.append(f"writer tasks in unexpected states at the end: {odd}")
    return problems


_ALLOWED_END_STATES = {"done", "pending", "orphaned", "leased", "backing-off"}
