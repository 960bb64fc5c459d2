"""Leasing processes racing over one table: no task is ever leased twice within a lease period."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter

import pytest

from builders.polaris_leaser import polaris_load_tasks
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import TaskPolicy

REALMS = ["alpha", "beta", "gamma"]
TASKS_PER_REALM = 1_000
LEASERS = 4


def _our_leaser(url: str, name: str, start: mp.synchronize.Barrier, out: mp.Queue) -> None:
    store = Metastore(url, policy=TaskPolicy(lease_timeout_ms=600_000, grace_ms=0))
    start.wait()
    got: list[tuple[str, int, int, str]] = []
    idle = 0
    while idle < 3:
        leases = store.lease_available(name, 50)
        idle = idle + 1 if not leases else 0
        got += [(lease.realm_id, lease.task_id, lease.attempt, name) for lease in leases]
    out.put(got)
    store.dispose()


def _polaris_leaser(url: str, start: mp.synchronize.Barrier, out: mp.Queue) -> None:
    store = Metastore(url)
    start.wait()
    got: list[tuple[str, int, int, str]] = []
    idle = 0
    while idle < 3:
        batch: list[tuple[str, int, int, str]] = []
        for realm in REALMS:
            batch += [
                (realm, i, a, "polaris")
                for i, a in polaris_load_tasks(store.engine, realm, "polaris", 50)
            ]
        idle = idle + 1 if not batch else 0
        got += batch
    out.put(got)
    store.dispose()


@pytest.mark.slow
def test_four_leasers_and_a_polaris_leaser_never_double_lease(metastore: Metastore) -> None:
    for realm in REALMS:
        metastore.insert_tasks(
            [batch_task(realm, create_timestamp=0) for _ in range(TASKS_PER_REALM)]
        )
    url = metastore.url.render_as_string(hide_password=False)
    ctx = mp.get_context("spawn")
    # Released only once every leaser is up: a leaser still importing when the
    # others start can find all 3,000 tasks gone, and the race would not be one.
    start = ctx.Barrier(LEASERS + 2)
    out: mp.Queue = ctx.Queue()
    procs = [
        ctx.Process(target=_our_leaser, args=(url, f"sweeper-{i}", start, out))
        for i in range(LEASERS)
    ]
    procs.append(ctx.Process(target=_polaris_leaser, args=(url, start, out)))
    for p in procs:
        p.start()
    start.wait(timeout=120)
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    leases = [item for chunk in results for item in chunk]
    per_task = Counter((realm, task_id) for realm, task_id, _, _ in leases)
    assert len(per_task) == len(REALMS) * TASKS_PER_REALM  # every task leased...
    assert max(per_task.values()) == 1  # ...exactly once
    by_leaser = Counter(name for *_, name in leases)
    assert len(by_leaser) >= 3, by_leaser  # the race was real: several leasers won tasks
    rows = metastore.list_tasks()
    assert all(row.attempt_count == 1 for row in rows)
    holder = {(realm, task_id): name for realm, task_id, _, name in leases}
    assert all(row.executor_id == holder[(row.realm_id, row.id)] for row in rows)
