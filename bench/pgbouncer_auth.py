"""What one new connection to Dagster's database costs: straight to PostgreSQL, or
through PgBouncer (``deploy/pgbouncer/``) with each client login method.

dagster-postgres opens a connection for every event a run stores (section 1
counts them per run), so a connection's cost is paid a hundred times a run.
Each case opens ``connections`` connections one after another with psycopg2
(dagster-postgres's driver), runs ``SELECT 1`` in autocommit and closes it, and measures
the CPU of the client (this process), of PgBouncer, and of PostgreSQL (the
postmaster, the backends it has reaped, and those alive), and the wall time.
The baseline is the straight connection. PostgreSQL here trusts local logins,
so the straight case pays no password check: with SCRAM on the server it would
pay what the SCRAM case shows, on the server's side instead of PgBouncer's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import psycopg2

from bench.common import cpu_seconds_of, cpu_seconds_self, proc_stat, temp_database
from bench.report import TIMES, BenchResult, Figure, fmt

TITLE = "2. A new connection to Dagster's database: straight, or through PgBouncer"
FULL = {"connections": 1_000}
QUICK = {"connections": 200}
# The example's own login method first, then the ones an operator might reach for.
AUTH_TYPES = ("md5", "trust", "scram-sha-256")


def _cpu(pid: int, *, children: bool = False) -> float:
    return cpu_seconds_of(pid, reaped_children=children) or 0.0


def _server_cpu(postmaster: int) -> float:
    """PostgreSQL's CPU seconds: the postmaster with its reaped backends, and the living."""
    total = _cpu(postmaster, children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields is not None and int(fields[1]) == postmaster:
                total += _cpu(int(entry))
    return total


def _postmaster(dsn: str) -> int:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            (backend,) = cur.fetchone()
    finally:
        conn.close()
    fields = proc_stat(int(backend))
    if fields is None:
        raise RuntimeError("PostgreSQL is not a process of this machine: its CPU cannot be read")
    return int(fields[1])


def measure(dsn: str, n: int, postmaster: int, pooler: int | None) -> dict[str, float]:
    """Per connection, in milliseconds: client, pooler and server CPU, and wall time."""
    readings: list[Callable[[], float]] = [
        cpu_seconds_self,
        (lambda: _cpu(pooler)) if pooler else (lambda: 0.0),
        lambda: _server_cpu(postmaster),
    ]
    before = [read() for read in readings]
    t0 = time.perf_counter()
    for _ in range(n):
        conn = psycopg2.connect(dsn)
        # As dagster-postgres's engines (AUTOCOMMIT): a client that leaves in the
        # middle of a transaction makes PgBouncer close the server connection.
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
        conn.close()
    wall = time.perf_counter() - t0
    time.sleep(0.5)  # the last backends end and are reaped
    client, pool, server = (read() - b for read, b in zip(readings, before, strict=True))
    per = 1000 / n
    return {
        "client_ms": client * per,
        "pooler_ms": pool * per,
        "server_ms": server * per,
        "cpu_ms": (client + pool + server) * per,
        "wall_ms": wall * per,
    }


def run(quick: bool = False) -> BenchResult:
    from sqlalchemy.engine import make_url

    from builders.pgbouncer import EXAMPLE_AUTH_TYPE, running_pgbouncer
    from builders.postgres import PG_ADMIN_URL

    n = (QUICK if quick else FULL)["connections"]
    result = BenchResult(
        name="pgbouncer_auth",
        title=TITLE,
        command="python -m bench pgbouncer_auth" + (" --quick" if quick else ""),
        scale="quick" if quick else "full",
        params={
            "connections": f"{n:,} per case, one after another, psycopg2, SELECT 1 each",
            "PgBouncer": "deploy/pgbouncer/pgbouncer.ini on a port of its own, login method "
            f"replaced per case (the example's: {EXAMPLE_AUTH_TYPE})",
        },
    )
    cases: dict[str, dict[str, Any]] = {}
    with temp_database("pgbouncer_auth") as url:
        u = make_url(url)
        database = u.database or ""
        direct = (
            f"host={u.host or '127.0.0.1'} port={u.port or 5432} "
            f"user={u.username or 'postgres'} dbname={database}"
        )
        postmaster = _postmaster(direct)
        cases["straight to PostgreSQL"] = measure(direct, n, postmaster, None)
        for auth in AUTH_TYPES:
            with running_pgbouncer(PG_ADMIN_URL, database, auth_type=auth) as bouncer:
                dsn = (
                    f"host=127.0.0.1 port={bouncer.port} user={bouncer.username} "
                    f"password={bouncer.password} dbname={database}"
                )
                psycopg2.connect(dsn).close()  # the pool's first server connection
                cases[f"PgBouncer, {auth}"] = measure(dsn, n, postmaster, bouncer.pid)

    base = cases["straight to PostgreSQL"]
    for label, c in cases.items():
        example = label == f"PgBouncer, {EXAMPLE_AUTH_TYPE}"
        result.add(
            Figure(
                f"CPU per connection, {label}",
                c["cpu_ms"],
                "ms",
                baseline=None if c is base else base["cpu_ms"],
                ratio=None if c is base else c["cpu_ms"] / base["cpu_ms"],
                target="less than straight" if example else "",
                met=c["cpu_ms"] < base["cpu_ms"] if example else None,
                why=f"client {fmt(c['client_ms'], 'ms')}, PgBouncer {fmt(c['pooler_ms'], 'ms')}, "
                f"PostgreSQL {fmt(c['server_ms'], 'ms')}; wall {fmt(c['wall_ms'], 'ms')}",
            )
        )
    rows = [
        "| case | client CPU ms | PgBouncer CPU ms | PostgreSQL CPU ms | all CPU ms | "
        f"{TIMES} straight | wall ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, c in cases.items():
        rows.append(
            f"| {label} | {c['client_ms']:.2f} | {c['pooler_ms']:.2f} | {c['server_ms']:.2f} | "
            f"{c['cpu_ms']:.2f} | {c['cpu_ms'] / base['cpu_ms']:.2f} | {c['wall_ms']:.2f} |"
        )
    result.section("Per connection", "\n".join(rows))
    return result
