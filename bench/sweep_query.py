"""The sweeper's queries among a large catalog: plans, buffers, and time per tick.

``entities`` holds 1,000,000 non-task entities of 4 realms (root, principals,
principal roles, catalogs, catalog roles, namespaces, tables and views, with
realistic catalog_id/parent_id and properties) and 100,000 tasks, interleaved
in the heap as a live Polaris would have them. Two task mixes:

- *backlog*: 20 % of the tasks orphaned (the rest leased by someone else,
  backing off, dead or pending), spread at random;
- *idle*: no task orphaned; every tick looks at every task and leases nothing
  (the steady state of a sweeper).

For each mix, without and with a candidate partial index on the task rows
(``CANDIDATE_INDEX``): EXPLAIN (ANALYZE, BUFFERS) of the lease
statement, of realm discovery (``Metastore.realms()``), of ``count_by_state``
and of the heartbeat; then 20 sweeper ticks
(lease up to 200, then renew what the sweeper holds in every realm).
"""

from __future__ import annotations

import json
import random
import re
import statistics
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event

from bench.common import (
    REALMS,
    batch_task_row,
    catalog_database,
    copy_entities,
    new_id,
    now_ms,
    pg_connect,
    seed_catalog,
    vacuum_analyze,
)
from bench.report import BenchResult, Figure, fmt

TITLE = "4. Sweeper queries among 1M entities (PostgreSQL)"
FULL = {"entities": 1_000_000, "tasks": 100_000, "ticks": 20, "lease": 200}
QUICK = {"entities": 100_000, "tasks": 10_000, "ticks": 10, "lease": 200}
INDEX_NAME = "entities_polaris_pipeline_tasks_idx"

# Share of each state in the backlog mix; the idle mix moves "orphaned" to "leased".
BACKLOG_MIX = {"orphaned": 0.20, "leased": 0.55, "backing-off": 0.10, "dead": 0.05, "pending": 0.10}


# -------------------------------------------------------------------- the tasks


def _task_extra(state: str, now: int, rng: random.Random) -> tuple[dict[str, str], int]:
    """(extra properties, create_timestamp) of a task in ``state``."""
    old = now - 3_600_000
    other = f"polaris-server-{rng.randrange(3)}"
    if state == "orphaned":
        if rng.random() < 0.5:
            return {}, old  # never leased, past the grace period
        expired = str(now - 900_000)  # a lease that lapsed
        return {"lastAttemptExecutorId": other, "lastAttemptStartTime": expired,
                "attemptCount": "1"}, old  # fmt: skip
    if state == "leased":
        return {"lastAttemptExecutorId": other, "lastAttemptStartTime": str(now - 10_000),
                "attemptCount": "1"}, old  # fmt: skip
    if state == "backing-off":
        return {"lastAttemptExecutorId": "polaris-pipeline:run:x",
                "lastAttemptStartTime": str(now - 600_000),
                "lastAttemptEndTime": str(now - 590_000), "attemptCount": "2",
                "lastAttemptStatus": "failed", "lastAttemptError": "SlowDown: reduce your rate",
                "nextAttemptTime": str(now + 3_600_000)}, old  # fmt: skip
    if state == "dead":
        return {"lastAttemptExecutorId": "polaris-pipeline:run:y",
                "lastAttemptStartTime": str(now - 600_000),
                "lastAttemptEndTime": str(now - 590_000), "attemptCount": "8",
                "lastAttemptStatus": "dead", "lastAttemptError": "AccessDenied"}, old  # fmt: skip
    assert state == "pending"
    return {}, now - 10_000  # just created: Polaris may be running it in-process


def task_rows(n: int, mix: dict[str, float], rng: random.Random) -> list[tuple[Any, ...]]:
    now = now_ms()
    states = [s for s, share in mix.items() for _ in range(round(n * share))][:n]
    states += ["leased"] * (n - len(states))
    rng.shuffle(states)
    rows = []
    for i, state in enumerate(states):
        extra, created = _task_extra(state, now, rng)
        rows.append(
            batch_task_row(REALMS[i % len(REALMS)], new_id(rng), created_ms=created, extra=extra)
        )
    return rows


