"""Scenario 1: four sweeper processes and a Polaris-style executor race over one task table."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

import pytest

from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from tests.reliability import journal as jr
from tests.reliability.harness import (
    SIZES,
    RelDb,
    Scenario,
    Workers,
    iter_chunks,
    left_over,
    list_tree,
    policy_dict,
    rel_policy,
    touch_all,
    wait_for,
)

REALMS = ["alpha", "beta", "gamma"]
FILES_PER_TASK = 1


class CommonConfig(TypedDict):
    """The worker settings (tests/reliability/worker.py) every racer shares."""

    url: str
    policy: dict[str, Any]
    start_file: str
    deadline_s: int


@pytest.mark.scenario(1, "Races: sweepers and Polaris's own executor on one task table")
def test_sweepers_and_polaris_race_without_double_runs(
    rel_db: RelDb, workers: Workers, scenario: Scenario, tmp_path: Path
) -> None:
    n_tasks, n_sweepers = SIZES.race_tasks, SIZES.race_sweepers
    policy = rel_policy(lease_timeout_ms=60_000)  # nothing expires: every run is a first run
    root = tmp_path / "wh"
    expected: set[str] = set()
    neighbours: list[Path] = []
    tasks = []
    for i in range(n_tasks):
        realm = REALMS[i % len(REALMS)]
        table = root / realm / f"t{i}"
        files = [table / "metadata" / f"f{k}.avro" for k in range(FILES_PER_TASK)]
        uris = [f"file://{f}" for f in files]
        expected.update(uris)
        if i % 10 == 0:
            # Unlisted files inside the location, and a sibling sharing its name prefix.
            neighbours += [table / "metadata" / "unlisted.avro", root / realm / f"t{i}x" / "keep"]
        touch_all(files)
        tasks.append(
            batch_task(
                realm, uris, internal={"storageLocation": f"file://{table}"}, create_timestamp=0
            )
        )
    touch_all(neighbours, b"keep")
    store = Metastore(rel_db.url, policy=policy)
    for chunk in iter_chunks(tasks, 1000):
        store.insert_tasks(chunk)
    scenario.load = (
        f"{n_tasks} BATCH_FILE_CLEANUP tasks over {len(expected)} local files in "
        f"{len(REALMS)} realms; {n_sweepers} sweeper processes (Runner.sweep loops, batch 32) "
        "and 1 Polaris-style executor (list-then-CAS lease; Polaris 1.4.1's BATCH rules as the "
        "oracle shows them: existence check, 3 tries per delete, the row dropped once every "
        "delete succeeded) start together"
    )
    scenario.fault = "none but contention: every process leases from the same rows at once"

    go = tmp_path / "go"
    common: CommonConfig = {
        "url": rel_db.url,
        "policy": policy_dict(policy),
        "start_file": str(go),
        "deadline_s": 400,
    }
    for k in range(n_sweepers):
        workers.start(f"sweeper-{k}", "runner", batch_size=32, **common)
    workers.start("polaris", "polaris", realms=REALMS, batch_size=10, **common)
    wait_for(
        lambda: all(any(e["ev"] == "start" for e in w.events()) for w in workers.started),
        120,
        what="every worker to start",
    )
    started = time.monotonic()
    go.touch()
    for w in workers.started:
        assert w.wait(400) == 0, left_over(store) + "\n" + w.stderr()[-2000:]
    elapsed = time.monotonic() - started

    events = workers.events()
    dels = jr.deletions(events)
    remaining_rows = store.count_tasks()
    files_left = expected & list_tree(root)
    foreign = {d.uri for d in dels} - expected
    unleased = [d for d in dels if d.task < 0]
    concurrent = jr.concurrent_holders(dels)
    holders = jr.holders_per_task(dels)
    rerun = {task: h for task, h in holders.items() if len(h) > 1}
    deleted_by = Counter(d.uri for d in dels if d.result == "deleted")
    scenario.losses(
        tasks_lost=remaining_rows + sum(1 for t in tasks if (t.realm_id, t.id) not in holders),
        files_left_behind=len(files_left),
        files_wrongly_deleted=len(foreign) + len(set(map(str, neighbours)) - _present(neighbours)),
        concurrent_holders=len(concurrent),
        tasks_run_twice=len(rerun),
    )
    won = Counter(_owner({d.holder}) for d in dels)
    scenario.metrics.update(
        {
            "seconds": round(elapsed, 1),
            "tasks_per_second": round(n_tasks / elapsed, 1),
            "files_deleted": sum(deleted_by.values()),
            "tasks_won_by": dict(sorted(Counter(_owner(h) for h in holders.values()).items())),
            "deletes_by_process": dict(sorted(won.items())),
        }
    )

    assert remaining_rows == 0
    scenario.check("the task table is empty: every task finished")
    assert not files_left, sorted(files_left)[:5]
    assert set(holders) == {(t.realm_id, t.id) for t in tasks}
    scenario.check("every task's files are gone, each deleted under a lease of that task")
    assert not foreign and _present(neighbours) == set(map(str, neighbours))
    assert not unleased
    scenario.check("no path outside the tasks' lists was deleted; unlisted neighbours remain")
    assert not concurrent, concurrent[:5]
    scenario.check("no two holders (executor, attempt) of one task deleted at overlapping times")
    assert not rerun, list(rerun.items())[:5]
    assert max(deleted_by.values()) == 1
    scenario.check("each task ran under exactly one lease; each file was deleted exactly once")
    owners = Counter(_owner(h) for h in holders.values())
    assert len([o for o in owners if o.startswith("sweeper")]) >= min(3, n_sweepers), owners
    assert owners.get("polaris", 0) > 0, owners
    scenario.check("the race was real: at least 3 sweepers and the Polaris executor won tasks")
    outcomes = jr.of_kind(events, "outcome")
    assert {e["status"] for e in outcomes} == {"done"}
    scenario.check("every attempt's outcome was 'done' (no lease lost, no failure)")


def _owner(holders: set[tuple[str, int]]) -> str:
    (executor, _), *_ = holders
    # Runner executor ids are polaris-pipeline:<name>:host:pid:uuid.
    return executor.split(":")[1] if executor.startswith("polaris-pipeline:") else executor


def _present(paths: list[Path]) -> set[str]:
    return {str(p) for p in paths if p.exists()}
