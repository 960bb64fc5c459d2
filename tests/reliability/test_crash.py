"""Scenario 2: ``kill -9`` in the middle of a manifest's deletes, of a sweeper and of a Dagster
run; after the lease times out another executor finishes the work, exactly."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.reliability import journal as jr
from tests.reliability.harness import (
    SIZES,
    RelDb,
    Scenario,
    Worker,
    Workers,
    left_over,
    list_tree,
    policy_dict,
    rel_policy,
    wait_for,
)
from tests.reliability.tables import BULK_DIR, big_table
from tests.support.iceberg import Warehouse, table_files

DELETE_DELAY_S = 0.02


class Delay(TypedDict):
    """Deletes of URIs containing ``match`` take ``seconds`` more (worker.install_journal)."""

    match: str
    seconds: float


class CommonConfig(TypedDict):
    """The worker settings (tests/reliability/worker.py) the victim and finisher share."""

    url: str
    policy: dict[str, Any]
    deadline_s: int


SLOW: Delay = {"match": BULK_DIR, "seconds": DELETE_DELAY_S}


def _dagster_env(url: str, lease_ms: int) -> dict[str, str]:
    """The code location's configuration, as a deployment sets it (see definitions.py)."""
    return {
        "POLARIS_METASTORE_URL": url,
        "POLARIS_PIPELINE_STORAGE_CONFIG": "",
        "POLARIS_PIPELINE_LEASE_TIMEOUT_MS": str(lease_ms),
        "POLARIS_PIPELINE_GRACE_MS": "0",
        "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS": "0",
        "POLARIS_PIPELINE_SWEEPER_JITTER": "0",
        "POLARIS_PIPELINE_SWEEPER_MAX_RUNS_PER_TICK": "1",
    }


