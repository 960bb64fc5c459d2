"""``sweeper_is_sweeping``: whether a running sweeper has swept lately, from its stored
state on the Dagster instance (never the metastore)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, DagsterInstance, MetadataValue

# No public API lists a sensor's stored states by name (dagster 1.13).
from dagster._core.scheduler.instigation import InstigatorState, InstigatorType

from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweeper_state import SENSOR_NAME, SweepCursor
from polaris_pipeline.tasks.formatting import iso_utc


def sweeper_states(instance: DagsterInstance) -> list[InstigatorState]:
    """The stored states of the sweeper sensor (one per code location that has it)."""
    return [
        state
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if state.instigator_name == SENSOR_NAME
    ]


def evaluate_freshness(
    states: Sequence[InstigatorState],
    now_s: float,
    sweeper: SweeperSettings,
    intervals: float,
) -> AssetCheckResult:
    """Fails when no running sweeper has swept within ``intervals`` of its longest waits.

    A sweep moves the cursor's ``next_sweep_ms`` forward; the daemon being down, the
    sensor stopped, or every evaluation failing leaves it in the past. A state
    without a cursor yet counts from the sensor's last start.
    """
    longest_s = sweeper.interval_seconds * (1 + sweeper.jitter)
    # At least a minute: the daemon evaluates sensors every few seconds, not exactly.
    allowed_s = max(60.0, intervals * longest_s)
    meta: dict[str, Any] = {
        "allowed delay (s)": MetadataValue.float(round(allowed_s, 3)),
        "sweeper sensor": MetadataValue.text(SENSOR_NAME),
    }
    running = [s for s in states if s.is_running]
    if not running:
        why = "is stopped" if states else "has never started on this instance"
        return AssetCheckResult(
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            metadata={**meta, "sensor status": MetadataValue.text(why)},
            description=(
                f"the sweeper sensor {SENSOR_NAME} {why}: no task is swept (start it on the "
                "Automation page)"
            ),
        )
    best_due_s: float | None = None
    last_tick_s: float | None = None
    for state in running:
        data = state.sensor_instigator_data
        if data is None:
            continue
        cursor = SweepCursor.parse(data.cursor)
        due = (
            cursor.next_sweep_ms / 1000
            if cursor.next_sweep_ms is not None
            else data.last_sensor_start_timestamp
        )
        if due is not None and (best_due_s is None or due > best_due_s):
            best_due_s = due
        if data.last_tick_timestamp is not None:
            last_tick_s = max(last_tick_s or 0.0, data.last_tick_timestamp)
    if last_tick_s is not None:
        meta["last tick"] = MetadataValue.text(iso_utc(int(last_tick_s * 1000)) or "")
    if best_due_s is not None:
        meta["sweep due since"] = MetadataValue.text(iso_utc(int(best_due_s * 1000)) or "")
    overdue_s = now_s - best_due_s if best_due_s is not None else None
    meta["overdue (s)"] = MetadataValue.float(round(max(0.0, overdue_s or 0.0), 3))
    if overdue_s is not None and overdue_s <= allowed_s:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.ERROR)
    detail = (
        f"its sweep has been due for {overdue_s:.0f} s (allowed {allowed_s:.0f} s)"
        if overdue_s is not None
        else "it has not ticked yet"
    )
    return AssetCheckResult(
        passed=False,
        metadata=meta,
        severity=AssetCheckSeverity.ERROR,
        description=(
            f"the sweeper sensor {SENSOR_NAME} is running but has not swept: {detail}; is the "
            "dagster-daemon running, and are its ticks failing?"
        ),
    )


def freshness_of(
    instance: DagsterInstance, sweeper: SweeperSettings, backlog: BacklogSettings
) -> AssetCheckResult:
    """``sweeper_is_sweeping`` now, from the sweeper's stored state on ``instance``."""
    return evaluate_freshness(
        sweeper_states(instance), time.time(), sweeper, backlog.freshness_intervals
    )
