"""``python -m bench [NAME ...] [--quick]``: run, print, and write docs/performance.md.

With no name every benchmark runs, in the order below. Results are kept as JSON
under ``bench/results/``; the document is rendered from all of them, so a
single benchmark can be re-run on its own.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
import traceback
from datetime import UTC, datetime

from bench.common import connection_lost, machine, machine_load, wait_for_database
from bench.report import ORDER, BenchResult, figures_table, load_all, write_doc

DESCRIPTIONS = {
    "lease": "lease throughput: batch lease vs Polaris's list + CAS, 1 and 4 processes",
    "sweep_query": "plans and tick cost of the lease query among 1M entities",
    "delete": "manifest cleanup on S3 (moto) vs one DeleteObject per file",
    "memory": "peak RSS of the manifest handler, 100k and 1M entries",
    "dagster_e2e": "Dagster: 1,000 orphaned tasks (250 with --quick), first tick to all done",
    "sensor_tick": "Dagster sensor tick with a 10,000-task backlog",
    "daemon_e2e": "through dagster-daemon: mixed backlog, 2,000-child table, queue, the floor",
    "daemon_kinds": "through dagster-daemon: BATCH, small tables, mixed, each against the floor",
    "pgbouncer_auth": "a new connection to Dagster's database: straight, through PgBouncer",
    "unreferenced": "a dropped table's unreferenced files on S3 (moto): listed, deleted; RSS",
    "leaks": "leak report over 1M objects in 1,000 live tables, 5 leaked, vs a full listing",
    "manifest_bomb": "peak RSS reading a 200 MB-path deflate bomb vs a real manifest of its size",
    "guards_scale": "a purge's guard cost, leak walk, unreferenced phase at 0 vs 1M live tables",
}


RETRIES = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="benchmarks to run (default: all): " + ", ".join(ORDER),
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/performance.md")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name in ORDER:
            print(f"{name:12s} {DESCRIPTIONS[name]}")
        return 0
    unknown = [n for n in args.names if n not in ORDER]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(ORDER)}")
    logging.basicConfig(level=logging.WARNING)
    names = args.names or list(ORDER)
    facts = machine()
    print(
        f"machine: nproc {facts['nproc']}, {facts['memory_mb']} MB, {facts['cpu_model']}, "
        f"PostgreSQL {facts['postgresql']}, Python {facts['python']}, "
        f"load {facts['load_average']}",
        flush=True,
    )
    failed = 0
    for name in names:
        print(f"\n== {name}: {DESCRIPTIONS[name]}{' (quick)' if args.quick else ''}", flush=True)
        started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        facts = {**facts, "load_average": machine_load()}
        t0 = time.monotonic()
        module = importlib.import_module(f"bench.{name}")
        retried: list[str] = []
        try:
            while True:
                try:
                    result: BenchResult = module.run(quick=args.quick)
                    break
                except Exception as exc:
                    if len(retried) >= RETRIES or not connection_lost(exc):
                        raise
                    retried.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                    print(f"  lost the database ({retried[-1]}); retrying", flush=True)
                    wait_for_database()
                    t0 = time.monotonic()
            for why in retried:
                result.notes.append(
                    f"Run again from the start after losing the PostgreSQL server mid-run "
                    f"({why}): the host is shared with tests that restart it."
                )
        except Exception as exc:
            traceback.print_exc()
            failed += 1
            result = BenchResult(
                name=name,
                title=getattr(module, "TITLE", name),
                command=f"python -m bench {name}" + (" --quick" if args.quick else ""),
                scale="quick" if args.quick else "full",
                error=f"{type(exc).__name__}: {exc}",
            )
        result.started = started
        result.duration_s = time.monotonic() - t0
        result.machine = facts
        result.save()
        print(f"\n{result.title} ({result.duration_s:.0f} s)")
        if result.error:
            print(f"  did not run: {result.error}")
        else:
            print(figures_table(result.figures))
            for f in result.figures:
                if f.why:
                    print(f"  - {f.label}: {f.why}")
    if not args.no_doc:
        path = write_doc(load_all())
        print(f"\nwrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
