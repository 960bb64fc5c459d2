"""The task backlog of each realm, as an asset the UI plots, with two checks.

``polaris_task_backlog`` is partitioned by realm (``polaris_realms``). Each
materialization records, as numeric metadata, how many of the realm's tasks are
in each state and how long the longest-waiting orphan has waited; the UI plots
every number over time on the asset's page. Two asset checks of the same
partition read the metastore too:

- ``no_dead_tasks`` fails (ERROR) while dead-lettered tasks exist, with their
  count and a sample of ids and last errors;
- ``no_stale_orphans`` fails (ERROR) when an orphan has waited longer than
  ``max_orphan_age_seconds`` (default 1 h): the sweepers are not keeping up,
  or not running.

``polaris_backlog_schedule`` materializes every realm's partition (asset and
checks) every five minutes: one short in-process run per realm.
"""

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetSelection,
    ConfigurableResource,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    asset,
    asset_check,
    define_asset_job,
    in_process_executor,
    schedule,
)
from pydantic import Field

from polaris_pipeline.dagster.partitions import REALM_PARTITIONS_NAME, realm_partitions
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import LeasePolicy, TaskRow, TaskState

ASSET_NAME = "polaris_task_backlog"
DEAD_CHECK = "no_dead_tasks"
ORPHAN_CHECK = "no_stale_orphans"
JOB_NAME = "polaris_backlog_job"
SCHEDULE_NAME = "polaris_backlog_schedule"
DEFAULT_CRON = "*/5 * * * *"
MAX_ORPHAN_AGE_ENV = "POLARIS_PIPELINE_MAX_ORPHAN_AGE_S"

# Metadata keys of the asset: one per state (the TaskState values), then these.
TOTAL_KEY = "total"
OLDEST_ORPHAN_KEY = "oldest orphan age (s)"


