"""Where a small table's run spends its time, against a no-op run's: cProfile in the workers.

``python -m bench.daemon_profile [TABLES] [OUT_DIR]`` drains TABLES small dropped
tables through dagster-daemon with the profiled code location
(``bench/daemon_profile_location.py``), then as many no-op runs
(``bench/daemon_floor_location.py``, in process), each worker under cProfile
(``bench/run_profile.py``), and prints, per side, the mean time per run of the
functions that take most of it. A diagnostic, not a benchmark: the profiler
slows both sides, so its figures are shares, not the floor ratio.
"""

from __future__ import annotations

import io
import os
import pstats
import sys
import tempfile
from pathlib import Path

from bench.daemon_e2e import LEASE_MS, backlog_phase, floor_phase
from bench.daemon_floor_location import IN_PROCESS
from bench.daemon_kinds import FULL, kind_seed
from bench.run_profile import PROFILE_ENV

TOP = 40


def _profiles(directory: Path, role: str) -> list[Path]:
    return sorted(directory.glob(f"{role}-*.prof"))


def summary(directory: Path, runs: int) -> str:
    """The functions with most cumulative time over the run workers, per run."""
    files = _profiles(directory, "run")
    if not files:
        return f"no run profiles in {directory}"
    stats = pstats.Stats(str(files[0]), stream=io.StringIO())
    for path in files[1:]:
        stats.add(str(path))
    text = io.StringIO()
    stats.stream = text  # type: ignore[attr-defined]
    stats.sort_stats("cumulative").print_stats(TOP)
    total = stats.total_tt  # type: ignore[attr-defined]
    return (
        f"{len(files)} run profiles for {runs} runs; {total / len(files):.2f} s per run "
        f"profiled\n{text.getvalue()}"
    )


def main(argv: list[str]) -> int:
    tables = int(argv[0]) if argv else 12
    out = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="pp_profile_"))
    size = {**FULL, "tables": tables}
    ours_dir, floor_dir = out / "ours", out / "floor"
    ours_dir.mkdir(parents=True, exist_ok=True)
    floor_dir.mkdir(parents=True, exist_ok=True)
    os.environ[PROFILE_ENV] = str(ours_dir)
    ours = backlog_phase(
        "sqlite",
        "profile_tables",
        size,
        kind_seed("tables", size),
        size["deadline_s"],
        module="bench.daemon_profile_location",
        max_concurrent_runs=size["concurrent_runs"],
        lease_timeout_ms=LEASE_MS,
        sweep_interval_s=size["sweep_interval_s"],
    )
    os.environ[PROFILE_ENV] = str(floor_dir)
    floor = floor_phase("sqlite", ours["runs"], size["concurrent_runs"], executor=IN_PROCESS)
    del os.environ[PROFILE_ENV]
    for name, phase, directory in (("ours", ours, ours_dir), ("floor", floor, floor_dir)):
        print(
            f"== {name}: {phase['runs']} runs drained in {phase['drain_s']:.0f} s, median run "
            f"{phase['median_run_s']:.2f} s, median queue wait "
            f"{phase['median_start_latency_s']:.1f} s, CPU by role {phase['cpu']}"
        )
        print(summary(directory, phase["runs"]))
    print(f"profiles kept in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
