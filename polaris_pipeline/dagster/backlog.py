"""The task backlog of every realm, as one asset the UI plots, with four checks.

``polaris_task_backlog`` is one (non-partitioned) asset: each materialization
records, as numeric metadata, how many tasks are in each state and how long
the longest-waiting orphan has waited, over all realms (``pending``, ``total``,
...) and per realm (``POLARIS/pending``, ``POLARIS/total``, ...). The UI plots
every number over time on the asset's page. It is not partitioned by realm:
partitioned asset checks are a Dagster preview feature (a warning at every
code-server start), and a realm is not a slice of data that is "missing" or
"materialized" anyway.

No run refreshes the asset or its checks. The sweeper sensor reports the asset's numbers and the
three metastore checks with its sweeps (at most every ``report_interval_seconds``,
``backlog_report.backlog_events``): the daemon stores a sensor's asset events as
they are. A sweeper cannot report that it stopped, so ``polaris_sweeper_watch``,
a sensor that reads only the instance, reports ``sweeper_is_sweeping``. The
asset's *Materialize* and a check's *Execute* compute the same results on
demand, in a run.
"""

import time
from collections.abc import Sequence
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    DagsterInstance,
    DefaultSensorStatus,
    MaterializeResult,
    MetadataValue,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    asset,
    asset_check,
    sensor,
)
from dagster._core.scheduler.instigation import InstigatorState, InstigatorType

from polaris_pipeline.dagster.backlog_report import (
    ASSET_NAME,
    DEAD_CHECK,
    FAILING_CHECK,
    FRESHNESS_CHECK,
    METASTORE_CHECKS,
    ORPHAN_CHECK,
    BacklogSettings,
    backlog_lines,
    backlog_metadata,
    check_evaluation,
    evaluate_metastore_check,
    read_report,
)
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweeper import SENSOR_NAME, SweepCursor
from polaris_pipeline.report.formatting import iso_utc

WATCH_NAME = "polaris_sweeper_watch"
# The watch reads one instigator state per evaluation: cheap, and a stopped
# sweeper shows within a minute.
WATCH_INTERVAL_SECONDS = 30


def sweeper_states(instance: DagsterInstance, sensor_name: str) -> list[InstigatorState]:
    """The stored states of the sweeper sensor (one per code location that has it)."""
    return [
        state
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if state.instigator_name == sensor_name
    ]


def evaluate_freshness(
    states: Sequence[InstigatorState],
    now_s: float,
    sweeper: SweeperSettings,
    intervals: float,
    sensor_name: str = SENSOR_NAME,
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
        "sweeper sensor": MetadataValue.text(sensor_name),
    }
    running = [s for s in states if s.is_running]
    if not running:
        why = "is stopped" if states else "has never started on this instance"
        return AssetCheckResult(
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            metadata={**meta, "sensor status": MetadataValue.text(why)},
            description=(
                f"the sweeper sensor {sensor_name} {why}: no task is swept (start it on the "
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
            f"the sweeper sensor {sensor_name} is running but has not swept: {detail}; is the "
            "dagster-daemon running, and are its ticks failing?"
        ),
    )


# --------------------------------------------------------------- definitions


@asset(
    name=ASSET_NAME,
    group_name="polaris",
    kinds={"polaris"},
    description=(
        "Cleanup tasks by state (pending, orphaned, leased, backing-off, dead), their total, and "
        "how long the longest-waiting orphan has waited, in seconds: over all realms, and per "
        "realm under keys such as POLARIS/orphaned. Reported by the sweeper sensor with its "
        "sweeps; Materialize refreshes it now."
    ),
)
def polaris_task_backlog(
    context: AssetExecutionContext, metastore: PolarisMetastoreResource
) -> MaterializeResult:
    report = read_report(metastore.get_metastore(), metastore.realms)
    for line in backlog_lines(report):
        context.log.info(line)
    return MaterializeResult(metadata=backlog_metadata(report.backlogs))


_CHECK_DESCRIPTIONS = {
    DEAD_CHECK: (
        "Fails while tasks are dead-lettered after exhausting their attempts: their files stay in "
        "storage until an operator fixes the cause and requeues them."
    ),
    FAILING_CHECK: (
        "Fails on permanent failures (ERROR: dead-lettered at once, retrying cannot heal them) "
        "and on tasks backing off after many attempts (WARN: many_attempts of the backlog "
        "resource)."
    ),
    ORPHAN_CHECK: (
        "Fails when a task has been available to the sweepers for longer than the threshold "
        "(max_orphan_age_seconds of the backlog resource, default 1 h)."
    ),
}


def _metastore_check(name: str) -> AssetChecksDefinition:
    """The check ``name``: the sweeper reports it; Execute runs the same evaluation."""

    @asset_check(
        asset=polaris_task_backlog,
        name=name,
        description=_CHECK_DESCRIPTIONS[name] + " Reported by the sweeper sensor with its sweeps.",
    )
    def _check(metastore: PolarisMetastoreResource, backlog: BacklogSettings) -> AssetCheckResult:
        report = read_report(metastore.get_metastore(), metastore.realms)
        return evaluate_metastore_check(name, report, backlog)

    return _check


no_dead_tasks, no_failing_tasks, no_stale_orphans = (
    _metastore_check(name) for name in METASTORE_CHECKS
)


def freshness_of(
    instance: DagsterInstance, sweeper: SweeperSettings, backlog: BacklogSettings
) -> AssetCheckResult:
    """``sweeper_is_sweeping`` now, from the sweeper's stored state on ``instance``."""
    return evaluate_freshness(
        sweeper_states(instance, SENSOR_NAME), time.time(), sweeper, backlog.freshness_intervals
    )


@asset_check(
    asset=polaris_task_backlog,
    name=FRESHNESS_CHECK,
    description=(
        "Fails when the sweeper sensor has not swept for freshness_intervals of its intervals "
        "(the sensor is stopped, or its ticks fail). Reported by the "
        f"{WATCH_NAME} sensor: a daemon that is down reports nothing, so the last report ages."
    ),
)
def sweeper_is_sweeping(
    context: AssetCheckExecutionContext, sweeper: SweeperSettings, backlog: BacklogSettings
) -> AssetCheckResult:
    return freshness_of(context.instance, sweeper, backlog)


BACKLOG_CHECKS = [no_dead_tasks, no_failing_tasks, no_stale_orphans, sweeper_is_sweeping]


def build_sweeper_watch(
    *,
    minimum_interval_seconds: int = WATCH_INTERVAL_SECONDS,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
) -> SensorDefinition:
    """The sensor that reports ``sweeper_is_sweeping`` (never the metastore: the instance only)."""

    @sensor(
        name=WATCH_NAME,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={"sweeper", "backlog"},
        description=(
            f"Reports the {FRESHNESS_CHECK} check of {ASSET_NAME} from the stored state of "
            f"{SENSOR_NAME}: a sweeper that is stopped or failing cannot report it itself. "
            "Reads the Dagster instance only."
        ),
    )
    def _watch(context: SensorEvaluationContext, **_keys: Any) -> SensorResult:
        # A test's call passes the resources as keywords; the daemon's does not.
        resources = context.resources
        result = freshness_of(context.instance, resources.sweeper, resources.backlog)
        verdict = "passed" if result.passed else f"failed: {result.description}"
        return SensorResult(
            asset_events=[check_evaluation(FRESHNESS_CHECK, result)],
            skip_reason=f"{FRESHNESS_CHECK} {verdict}",
        )

    return _watch


polaris_sweeper_watch = build_sweeper_watch()
