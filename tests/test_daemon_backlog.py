"""The backlog asset and its checks, reported by the sensors a real ``dagster-daemon`` ticks.

No schedule and no run: the sweeper's tick carries the asset's numbers and the
three metastore checks as asset events, which the daemon stores; the watch
sensor reports the sweeper's freshness. The test seeds rows in the session's
PostgreSQL metastore, starts the daemon, and reads the instance.
"""

from __future__ import annotations

from typing import Any

import pytest
from dagster import AssetCheckKey, AssetKey, AssetRecordsFilter

from builders.daemon import DaemonHarness
from builders.tasks import batch_task
from polaris_pipeline.dagster.backlog.checks import (
    DEAD_CHECK,
    FAILING_CHECK,
    FRESHNESS_CHECK,
    ORPHAN_CHECK,
)
from polaris_pipeline.dagster.backlog.report import ASSET_NAME, TOTAL_KEY, realm_key
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.daemon_fixtures import metastore_for
from tests.support.tasks import seed

pytestmark = pytest.mark.slow

ASSET_KEY = AssetKey(ASSET_NAME)
# Long enough that the live lease below stays live for the whole test.
LEASE_TIMEOUT_MS = 600_000


def _dead(store: Metastore, realm: str, *, permanent: bool) -> int:
    """A task whose only allowed attempt failed (max_attempts 1): dead-lettered."""
    [task] = seed(store, realm, 1, create_timestamp=store.now_ms() - 60_000)
    lease = store.lease_task(realm, task.id, "test-executor")
    assert lease is not None
    assert store.fail(lease, "storage said no", permanent=permanent).outcome.value == "dead"
    return task.id


def _latest_status(daemon: DaemonHarness, check: str) -> str | None:
    history = daemon.instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(ASSET_KEY, check), limit=1
    )
    return history[0].status.value if history else None


def _backlog(daemon: DaemonHarness) -> Any:
    records = daemon.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=ASSET_KEY), limit=1
    ).records
    return records[0] if records else None


def test_the_daemon_stores_the_backlog_and_its_checks_from_the_sweepers_ticks(
    pg_url: str, start_daemon
) -> None:
    store = metastore_for(pg_url, lease_timeout_ms=LEASE_TIMEOUT_MS, max_attempts=1)
    exhausted = _dead(store, "POLARIS", permanent=False)
    _dead(store, "B", permanent=True)
    now = store.now_ms()
    store.insert_tasks(
        [
            batch_task(
                "POLARIS",
                create_timestamp=now - 60_000,
                extra={
                    Prop.EXECUTOR: "polaris-server-1",
                    Prop.START_TIME: str(now),
                    Prop.ATTEMPT_COUNT: "1",
                },
            )
        ]
    )
    daemon = start_daemon(metastore_url=pg_url, lease_timeout_ms=LEASE_TIMEOUT_MS, max_attempts=1)

    # The daemon stores a tick's events one by one: the last check comes last.
    daemon.wait_for(
        lambda: _latest_status(daemon, ORPHAN_CHECK), timeout_s=90, what="a backlog report"
    )
    record = _backlog(daemon)
    # Reported by a sensor tick: no run made it.
    assert record.run_id == ""
    meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
    assert (meta["dead"], meta["leased"], meta["orphaned"], meta[TOTAL_KEY]) == (2, 1, 0, 3)
    assert meta[realm_key("POLARIS", "dead")] == 1 and meta[realm_key("B", "dead")] == 1
    assert meta[realm_key("POLARIS", TOTAL_KEY)] == 2
    # The metastore checks came with it.
    assert _latest_status(daemon, DEAD_CHECK) == "FAILED"
    assert _latest_status(daemon, FAILING_CHECK) == "FAILED"  # B's permanent failure
    assert _latest_status(daemon, ORPHAN_CHECK) == "SUCCEEDED"
    history = daemon.instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(ASSET_KEY, DEAD_CHECK), limit=1
    )
    assert history[0].event is not None
    evaluation = history[0].event.dagster_event.asset_check_evaluation_data
    assert str(exhausted) in str(evaluation.metadata["sample"].value)

    # The watch sees the sweeper sweeping (its first look may precede the first sweep).
    daemon.wait_for(
        lambda: _latest_status(daemon, FRESHNESS_CHECK) == "SUCCEEDED" or None,
        timeout_s=90,
        what="the watch to report the sweeper sweeping",
    )
    # Nothing of this took a run.
    assert daemon.runs(job_name=None) == [], daemon.diagnose()