def _crash_then_finish(
    rel_db: RelDb,
    scenario: Scenario,
    wh: Warehouse,
    start_victim: Callable[[CommonConfig], Worker],
    start_finisher: Callable[[CommonConfig], Worker],
    victim_kind: str,
    finisher_kind: str,
) -> None:
    entries = SIZES.manifest_entries
    policy = rel_policy()
    table = big_table(wh, "big", entries)
    # Neighbours: a table whose location shares the name prefix, and a plain table.
    neighbour = wh.build("bigx", with_deletes=True)
    other = wh.build("other")
    oracle = table_files(table)
    root = Path(wh.uri.removeprefix("file://"))
    before = list_tree(root)
    keep = before - oracle
    assert table_files(neighbour) | table_files(other) <= keep

    store = Metastore(rel_db.url, policy=policy)
    store.insert_tasks([built_tasks.drop_table_task(table, create_timestamp=0)])
    scenario.load = (
        f"one dropped pyiceberg table of {len(oracle)} files (partitioned, delete files, "
        f"statistics, capped metadata log, one manifest of {entries} data files); "
        "two neighbour tables, one sharing the name prefix"
    )
    scenario.fault = (
        f"{victim_kind} (deletes slowed to {DELETE_DELAY_S * 1000:.0f} ms each) is killed "
        "with SIGKILL after deleting a quarter of the big manifest's files; lease timeout "
        f"{policy.lease_timeout_ms} ms; {finisher_kind} started at once"
    )
    common: CommonConfig = {
        "url": rel_db.url,
        "policy": policy_dict(policy),
        "deadline_s": 180,
    }
    a = start_victim(common)

    def bulk_deleted() -> list[jr.Deletion]:
        return [d for d in jr.deletions(a.events()) if BULK_DIR in d.uri and d.result == "deleted"]

    wait_for(lambda: len(bulk_deleted()) >= entries // 4, 180, what="the victim mid-manifest")
    a.kill()
    killed_at = time.monotonic_ns()
    victim = bulk_deleted()[-1]
    row = store.get_task(victim.realm, victim.task)
    assert row is not None and row.executor_id == victim.executor
    assert row.attempt_count == victim.attempt
    last_renewal_ms = int(row.properties[Prop.START_TIME])
    done_by_a = len(bulk_deleted())

    b = start_finisher(common)
    assert b.wait(240) == 0, left_over(store) + "\n" + b.stderr()[-2000:]

    after = list_tree(root)
    dels = jr.deletions(jr.load([a.journal, b.journal]))
    deleted = before - after
    takeover = min(
        (d for d in dels if d.pid == b.pid and (d.realm, d.task) == (victim.realm, victim.task)),
        key=lambda d: d.t0,
    )
    row_after = store.get_task(victim.realm, victim.task)
    concurrent = jr.concurrent_holders(dels)
    scenario.losses(
        tasks_lost=store.count_tasks(),
        files_left_behind=len(oracle - deleted),
        files_wrongly_deleted=len(deleted - oracle),
        concurrent_holders=len(concurrent),
    )
    scenario.metrics.update(
        {
            "table_files": len(oracle),
            "bulk_files_deleted_before_kill": done_by_a,
            "victim_task_attempts": [victim.attempt, takeover.attempt],
            "seconds_from_kill_to_takeover": round((takeover.t0 - killed_at) / 1e9, 1),
        }
    )

    assert store.count_tasks() == 0 and row_after is None
    scenario.check("every task (the table's and all its children) finished")
    assert deleted == oracle, (sorted(oracle - deleted)[:5], sorted(deleted - oracle)[:5])
    scenario.check("the deleted files equal the oracle (tests/support/iceberg.py) exactly")
    assert keep <= after
    scenario.check("both neighbour tables' files are untouched")
    assert takeover.attempt > victim.attempt
    leases = [e for e in jr.of_kind(b.events(), "exec") if e["task"] == victim.task]
    assert leases and min(e["start_ms"] for e in leases) - last_renewal_ms > policy.lease_timeout_ms
    scenario.check(
        "the killed task was taken over only after its lease expired (new lease start minus "
        "the victim's last heartbeat > lease timeout), under a higher attempt number"
    )
    assert not concurrent, concurrent[:3]
    assert all(d.t0 < killed_at for d in dels if d.pid == a.pid)
    scenario.check("no two holders of one task deleted at overlapping times")


@pytest.mark.scenario(2, "Crash: kill -9 of a sweeper mid-manifest, another sweeper finishes")
def test_kill_9_sweeper_mid_manifest_then_another_finishes_exactly(
    rel_db: RelDb, workers: Workers, scenario: Scenario, local_warehouse: Warehouse
) -> None:
    _crash_then_finish(
        rel_db,
        scenario,
        local_warehouse,
        lambda common: workers.start("A", "runner", delay=SLOW, **common),
        lambda common: workers.start("B", "runner", **common),
        "sweeper A (Runner.sweep)",
        "sweeper B",
    )


@pytest.mark.scenario(2, "Crash: kill -9 of a Dagster run mid-manifest, the sensor recovers")
def test_kill_9_dagster_run_mid_manifest_then_the_sensor_recovers(
    rel_db: RelDb,
    workers: Workers,
    scenario: Scenario,
    local_warehouse: Warehouse,
    tmp_path: Path,
) -> None:
    env = _dagster_env(rel_db.url, rel_policy().lease_timeout_ms)

    def dagster(name: str, delay: Delay | None = None) -> Callable[[CommonConfig], Worker]:
        def start(common: CommonConfig) -> Worker:
            home = tmp_path / f"dagster-{name}"
            home.mkdir()
            if delay is None:
                return workers.start(name, "dagster", env=env, dagster_home=str(home), **common)
            return workers.start(
                name, "dagster", env=env, dagster_home=str(home), **common, delay=delay
            )

        return start

    _crash_then_finish(
        rel_db,
        scenario,
        local_warehouse,
        dagster("run-A", delay=SLOW),
        dagster("run-B"),
        "a Dagster run of polaris_task_job (definitions.defs, execute_in_process in a "
        "subprocess, after a sensor tick)",
        "a second process with sensor ticks and runs",
    )