class BacklogSettings(ConfigurableResource):
    """Thresholds of the backlog checks."""

    max_orphan_age_seconds: float = Field(
        default=3600.0,
        description=(
            "An orphan (a task available to the sweepers) waiting longer than this fails the "
            "no_stale_orphans check: the sweepers are not keeping up, or not running."
        ),
    )
    sample_size: int = Field(
        default=5, description="How many tasks a failed check lists in its metadata."
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "BacklogSettings":
        """Defaults, with ``$POLARIS_PIPELINE_MAX_ORPHAN_AGE_S`` when it is set."""
        env = os.environ if environ is None else environ
        raw = env.get(MAX_ORPHAN_AGE_ENV, "").strip()
        if not raw:
            return cls()
        try:
            seconds = float(raw)
        except ValueError:
            raise ValueError(f"{MAX_ORPHAN_AGE_ENV}={raw!r} is not a number") from None
        if seconds <= 0:
            raise ValueError(f"{MAX_ORPHAN_AGE_ENV} must be positive")
        return cls(max_orphan_age_seconds=seconds)


# ------------------------------------------------------------------ reading


def orphaned_since_ms(task: TaskRow, policy: LeasePolicy) -> int:
    """When an orphaned task became available to the sweepers (epoch ms, database clock).

    The latest of: its creation (plus the grace period when it was never
    leased and is Polaris's own), the end of its last lease (released, or
    expired), the end of its backoff, and its last update (a requeue revives a
    task at that moment; every other write comes before these times anyway).
    """
    since = task.last_update_timestamp
    if task.executor_id is None:
        grace = 0 if task.created_by_us else policy.effective_grace_ms
        since = max(since, task.create_timestamp + grace)
    start = task.start_time_ms
    if task.executor_id is not None and start is not None:
        lease_end = task.end_time_ms if task.lease_released else start + policy.lease_timeout_ms
        since = max(since, lease_end or 0)
    if task.next_attempt_ms is not None:
        since = max(since, task.next_attempt_ms)
    return max(since, task.create_timestamp)


@dataclass(frozen=True)
class Orphan:
    task: TaskRow
    waited_s: float


@dataclass(frozen=True)
class RealmBacklog:
    """One realm's tasks by state, and its orphans, longest-waiting first."""

    realm: str
    counts: Counter[TaskState]
    orphans: list[Orphan]

    @property
    def oldest_orphan_age_s(self) -> float:
        return self.orphans[0].waited_s if self.orphans else 0.0


def read_backlog(store: Metastore, realm: str) -> RealmBacklog:
    """Counts from one query; task rows are read only when the realm has orphans."""
    counts = store.count_by_state([realm]).get(realm, Counter())
    orphans: list[Orphan] = []
    if counts[TaskState.ORPHANED]:
        now, rows = store.tasks_with_state([realm])
        orphans = [
            Orphan(task, max(0.0, (now - orphaned_since_ms(task, store.policy)) / 1000))
            for task, state in rows
            if state is TaskState.ORPHANED
        ]
        orphans.sort(key=lambda o: o.waited_s, reverse=True)
    return RealmBacklog(realm=realm, counts=counts, orphans=orphans)


def dead_tasks(store: Metastore, realm: str) -> list[TaskRow]:
    _, rows = store.tasks_with_state([realm])
    return [task for task, state in rows if state is TaskState.DEAD]


def backlog_metadata(backlog: RealmBacklog) -> dict[str, MetadataValue]:
    """Numbers only, so that the UI plots each of them over time."""
    meta: dict[str, MetadataValue] = {
        state.value: MetadataValue.int(backlog.counts[state]) for state in TaskState
    }
    meta[TOTAL_KEY] = MetadataValue.int(sum(backlog.counts.values()))
    meta[OLDEST_ORPHAN_KEY] = MetadataValue.float(round(backlog.oldest_orphan_age_s, 3))
    return meta


def _dead_entry(task: TaskRow) -> dict[str, Any]:
    return {
        "task_id": str(task.id),
        "name": task.name,
        "attempts": task.attempt_count,
        "last_error": task.last_error or "",
        "last_run_id": task.properties.get("lastAttemptRunId", ""),
    }


def _orphan_entry(orphan: Orphan) -> dict[str, Any]:
    return {
        "task_id": str(orphan.task.id),
        "name": orphan.task.name,
        "waiting_s": round(orphan.waited_s, 1),
        "attempts": orphan.task.attempt_count,
    }


def evaluate_dead_check(store: Metastore, realm: str, sample_size: int) -> AssetCheckResult:
    count = store.count_by_state([realm]).get(realm, Counter())[TaskState.DEAD]
    meta: dict[str, Any] = {"dead tasks": MetadataValue.int(count)}
    if not count:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.ERROR)
    sample = dead_tasks(store, realm)[:sample_size]
    meta["sample"] = MetadataValue.json([_dead_entry(t) for t in sample])
    meta["revive with"] = MetadataValue.text(
        f"polaris-pipeline tasks requeue <task id> --realm {realm}"
    )
    return AssetCheckResult(
        passed=False,
        metadata=meta,
        severity=AssetCheckSeverity.ERROR,
        description=(
            f"{count} dead-lettered task(s) in realm {realm}: their files are still in storage"
        ),
    )


def evaluate_orphan_check(
    store: Metastore, realm: str, max_age_s: float, sample_size: int
) -> AssetCheckResult:
    backlog = read_backlog(store, realm)
    stale = [o for o in backlog.orphans if o.waited_s > max_age_s]
    meta: dict[str, Any] = {
        "orphaned": MetadataValue.int(backlog.counts[TaskState.ORPHANED]),
        "stale orphans": MetadataValue.int(len(stale)),
        OLDEST_ORPHAN_KEY: MetadataValue.float(round(backlog.oldest_orphan_age_s, 3)),
        "threshold (s)": MetadataValue.float(float(max_age_s)),
    }
    if not stale:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.ERROR)
    meta["sample"] = MetadataValue.json([_orphan_entry(o) for o in stale[:sample_size]])
    return AssetCheckResult(
        passed=False,
        metadata=meta,
        severity=AssetCheckSeverity.ERROR,
        description=(
            f"{len(stale)} task(s) in realm {realm} available to the sweepers for longer than "
            f"{max_age_s:g} s (oldest {backlog.oldest_orphan_age_s:.0f} s): is the sweeper "
            "sensor running, and the run queue draining?"
        ),
    )


# --------------------------------------------------------------- definitions