def _rebuilt_tasks(url: str, tasks: list[tuple[Any, ...]]) -> None:
    with pg_connect(url) as conn:
        conn.execute("DELETE FROM polaris_schema.entities WHERE type_code = 8")
    vacuum_analyze(url)  # the freed space is reused: new tasks stay spread through the heap
    copy_entities(url, tasks)
    vacuum_analyze(url)


# ------------------------------------------------------------------ the index


# The candidate index: only TASK rows, keyed the way every sweeper query filters them.
# Shipped as docs/migrations/001_task_index.sql only if it pays for itself (see the doc).
CANDIDATE_INDEX = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX_NAME} "
    "ON polaris_schema.entities (realm_id, id) "
    "WHERE type_code = 8 AND catalog_id = 0 AND parent_id = 0"
)


def _set_index(url: str, present: bool) -> None:
    with pg_connect(url) as conn:
        if present:
            conn.execute(CANDIDATE_INDEX)
        else:
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS polaris_schema.{INDEX_NAME}")
        conn.execute("ANALYZE polaris_schema.entities")


# ------------------------------------------------------------------ measuring


class Capture:
    """The SQL (and parameters) a Metastore sends, as psycopg receives it."""

    def __init__(self, engine: Any) -> None:
        self.statements: list[tuple[str, Any]] = []
        event.listen(engine, "before_cursor_execute", self._on)

    def _on(self, conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        self.statements.append((statement, params))

    def last(self, needle: str, *, without: str | None = None) -> tuple[str, Any]:
        for statement, params in reversed(self.statements):
            if needle in statement and (without is None or without not in statement):
                return statement, params
        raise LookupError(needle)


def _prepare(conn: Any, with_index: bool) -> None:
    """Inside an open transaction: hide the candidate index unless ``with_index``."""
    if not with_index:
        conn.execute(f"DROP INDEX IF EXISTS polaris_schema.{INDEX_NAME}")


def explain(
    url: str, statement: str, params: Any, *, with_index: bool
) -> tuple[str, dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) text and JSON of a statement, rolled back.

    The candidate index exists throughout; the run without it drops it inside the
    same transaction, so both plans see the same table, statistics and tasks.
    """
    with pg_connect(url, autocommit=False) as conn:
        _prepare(conn, with_index)
        text_rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).fetchall()
        conn.rollback()
        _prepare(conn, with_index)
        json_rows = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params
        ).fetchone()
        conn.rollback()
    assert json_rows is not None
    doc = json_rows[0]
    plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]
    return "\n".join(r[0] for r in text_rows), plan


def time_statement(url: str, statement: str, params: Any, *, with_index: bool) -> tuple[float, int]:
    """(milliseconds, rows) to run and fetch a statement, in a transaction rolled back."""
    with pg_connect(url, autocommit=False) as conn:
        _prepare(conn, with_index)
        t0 = time.perf_counter()
        cur = conn.execute(statement, params)
        count = len(cur.fetchall()) if cur.description is not None else cur.rowcount
        ms = (time.perf_counter() - t0) * 1000
        conn.rollback()
    return ms, count


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _walk(child)


def plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    """Which scans of ``entities`` a plan made, how many rows they read, and whether each
    was bounded to a realm (an index condition on realm_id) rather than the whole table
    or the whole index."""
    scans = []
    rows_read = 0
    bounded = True
    for node in _walk(plan["Plan"]):
        kind = node["Node Type"]
        if "Scan" not in kind or node.get("Relation Name") != "entities":
            continue
        scans.append(f"{kind}" + (f" using {node['Index Name']}" if node.get("Index Name") else ""))
        loops = int(node.get("Actual Loops", 1))
        read = loops * (
            int(node.get("Actual Rows", 0))
            + int(node.get("Rows Removed by Filter", 0))
            + int(node.get("Rows Removed by Index Recheck", 0))
        )
        rows_read += read
        probe = "Index" in kind and read <= loops  # a LIMIT 1 step of a loose index scan
        if "realm_id" not in str(node.get("Index Cond", "")) and not probe:
            bounded = False
    top = plan["Plan"]
    return {
        "scans": sorted(set(scans)),
        "seq_scan": any(s.startswith("Seq Scan") for s in scans),
        "bounded": bounded,
        "rows_read": rows_read,
        "ms": plan.get("Execution Time"),
        "buffers": int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0)),
    }


_LONG = 220
AB_ROUNDS = 5
LEASE_LABEL = "lease (one UPDATE … SKIP LOCKED)"
RENEW_MARKER = "jsonb_build_object('lastAttemptStartTime'"


def shorten(plan_text: str) -> str:
    """Plan text with the (very long) task-state CASE filters abbreviated."""
    out = []
    for line in plan_text.splitlines():
        if len(line) > _LONG:
            m = re.match(r"(\s*\w[\w ]*: )", line)
            head = m.group(1) if m else line[:40]
            line = (
                f"{head}<{len(line) - len(head)} characters: the task-state CASE of predicates.py>"
            )
        out.append(line)
    return "\n".join(out)


def table_pages(url: str) -> tuple[int, int]:
    with pg_connect(url) as conn:
        row = conn.execute(
            "SELECT pg_relation_size('polaris_schema.entities') / 8192,"
            " pg_total_relation_size('polaris_schema.entities') / 8192"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _median_ms(fn: Any, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def measure(url: str, size: dict[str, int], mix: str) -> dict[str, Any]:
    """Plans and A/B statement timings (with and without the candidate index), then ticks
    on Polaris's schema as it is (the candidate index dropped)."""
    from polaris_pipeline.metastore import Metastore

    _set_index(url, True)
    store = Metastore(url)
    capture = Capture(store.engine)
    out: dict[str, Any] = {"mix": mix, "plans": {}, "summaries": {}, "ab": {}, "ab_rows": {}}

    # One call of each, to capture the SQL exactly as sent; all rolled back below.
    store.realms()
    store.count_by_state()
    store.count_by_state(store.realms())
    store.lease_available("bench-capture", 1)  # one lease: the heartbeat below has a row
    store.renew_held_by(REALMS[0], "bench-capture")
    queries = {
        LEASE_LABEL: capture.last("SKIP LOCKED"),
        "realm discovery (realms())": capture.last("WITH RECURSIVE"),
        "count_by_state()": capture.last("GROUP BY 1, 2", without="ANY("),
        "count_by_state(realms())": capture.last("= ANY(%(realms)s) GROUP BY 1, 2"),
        "heartbeat (renew_held_by, one realm)": capture.last(RENEW_MARKER),
    }
    for label, (statement, params) in queries.items():
        if label == LEASE_LABEL:
            params = {**params, "limit": size["lease"]}
        for with_index in (False, True):
            text, plan = explain(url, statement, params, with_index=with_index)
            out["plans"][(label, with_index)] = text
            out["summaries"][(label, with_index)] = plan_summary(plan)
        # A/B: alternate the order each round, so drift in the host's load hits all arms.
        arms: list[tuple[str, str, bool]] = [
            ("as is", statement, False),
            ("index", statement, True),
        ]
        times: dict[str, list[float]] = {arm: [] for arm, _, _ in arms}
        rows: dict[str, set[int]] = {arm: set() for arm, _, _ in arms}
        for rnd in range(AB_ROUNDS):
            for arm, sql, with_index in arms if rnd % 2 == 0 else arms[::-1]:
                ms, count = time_statement(url, sql, params, with_index=with_index)
                times[arm].append(ms)
                rows[arm].add(count)
        out["ab"][label] = {arm: statistics.median(v) for arm, v in times.items()}
        out["ab_rows"][label] = {arm: sorted(v) for arm, v in rows.items()}

    _set_index(url, False)
    out["realms_ms"] = _median_ms(store.realms)
    out["count_by_state_ms"] = _median_ms(store.count_by_state)
    out["count_by_state_realms_ms"] = _median_ms(lambda: store.count_by_state(store.realms()))

    executor = f"bench-sweeper-{mix}"
    ticks: list[dict[str, Any]] = []
    for _ in range(size["ticks"]):
        t0 = time.perf_counter()
        leases = store.lease_available(executor, size["lease"])
        t1 = time.perf_counter()
        renewed = sum(store.renew_held_by(realm, executor) for realm in REALMS)
        t2 = time.perf_counter()
        ticks.append(
            {
                "leased": len(leases),
                "lease_ms": (t1 - t0) * 1000,
                "renew_ms": (t2 - t1) * 1000,
                "renewed": renewed,
                "tick_ms": (t2 - t0) * 1000,
            }
        )
    out["ticks"] = ticks
    store.dispose()
    return out


# ------------------------------------------------------------------------ main


def run(quick: bool = False) -> BenchResult:
    size = QUICK if quick else FULL
    result = BenchResult(
        name="sweep_query",
        title=TITLE,
        command="python -m bench sweep_query" + (" --quick" if quick else ""),
        scale="quick" if quick else "full",
        params={
            "non-task entities": f"{size['entities']:,} over {len(REALMS)} realms",
            "tasks": f"{size['tasks']:,}, spread through the heap",
            "backlog mix": ", ".join(f"{k} {v:.0%}" for k, v in BACKLOG_MIX.items()),
            "idle mix": "the same with no task orphaned",
            "ticks per mix": size["ticks"],
            "lease per tick": size["lease"],
            "A/B rounds per statement": AB_ROUNDS,
        },
    )
    rng = random.Random(7)
    idle_mix = {**BACKLOG_MIX, "orphaned": 0.0}
    idle_mix["leased"] += BACKLOG_MIX["orphaned"]
    mixes = {"backlog": BACKLOG_MIX, "idle": idle_mix}

    runs: dict[str, dict[str, Any]] = {}
    with catalog_database("sweep") as url:
        t0 = time.perf_counter()
        first_tasks = task_rows(size["tasks"], BACKLOG_MIX, rng)
        n = seed_catalog(url, first_tasks, size["entities"], rng)
        print(f"  seeded {n:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
        heap_pages, total_pages = table_pages(url)
        for mix_name, mix in mixes.items():
            _set_index(url, False)
            _rebuilt_tasks(url, task_rows(size["tasks"], mix, rng))
            one = measure(url, size, mix_name)
            runs[mix_name] = one
            ticks = [t["tick_ms"] for t in one["ticks"]]
            ab = one["ab"][LEASE_LABEL]
            print(
                f"  {mix_name:8s}: lease statement {ab['as is']:.1f} ms "
                f"(with the candidate index {ab['index']:.1f} ms); tick median "
                f"{statistics.median(ticks):.1f} ms, max {max(ticks):.1f} ms; "
                f"count_by_state {one['count_by_state_ms']:.0f} ms",
                flush=True,
            )

    for mix_name, r in runs.items():
        tick = statistics.median(t["tick_ms"] for t in r["ticks"])
        lease = statistics.median(t["lease_ms"] for t in r["ticks"])
        result.add(
            Figure(
                f"{mix_name}: sweeper tick (lease up to {size['lease']} + heartbeat), median",
                tick,
                "ms",
                why=f"of which lease_available {fmt(lease, 'ms')}",
            )
        )
    for mix_name, r in runs.items():
        s = r["summaries"][(LEASE_LABEL, False)]
        result.add(
            Figure(
                f"{mix_name}: lease statement, rows of entities read "
                f"(table {n:,} rows, {size['tasks']:,} tasks)",
                s["rows_read"],
                "rows",
                target="no whole-table scan",
                met=s["bounded"] and s["rows_read"] <= size["tasks"] + 2 * size["lease"],
                why=f"{', '.join(s['scans'])}; {fmt(s['ms'], 'ms')}, {s['buffers']:,} buffers",
            )
        )
    for mix_name, r in runs.items():
        ab = r["ab"][LEASE_LABEL]
        result.add(
            Figure(
                f"{mix_name}: lease statement, Polaris's indexes only vs with the candidate "
                "index (median, A/B)",
                ab["as is"],
                "ms",
                baseline=ab["index"],
                ratio=ab["index"] / ab["as is"],
                why="baseline column = with the candidate partial index; ratio > 1 means "
                "the extra index is slower",
            )
        )
    backlog = runs["backlog"]
    for label, key in (
        ("realm discovery (realms())", "realms_ms"),
        ("count_by_state()", "count_by_state_ms"),
        ("count_by_state(realms())", "count_by_state_realms_ms"),
    ):
        s = backlog["summaries"][(label, False)]
        scope = "bounded by realm" if s["bounded"] else "NOT bounded by realm (whole table)"
        result.add(
            Figure(
                f"{label}, median (backlog mix)",
                backlog[key],
                "ms",
                why=f"{', '.join(s['scans'])}: {scope}; {s['rows_read']:,} rows read, "
                f"{s['buffers']:,} buffers",
            )
        )

    summary = [
        "| mix | candidate index | statement | scans of entities | bounded by realm | "
        "rows read | buffers | EXPLAIN ANALYZE ms | A/B median ms |",
        "|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for mix_name, r in runs.items():
        for (label, with_index), s in r["summaries"].items():
            summary.append(
                f"| {mix_name} | {'yes' if with_index else 'no'} | {label} | "
                f"{', '.join(s['scans'])} | {'yes' if s['bounded'] else '**no**'} | "
                f"{s['rows_read']:,} | {s['buffers']:,} | {fmt(s['ms'])} | "
                f"{fmt(r['ab'][label]['index' if with_index else 'as is'])} |"
            )
    result.section(
        "Plans at a glance",
        f"`entities`: {n:,} rows, {heap_pages:,} heap pages ({total_pages:,} with indexes "
        "and TOAST). *Rows read* counts the rows every scan of `entities` produced or "
        "filtered out (the 200 primary-key probes of the UPDATE included); buffers are the "
        "shared hits and reads of the whole statement. The candidate index is\n\n"
        f"```sql\n{CANDIDATE_INDEX};\n```\n\nEach statement was planned and run with and "
        f"without it in the same database ({AB_ROUNDS} alternating rounds each, rolled back). "
        "The lease statement rejects rows whose lease is plainly held (an executor, a "
        "start time within the lease timeout, no end time: `predicates.plainly_held`) before "
        "the task-state CASE; such a row is leased (or dead) by the CASE too, never "
        "orphaned, so the leased rows are the same.\n\n" + "\n".join(summary),
    )

    tick_lines = [
        "| mix | ticks | leased per tick | lease_available ms (median / max) | "
        "heartbeat ms (median / max) | tick ms (median / p95 / max) |",
        "|---|---:|---|---|---|---|",
    ]
    for mix_name, r in runs.items():
        ticks = r["ticks"]
        tms = sorted(t["tick_ms"] for t in ticks)
        p95 = tms[min(len(tms) - 1, round(0.95 * (len(tms) - 1)))]
        leased = sorted({t["leased"] for t in ticks})
        tick_lines.append(
            f"| {mix_name} | {len(ticks)} | {', '.join(map(str, leased))} | "
            f"{statistics.median(t['lease_ms'] for t in ticks):.1f} / "
            f"{max(t['lease_ms'] for t in ticks):.1f} | "
            f"{statistics.median(t['renew_ms'] for t in ticks):.1f} / "
            f"{max(t['renew_ms'] for t in ticks):.1f} | "
            f"{statistics.median(tms):.1f} / {p95:.1f} / {tms[-1]:.1f} |"
        )
    result.section(
        "Ticks",
        "A tick is `Metastore.lease_available(executor, 200)` (realm discovery, the batch "
        "UPDATE, whose one scan also reports orphans whose properties are not a JSON object "
        "for the per-row compare-and-set; there are none here) followed "
        "by `renew_held_by(realm, executor)` for each of the 4 realms, on Polaris's schema "
        "as it is (no candidate index). In the backlog mix the sweeper keeps what it leased, "
        "so its heartbeat renews 200 more rows every tick.\n\n" + "\n".join(tick_lines),
    )

    for mix_name, r in runs.items():
        for with_index in (False, True):
            body = []
            for (label, wi), text in r["plans"].items():
                if wi == with_index:
                    body += [f"**{label}**", "", "```", shorten(text), "```", ""]
            result.section(
                f"Plans: {mix_name} mix, {'with' if with_index else 'without'} the candidate index",
                "<details><summary>EXPLAIN (ANALYZE, BUFFERS)</summary>\n\n"
                + "\n".join(body)
                + "\n</details>",
            )
    return result
