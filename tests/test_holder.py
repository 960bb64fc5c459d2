"""A holder that abandons a batch holds on under a new id, on a real metastore (PostgreSQL
and SQLite): the id changes, so the abandoned leases lapse, and keeps the operator's prefix
and the command's kind, which lastAttemptExecutorId shows."""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy.exc

from builders.tasks import batch_task
from polaris_pipeline.execution import sweep as sweep_module
from polaris_pipeline.execution.heartbeat import Heartbeat
from polaris_pipeline.execution.holder import make_executor_id
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore

pytestmark = pytest.mark.lease_policy(grace_ms=0)


def test_an_abandoned_batch_leaves_its_leases_and_the_next_keep_the_prefix_and_kind(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = metastore.now_ms() - 60_000
    metastore.insert_tasks([batch_task("R", create_timestamp=old) for _ in range(2)])
    runner = Runner(metastore, executor_id=make_executor_id("sweep", "acme-east"))
    first_id = runner.executor_id

    def fail(*_: Any, **__: Any) -> None:
        raise RuntimeError("the step's process is going away")

    monkeypatch.setattr(sweep_module, "execute_tree", fail)
    try:
        with pytest.raises(RuntimeError, match="going away"):
            sweep_tasks(runner, ["R"], batch_size=1)
        renewed_id = runner.executor_id
        assert renewed_id != first_id
        assert renewed_id.startswith("acme-east:sweep:"), renewed_id
        # The second task, leased after the abandon, is written under the new id.
        (lease,) = runner.lease(1, ["R"])
        row = metastore.get_task("R", lease.task_id)
        assert row is not None and row.executor_id == renewed_id
    finally:
        runner.close()


def test_the_heartbeat_goes_on_beating_after_an_error_that_is_not_the_metastores(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLAlchemy's own pool timeout is not a MetastoreError: a beat that raised it ended the
    thread, and every later renewal with it, unseen."""
    calls: list[str] = []
    renew = metastore.renew_held_by

    def flaky(realm_id: str, executor_id: str) -> int:
        calls.append(realm_id)
        if len(calls) == 1:
            raise sqlalchemy.exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached")
        return renew(realm_id, executor_id)

    monkeypatch.setattr(metastore, "renew_held_by", flaky)
    heartbeat = Heartbeat(metastore, "holder", 0.02)
    try:
        heartbeat.watch("R")
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        heartbeat.stop()
    assert len(calls) >= 3, calls
    assert heartbeat.failures == 1
    assert "lease heartbeat failed: TimeoutError: QueuePool limit" in caplog.text
