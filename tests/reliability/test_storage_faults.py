"""Scenario 5: storage that fails, stalls or half-succeeds; S3 answering some keys with errors."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TypedDict

import pytest

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop, TaskRow
from tests.reliability import journal as jr
from tests.reliability.faults import write_plan
from tests.reliability.harness import (
    SIZES,
    RelDb,
    Scenario,
    Workers,
    left_over,
    list_tree,
    policy_dict,
    rel_policy,
    touch_all,
    wait_for,
)
from tests.reliability.tables import big_table
from tests.support.iceberg import Warehouse, table_files
from tests.support.s3 import MotoS3

KINDS = ["perm", "flaky", "partial", "slow", "statfail"]


class SweeperConfig(TypedDict):
    """The worker settings (tests/reliability/worker.py) both sweepers share."""

    url: str
    policy: dict[str, Any]
    deadline_s: int
    fault_plan: str
    batch_size: int


class ErrorWatch:
    """Polls the task rows and remembers every lastAttemptError each task showed."""

    def __init__(self, store: Metastore) -> None:
        self.store = store
        self.seen: dict[tuple[str, int], set[str]] = defaultdict(set)
        self.max_attempts: dict[tuple[str, int], int] = {}
        # Failed attempts whose row still reads as held (an end before the start):
        # the holder's heartbeat would renew them, and nobody would retry them.
        self.ended_before_start: set[tuple[str, int]] = set()

    def poll(self) -> list[TaskRow]:
        rows = self.store.list_tasks()
        for row in rows:
            key = (row.realm_id, row.id)
            if row.last_error:
                self.seen[key].add(row.last_error)
            if row.end_time_ms is not None and not row.lease_released:
                self.ended_before_start.add(key)
            self.max_attempts[key] = max(self.max_attempts.get(key, 0), row.attempt_count)
        return rows


def _cause(error: str | None) -> str:
    """The innermost error class named in a recorded error."""
    names = re.findall(r"\b(\w+(?:Error|Exception|Denied))\b", error or "")
    return names[-1] if names else (error or "")[:40]


def _backoff_violations(events: list[dict[str, Any]]) -> list[str]:
    """Leases granted before the backoff time recorded by the failed attempt before them."""
    # (realm, task) as the journal records them: None in events that name no task.
    after_failure: dict[tuple[str | None, int | None], int] = {}
    problems = []
    for e in events:
        key = (e.get("realm"), e.get("task"))
        if e["ev"] == "outcome" and e.get("status") == "failed" and e.get("next_ms"):
            after_failure[key] = int(e["next_ms"])
        elif e["ev"] == "lease" and key in after_failure:
            if int(e["start_ms"]) < after_failure[key]:
                problems.append(f"{key}: leased at {e['start_ms']} < {after_failure[key]}")
            del after_failure[key]
    return problems


@pytest.mark.scenario(5, "Storage faults: a faulty filesystem (fsspec) under the sweepers")
def test_faulty_filesystem_retries_with_backoff_and_finishes(
    rel_db: RelDb,
    workers: Workers,
    scenario: Scenario,
    local_warehouse: Warehouse,
    tmp_path: Path,
) -> None:
    policy = rel_policy(max_attempts=1000)  # faults last until the test clears them
    store = Metastore(rel_db.url, policy=policy)
    table = big_table(local_warehouse, "t", 40)
    neighbour = local_warehouse.build("tx")
    oracle = table_files(table)
    wh_root = Path(local_warehouse.uri.removeprefix("file://"))
    root = tmp_path / "batches"
    n = SIZES.fault_tasks
    expected = set(oracle)
    tasks = []
    kind_of: dict[int, str] = {}
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        loc = root / kind / f"t{i}"
        files = [loc / f"f{k}.bin" for k in range(3)]
        touch_all(files)
        uris = [f"file://{f}" for f in files]
        expected.update(uris)
        task = batch_task("r", uris, internal={"storageLocation": f"file://{loc}"})
        kind_of[task.id] = kind
        tasks.append(task)
    stall = root / "stall" / "t" / "f.bin"  # one delete slower than the lease itself
    touch_all([stall])
    stall_task = batch_task(
        "r", [f"file://{stall}"], internal={"storageLocation": f"file://{stall.parent}"}
    )
    tasks.append(stall_task)
    expected.add(f"file://{stall}")
    store.insert_tasks(tasks)
    store.insert_tasks([built_tasks.drop_table_task(table, realm_id="r", create_timestamp=0)])
    before = list_tree(wh_root) | list_tree(root)
    keep = before - expected
    assert table_files(neighbour) <= keep

    fault_on = tmp_path / "fault-on"
    fault_on.touch()
    plan = tmp_path / "plan.json"
    write_plan(
        plan,
        [
            {
                "op": "rm_file",
                "match": "/perm/",
                "kind": "permission",
                "while_exists": str(fault_on),
            },
            {
                "op": "rm_file",
                "match": "/data/",
                "kind": "permission",
                "while_exists": str(fault_on),
            },
            {"op": "rm_file", "match": "/flaky/", "kind": "eio", "times": 2},
            {"op": "rm_file", "match": "/partial/", "kind": "partial", "times": 1},
            {"op": "rm_file", "match": "/slow/", "kind": "delay", "seconds": 0.2},
            {"op": "info", "match": "/statfail/", "kind": "eio", "times": 2},
            {"op": "open", "match": "-m0.avro", "kind": "eio", "times": 1},
            {"op": "rm_file", "match": "/stall/", "kind": "delay", "seconds": 3.0},
        ],
    )
    scenario.load = (
        f"{n + 1} BATCH_FILE_CLEANUP tasks ({3 * n + 1} local files) and one dropped pyiceberg "
        f"table ({len(oracle)} files) next to a neighbour table; 2 sweeper processes"
    )
    scenario.fault = (
        "our fsspec filesystem wrapping the local one: PermissionError on every delete under "
        "perm/ and under the table's data/ until the test clears the fault; EIO on the first 2 "
        "deletes of each flaky/ file; partial success (file deleted, then TimeoutError) under "
        "partial/; 200 ms per delete under slow/; EIO on the first 2 stats under statfail/; "
        "EIO on the first open of each manifest named -m0.avro; one delete that takes 3 s, "
        f"longer than the {policy.lease_timeout_ms} ms lease"
    )
    common: SweeperConfig = {
        "url": rel_db.url,
        "policy": policy_dict(policy),
        "deadline_s": 230,
        "fault_plan": str(plan),
        "batch_size": 4,
    }
    for k in range(2):
        workers.start(f"sweeper-{k}", "runner", **common)

    watch = ErrorWatch(store)
    perm_ids = {(t.realm_id, t.id) for t in tasks if kind_of.get(t.id) == "perm"}

    def permission_retried() -> bool:
        rows = watch.poll()
        data_children = [
            r for r in rows if r.task_type_code == "2" and "PermissionError" in (r.last_error or "")
        ]
        perm_rows = [r for r in rows if (r.realm_id, r.id) in perm_ids]
        return bool(data_children) and all(
            r.attempt_count >= 2 and "PermissionError" in (r.last_error or "") for r in perm_rows
        )

    wait_for(permission_retried, 120, interval=0.1, what="permission faults to be retried")
    fault_on.unlink()  # the fault clears
    for w in workers.started:
        assert w.wait(240) == 0, left_over(store) + "\n" + w.stderr()[-2000:]
    watch.poll()

    events = workers.events()
    dels = jr.deletions(events)
    after = list_tree(wh_root) | list_tree(root)
    deleted = before - after
    concurrent = jr.concurrent_holders(dels)
    backoff = _backoff_violations(events)
    outcomes = jr.of_kind(events, "outcome")
    failures = Counter(_cause(e["error"]) for e in outcomes if e["status"] == "failed")
    scenario.losses(
        tasks_lost=store.count_tasks(),
        files_left_behind=len(expected - deleted),
        files_wrongly_deleted=len(deleted - expected),
        concurrent_holders=len(concurrent),
        retries_before_backoff_elapsed=len(backoff),
        failed_attempts_still_held=len(watch.ended_before_start),
    )
    errors_seen = {e for errs in watch.seen.values() for e in errs}
    scenario.metrics.update(
        {
            "failed_attempts": sum(1 for e in outcomes if e["status"] == "failed"),
            "failed_attempts_by_cause": dict(failures.most_common(8)),
            "most_attempts_of_one_task": max(watch.max_attempts.values()),
            "sample_recorded_errors": sorted(errors_seen, key=len)[:4],
        }
    )

    assert store.count_tasks() == 0
    assert deleted == expected, (sorted(expected - deleted)[:5], sorted(deleted - expected)[:5])
    assert keep <= after
    scenario.check(
        "once the faults cleared every task finished; deleted files equal the batches plus the "
        "table's oracle exactly; the neighbour table is untouched"
    )
    assert all(any("PermissionError" in e for e in watch.seen[key]) for key in perm_ids)
    assert any("Input/output error" in e for e in errors_seen)
    scenario.check(
        "each failed attempt was recorded on its own task (lastAttemptError names the cause: "
        "PermissionError, Input/output error)"
    )
    assert not backoff, backoff[:3]
    scenario.check("no task was leased again before the backoff its failure recorded")
    assert not watch.ended_before_start, sorted(watch.ended_before_start)[:3]
    scenario.check(
        "every failed attempt ended its lease (its end time never before its start; polled "
        "every 0.1 s until the faults cleared, then once at the end), so no holder's heartbeat "
        "renewed a failed task"
    )
    assert not [e for e in outcomes if e["status"] in ("dead", "lease-lost")]
    assert len(jr.holders_per_task(d for d in dels if "/stall/" in d.uri)) == 1
    assert not concurrent, concurrent[:3]
    scenario.check(
        "the 3 s delete ran under one lease kept alive by the heartbeat: no lease lost, no "
        "two holders of a task at once"
    )


@pytest.mark.scenario(5, "Storage faults: S3 DeleteObjects denies some keys (bucket policy)")
def test_s3_denied_keys_are_recorded_and_retried_until_allowed(
    rel_db: RelDb,
    workers: Workers,
    scenario: Scenario,
    s3_warehouse: Warehouse,
    moto_server: MotoS3,
    s3_bucket: str,
) -> None:
    policy = rel_policy(max_attempts=1000)  # faults last until the test clears them
    store = Metastore(rel_db.url, policy=policy)
    table = big_table(s3_warehouse, "t", 60)
    neighbour = s3_warehouse.build("tx")
    oracle = table_files(table)
    before = s3_warehouse.files()
    keep = before - oracle
    assert table_files(neighbour) <= keep
    store.insert_tasks([built_tasks.drop_table_task(table, realm_id="r", create_timestamp=0)])
    prefix = table.location().removeprefix("s3://")
    client = moto_server.client()
    client.put_bucket_policy(
        Bucket=s3_bucket,
        Policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "s3:DeleteObject",
                        "Resource": f"arn:aws:s3:::{prefix}/data/*",
                    }
                ],
            }
        ),
    )
    scenario.load = (
        f"one dropped pyiceberg table on S3 (moto server, {len(oracle)} objects, one manifest "
        "of 60 data files) and a neighbour table in the same bucket; 1 sweeper process"
    )
    scenario.fault = (
        "a bucket policy denies s3:DeleteObject under the table's data/ prefix, so "
        "DeleteObjects answers those keys with AccessDenied while deleting the others; the "
        "test removes the policy once the denial has been retried"
    )
    storage = {
        "locations": [{"prefix": f"s3://{s3_bucket}", "options": moto_server.storage_options()}]
    }
    w = workers.start(
        "sweeper",
        "runner",
        url=rel_db.url,
        policy=policy_dict(policy),
        deadline_s=230,
        storage=storage,
    )
    watch = ErrorWatch(store)

    def denied_twice() -> bool:
        rows = watch.poll()
        return any(
            r.attempt_count >= 2 and "AccessDenied" in (r.last_error or "")
            for r in rows
            if r.task_type_code == "2"
        )

    wait_for(denied_twice, 120, interval=0.1, what="AccessDenied to be recorded and retried")
    during = s3_warehouse.files()
    data_left = {u for u in oracle if "/data/" in u} <= during
    client.delete_bucket_policy(Bucket=s3_bucket)
    assert w.wait(240) == 0, left_over(store) + "\n" + w.stderr()[-2000:]

    after = s3_warehouse.files()
    deleted = before - after
    events = w.events()
    backoff = _backoff_violations(events)
    errors_seen = {e for errs in watch.seen.values() for e in errs}
    scenario.losses(
        tasks_lost=store.count_tasks(),
        files_left_behind=len(oracle - deleted),
        files_wrongly_deleted=len(deleted - oracle),
        retries_before_backoff_elapsed=len(backoff),
    )
    scenario.metrics.update(
        {
            "failed_attempts": sum(
                1 for e in jr.of_kind(events, "outcome") if e["status"] == "failed"
            ),
            "sample_recorded_errors": sorted(errors_seen, key=len)[:2],
        }
    )
    assert data_left
    scenario.check("while denied, every data object stayed and the manifest was kept")
    assert any("AccessDenied" in e for e in errors_seen)
    scenario.check("the per-key AccessDenied answers were recorded as the task's lastAttemptError")
    assert not backoff, backoff[:3]
    scenario.check("retries waited for the recorded backoff")
    assert store.count_tasks() == 0 and deleted == oracle and keep <= after
    scenario.check(
        "after the policy was removed every task finished; deleted objects equal the oracle "
        "exactly; the neighbour table's objects remain"
    )
    assert Prop.ERROR  # the property the errors were read from
