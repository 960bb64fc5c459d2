"""A holder keeps its leases for as long as it works on them, and no longer, on a real
metastore (PostgreSQL and SQLite).

A table's last stage in ``delete`` mode runs in a step of its own (the Dagster task job's
``finish_polaris_table``), whose runner never executed the table: the row is still held by
the run's lease, and the unreferenced phase's listing and deletes may outlast the lease
timeout, so that runner must renew it while the phase runs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.execution import table_finish
from polaris_pipeline.execution.outcome import Status, TableFinish
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.metastore import Metastore
from tests.support.iceberg import Warehouse
from tests.support.unreferenced import add_unreferenced, settle

LEASE_MS = 1500
# The run's executor id, the same in every step (``run_executor_id``).
RUN_EXECUTOR = "pp:run:5b0c6f1e-lease-renewal"

pytestmark = pytest.mark.lease_policy(grace_ms=0, lease_timeout_ms=LEASE_MS, unreferenced="delete")


def test_a_table_s_last_step_renews_the_lease_while_its_unreferenced_phase_runs(
    metastore: Metastore, local_warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = local_warehouse.build("t", appends=2)
    add_unreferenced(table, local_warehouse.resolver)
    settle(local_warehouse.resolver, table.location())
    task = built_tasks.drop_table_task(table)
    metastore.insert_tasks([task])

    def step() -> Runner:
        return Runner(
            metastore,
            local_warehouse.config,
            executor_id=RUN_EXECUTOR,
            resolver=local_warehouse.resolver,
            heartbeat_interval_s=0.1,
        )

    with step() as root_step:  # the root step, then the children's steps
        decision = root_step.start("POLARIS", task.id)
        assert decision.lease is not None
        root = root_step.execute(decision.lease, decoded=decision.decoded)
        assert root.finish is not None, root.error
        assert all(root_step.execute(child).ok for child in root.children)
    handed = TableFinish.from_dict(root.finish.to_dict())

    slow_phase = table_finish.run_phase

    def listing_a_large_location(*args: Any, **kwargs: Any) -> str | None:
        time.sleep(2 * LEASE_MS / 1000)  # longer than the lease: only renewals keep it
        return slow_phase(*args, **kwargs)

    monkeypatch.setattr(table_finish, "run_phase", listing_a_large_location)
    with step() as last_step:
        final = last_step.finish_table(handed, children_done=True)

    assert final.status is Status.DONE, final.error
    assert final.result is not None and final.result.unreferenced is not None
    assert final.result.unreferenced.deleted > 0
    assert metastore.get_task("POLARIS", task.id) is None