@asset(
    name=ASSET_NAME,
    partitions_def=realm_partitions,
    group_name="polaris",
    kinds={"polaris"},
    description=(
        "Cleanup tasks of one realm by state (pending, orphaned, leased, backing-off, dead), "
        "their total, and how long the longest-waiting orphan has waited, in seconds."
    ),
)
def polaris_task_backlog(
    context: AssetExecutionContext, metastore: PolarisMetastoreResource
) -> MaterializeResult:
    realm = context.partition_key
    backlog = read_backlog(metastore.get_metastore(), realm)
    counts = ", ".join(f"{backlog.counts[s]} {s.value}" for s in TaskState)
    context.log.info(
        f"realm {realm}: {counts}; oldest orphan waiting {backlog.oldest_orphan_age_s:.0f} s"
    )
    return MaterializeResult(metadata=backlog_metadata(backlog))


@asset_check(
    asset=polaris_task_backlog,
    name=DEAD_CHECK,
    partitions_def=realm_partitions,
    description=(
        "Fails while the realm has dead-lettered tasks (attempts exhausted): their files stay in "
        "storage until an operator fixes the cause and requeues them."
    ),
)
def no_dead_tasks(
    context: AssetCheckExecutionContext,
    metastore: PolarisMetastoreResource,
    backlog: BacklogSettings,
) -> AssetCheckResult:
    return evaluate_dead_check(
        metastore.get_metastore(), context.partition_key, backlog.sample_size
    )


@asset_check(
    asset=polaris_task_backlog,
    name=ORPHAN_CHECK,
    partitions_def=realm_partitions,
    description=(
        "Fails when a task has been available to the sweepers for longer than the threshold "
        "(max_orphan_age_seconds of the backlog resource, default 1 h)."
    ),
)
def no_stale_orphans(
    context: AssetCheckExecutionContext,
    metastore: PolarisMetastoreResource,
    backlog: BacklogSettings,
) -> AssetCheckResult:
    return evaluate_orphan_check(
        metastore.get_metastore(),
        context.partition_key,
        backlog.max_orphan_age_seconds,
        backlog.sample_size,
    )


polaris_backlog_job = define_asset_job(
    JOB_NAME,
    selection=AssetSelection.assets(polaris_task_backlog),
    executor_def=in_process_executor,
    description="Refresh one realm's backlog asset and run its checks.",
)


def build_backlog_schedule(
    cron_schedule: str = DEFAULT_CRON,
    *,
    default_status: DefaultScheduleStatus = DefaultScheduleStatus.RUNNING,
) -> ScheduleDefinition:
    """One backlog run per realm partition at every tick of ``cron_schedule``."""

    @schedule(
        name=SCHEDULE_NAME,
        cron_schedule=cron_schedule,
        job=polaris_backlog_job,
        default_status=default_status,
        description=(
            "Refreshes polaris_task_backlog and its checks for every realm partition: one short "
            "in-process run per realm."
        ),
    )
    def _backlog_schedule(context: ScheduleEvaluationContext) -> list[RunRequest] | SkipReason:
        realms = context.instance.get_dynamic_partitions(REALM_PARTITIONS_NAME)
        if not realms:
            return SkipReason(
                f"no realm in the {REALM_PARTITIONS_NAME} partitions yet "
                "(the sweeper sensor adds them as it sees them)"
            )
        tick = context.scheduled_execution_time
        stamp = tick.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ") if tick else "manual"
        return [RunRequest(run_key=f"{realm}:{stamp}", partition_key=realm) for realm in realms]

    return _backlog_schedule


polaris_backlog_schedule = build_backlog_schedule()

__all__ = [
    "ASSET_NAME",
    "DEAD_CHECK",
    "JOB_NAME",
    "OLDEST_ORPHAN_KEY",
    "ORPHAN_CHECK",
    "SCHEDULE_NAME",
    "TOTAL_KEY",
    "BacklogSettings",
    "RealmBacklog",
    "build_backlog_schedule",
    "evaluate_dead_check",
    "evaluate_orphan_check",
    "no_dead_tasks",
    "no_stale_orphans",
    "orphaned_since_ms",
    "polaris_backlog_job",
    "polaris_backlog_schedule",
    "polaris_task_backlog",
    "read_backlog",
]
