"""The task backlog of every realm, as one asset the UI plots, with four checks.

``polaris_task_backlog`` is one (non-partitioned) asset: each materialization
records, as numeric metadata, how many tasks are in each state and how long
the longest-waiting orphan has waited, over all realms (``pending``, ``total``,
...) and per realm (``POLARIS/pending``, ``POLARIS/total``, ...). The UI plots
every number over time on the asset's page. It is not partitioned by realm:
partitioned asset checks are a Dagster preview feature (a warning at every
code-server start), and a realm is not a slice of data that is "missing" or
"materialized" anyway. Its checks read the metastore and the instance:

- ``no_dead_tasks`` fails (ERROR) while tasks are dead-lettered after exhausting
  their attempts, with their count and a sample of ids and last errors;
- ``no_failing_tasks`` fails on permanent failures (ERROR: dead-lettered at once,
  retrying cannot heal them) and on tasks backing off after many attempts (WARN);
- ``no_stale_orphans`` fails (ERROR) when an orphan has waited longer than
  ``max_orphan_age_seconds`` (default 1 h): the sweepers are not keeping up;
- ``sweeper_is_sweeping`` fails (ERROR) when the sweeper sensor has not swept for
  ``freshness_intervals`` sweep intervals: the daemon is down, or the sensor is
  stopped or failing.

``polaris_backlog_schedule`` refreshes the asset and runs the checks every five
minutes, in one short in-process run.
"""

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetSelection,
    ConfigurableResource,
    DagsterInstance,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    ScheduleDefinition,
    asset,
    asset_check,
    define_asset_job,
    in_process_executor,
)
from dagster._core.scheduler.instigation import InstigatorState, InstigatorType
from pydantic import Field

from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweeper import SENSOR_NAME, SweepCursor
from polaris_pipeline.formatting import iso_utc, short_task_name
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import DEFAULT_MAX_ORPHAN_AGE_S
from polaris_pipeline.tasks.model import Prop, TaskRow, TaskState
from polaris_pipeline.tasks.summary import orphaned_since_ms

ASSET_NAME = "polaris_task_backlog"
DEAD_CHECK = "no_dead_tasks"
FAILING_CHECK = "no_failing_tasks"
ORPHAN_CHECK = "no_stale_orphans"
FRESHNESS_CHECK = "sweeper_is_sweeping"
CHECK_NAMES = (DEAD_CHECK, FAILING_CHECK, ORPHAN_CHECK, FRESHNESS_CHECK)
JOB_NAME = "polaris_backlog_job"
SCHEDULE_NAME = "polaris_backlog_schedule"
DEFAULT_CRON = "*/5 * * * *"

# Metadata keys of the asset: one per state (the TaskState values), then these;
# each also prefixed by a realm (``realm_key``).
TOTAL_KEY = "total"
OLDEST_ORPHAN_KEY = "oldest orphan age (s)"


def realm_key(realm: str, key: str) -> str:
    """The metadata key of one realm's number: ``POLARIS/orphaned``."""
    return f"{realm}/{key}"


class BacklogSettings(ConfigurableResource):
    """Thresholds of the backlog checks."""

    max_orphan_age_seconds: float = Field(
        default=DEFAULT_MAX_ORPHAN_AGE_S,
        description=(
            "An orphan (a task available to the sweepers) waiting longer than this fails the "
            "no_stale_orphans check: the sweepers are not keeping up, or not running."
        ),
    )
    many_attempts: int = Field(
        default=3,
        description=(
            "A task backing off after this many attempts or more fails the no_failing_tasks "
            "check (WARN): it keeps failing for a reason an operator should look at."
        ),
    )
    freshness_intervals: float = Field(
        default=3,
        description=(
            "The sweeper_is_sweeping check fails when the sweeper has not swept for this many "
            "of its longest intervals (interval_seconds x (1 + jitter))."
        ),
    )
    sample_size: int = Field(
        default=5, description="How many tasks a failed check lists in its metadata."
    )


# ------------------------------------------------------------------ reading


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


def backlog_realms(metastore: PolarisMetastoreResource, store: Metastore) -> list[str]:
    """The deployment's realms when it is restricted to some, else every realm with tasks."""
    return list(metastore.realms) if metastore.realms else store.realms()


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


def _tasks_in(
    store: Metastore, realms: Sequence[str], states: set[TaskState]
) -> list[tuple[TaskRow, TaskState]]:
    """Rows in ``states``; read only when the counts say there are some."""
    counts = store.count_by_state(realms)
    if not any(c[s] for c in counts.values() for s in states):
        return []
    _, rows = store.tasks_with_state(realms)
    return [(task, state) for task, state in rows if state in states]


def backlog_metadata(backlogs: Iterable[RealmBacklog]) -> dict[str, MetadataValue]:
    """Numbers only, so that the UI plots each of them over time: all realms, then each."""
    listed = list(backlogs)
    overall: Counter[TaskState] = Counter()
    for backlog in listed:
        overall.update(backlog.counts)
    meta: dict[str, MetadataValue] = {s.value: MetadataValue.int(overall[s]) for s in TaskState}
    meta[TOTAL_KEY] = MetadataValue.int(sum(overall.values()))
    oldest = max((b.oldest_orphan_age_s for b in listed), default=0.0)
    meta[OLDEST_ORPHAN_KEY] = MetadataValue.float(round(oldest, 3))
    for backlog in listed:
        for state in TaskState:
            meta[realm_key(backlog.realm, state.value)] = MetadataValue.int(backlog.counts[state])
        meta[realm_key(backlog.realm, TOTAL_KEY)] = MetadataValue.int(sum(backlog.counts.values()))
        meta[realm_key(backlog.realm, OLDEST_ORPHAN_KEY)] = MetadataValue.float(
            round(backlog.oldest_orphan_age_s, 3)
        )
    return meta


def _task_entry(task: TaskRow) -> dict[str, Any]:
    return {
        "realm": task.realm_id,
        "task_id": str(task.id),
        "name": short_task_name(task.name),
        "attempts": task.attempt_count,
        "last_error": task.last_error or "",
        "last_run_id": task.properties.get(Prop.RUN_ID, ""),
    }


def _orphan_entry(orphan: Orphan) -> dict[str, Any]:
    return {
        "realm": orphan.task.realm_id,
        "task_id": str(orphan.task.id),
        "name": short_task_name(orphan.task.name),
        "waiting_s": round(orphan.waited_s, 1),
        "attempts": orphan.task.attempt_count,
    }


def _last_runs(tasks: Iterable[TaskRow]) -> dict[str, MetadataValue]:
    """``last run of POLARIS/42``: a link to the run of each task's last attempt."""
    return {
        f"last run of {t.realm_id}/{t.id}": MetadataValue.dagster_run(run_id)
        for t in tasks
        if (run_id := t.properties.get(Prop.RUN_ID))
    }


def _per_realm(tasks: Iterable[TaskRow], realms: Sequence[str], key: str) -> dict[str, Any]:
    counts = Counter(t.realm_id for t in tasks)
    return {realm_key(r, key): MetadataValue.int(counts[r]) for r in realms}


def _where(realms: Sequence[str]) -> str:
    return f"realm {realms[0]}" if len(realms) == 1 else f"realms {', '.join(realms)}"


# ------------------------------------------------------------------ the checks


def evaluate_dead_check(
    store: Metastore, realms: Sequence[str], sample_size: int
) -> AssetCheckResult:
    """Dead after exhausting the attempts; permanent failures are ``no_failing_tasks``'s."""
    dead = [t for t, _ in _tasks_in(store, realms, {TaskState.DEAD}) if not t.failure_permanent]
    meta: dict[str, Any] = {"dead tasks": MetadataValue.int(len(dead))}
    meta.update(_per_realm(dead, realms, "dead tasks"))
    if not dead:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.ERROR)
    meta["sample"] = MetadataValue.json([_task_entry(t) for t in dead[:sample_size]])
    meta.update(_last_runs(dead[:sample_size]))
    meta["revive with"] = MetadataValue.text(
        f"polaris-pipeline tasks requeue <task id> --realm {dead[0].realm_id}"
    )
    in_realms = sorted({t.realm_id for t in dead})
    return AssetCheckResult(
        passed=False,
        metadata=meta,
        severity=AssetCheckSeverity.ERROR,
        description=(
            f"{len(dead)} dead-lettered task(s) in {_where(in_realms)}: their attempts are "
            "exhausted and their files are still in storage"
        ),
    )


def evaluate_failing_check(
    store: Metastore, realms: Sequence[str], many_attempts: int, sample_size: int
) -> AssetCheckResult:
    """Permanent failures (ERROR) and tasks backing off after ``many_attempts`` (WARN)."""
    rows = _tasks_in(store, realms, {TaskState.DEAD, TaskState.BACKING_OFF})
    permanent = [t for t, state in rows if state is TaskState.DEAD and t.failure_permanent]
    retrying = [
        t
        for t, state in rows
        if state is TaskState.BACKING_OFF and t.attempt_count >= many_attempts
    ]
    meta: dict[str, Any] = {
        "permanent failures": MetadataValue.int(len(permanent)),
        "backing off after many attempts": MetadataValue.int(len(retrying)),
        "many attempts": MetadataValue.int(many_attempts),
    }
    meta.update(_per_realm(permanent, realms, "permanent failures"))
    meta.update(_per_realm(retrying, realms, "backing off after many attempts"))
    if not permanent and not retrying:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.WARN)
    if permanent:
        meta["permanent (sample)"] = MetadataValue.json(
            [_task_entry(t) for t in permanent[:sample_size]]
        )
        meta.update(_last_runs(permanent[:sample_size]))
    if retrying:
        retrying.sort(key=lambda t: t.attempt_count, reverse=True)
        meta["backing off (sample)"] = MetadataValue.json(
            [_task_entry(t) for t in retrying[:sample_size]]
        )
    parts = []
    if permanent:
        parts.append(
            f"{len(permanent)} task(s) failed permanently (retrying cannot heal them: fix the "
            "cause, then requeue)"
        )
    if retrying:
        parts.append(f"{len(retrying)} task(s) backing off after {many_attempts}+ attempts")
    return AssetCheckResult(
        passed=False,
        metadata=meta,
        severity=AssetCheckSeverity.ERROR if permanent else AssetCheckSeverity.WARN,
        description="; ".join(parts),
    )


def evaluate_orphan_check(
    store: Metastore, realms: Sequence[str], max_age_s: float, sample_size: int
) -> AssetCheckResult:
    backlogs = [read_backlog(store, realm) for realm in realms]
    orphans = sorted(
        (o for b in backlogs for o in b.orphans), key=lambda o: o.waited_s, reverse=True
    )
    stale = [o for o in orphans if o.waited_s > max_age_s]
    oldest = orphans[0].waited_s if orphans else 0.0
    meta: dict[str, Any] = {
        "orphaned": MetadataValue.int(sum(b.counts[TaskState.ORPHANED] for b in backlogs)),
        "stale orphans": MetadataValue.int(len(stale)),
        OLDEST_ORPHAN_KEY: MetadataValue.float(round(oldest, 3)),
        "threshold (s)": MetadataValue.float(float(max_age_s)),
    }
    meta.update(_per_realm((o.task for o in stale), realms, "stale orphans"))
    if not stale:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.ERROR)
    meta["sample"] = MetadataValue.json([_orphan_entry(o) for o in stale[:sample_size]])
    in_realms = sorted({o.task.realm_id for o in stale})
    return AssetCheckResult(
        passed=False,
        metadata=meta,
        severity=AssetCheckSeverity.ERROR,
        description=(
            f"{len(stale)} task(s) in {_where(in_realms)} available to the sweepers for longer "
            f"than {max_age_s:g} s (oldest {oldest:.0f} s): is the sweeper sensor running, and "
            "the run queue draining?"
        ),
    )


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
        "realm under keys such as POLARIS/orphaned."
    ),
)
def polaris_task_backlog(
    context: AssetExecutionContext, metastore: PolarisMetastoreResource
) -> MaterializeResult:
    store = metastore.get_metastore()
    backlogs = [read_backlog(store, realm) for realm in backlog_realms(metastore, store)]
    for backlog in backlogs:
        counts = ", ".join(f"{backlog.counts[s]} {s.value}" for s in TaskState)
        context.log.info(
            f"realm {backlog.realm}: {counts}; "
            f"oldest orphan waiting {backlog.oldest_orphan_age_s:.0f} s"
        )
    if not backlogs:
        context.log.info("no realm has tasks")
    return MaterializeResult(metadata=backlog_metadata(backlogs))


@asset_check(
    asset=polaris_task_backlog,
    name=DEAD_CHECK,
    description=(
        "Fails while tasks are dead-lettered after exhausting their attempts: their files stay in "
        "storage until an operator fixes the cause and requeues them."
    ),
)
def no_dead_tasks(
    metastore: PolarisMetastoreResource, backlog: BacklogSettings
) -> AssetCheckResult:
    store = metastore.get_metastore()
    return evaluate_dead_check(store, backlog_realms(metastore, store), backlog.sample_size)


@asset_check(
    asset=polaris_task_backlog,
    name=FAILING_CHECK,
    description=(
        "Fails on permanent failures (ERROR: dead-lettered at once, retrying cannot heal them) "
        "and on tasks backing off after many attempts (WARN: many_attempts of the backlog "
        "resource)."
    ),
)
def no_failing_tasks(
    metastore: PolarisMetastoreResource, backlog: BacklogSettings
) -> AssetCheckResult:
    store = metastore.get_metastore()
    return evaluate_failing_check(
        store, backlog_realms(metastore, store), backlog.many_attempts, backlog.sample_size
    )


@asset_check(
    asset=polaris_task_backlog,
    name=ORPHAN_CHECK,
    description=(
        "Fails when a task has been available to the sweepers for longer than the threshold "
        "(max_orphan_age_seconds of the backlog resource, default 1 h)."
    ),
)
def no_stale_orphans(
    metastore: PolarisMetastoreResource, backlog: BacklogSettings
) -> AssetCheckResult:
    store = metastore.get_metastore()
    return evaluate_orphan_check(
        store, backlog_realms(metastore, store), backlog.max_orphan_age_seconds, backlog.sample_size
    )


@asset_check(
    asset=polaris_task_backlog,
    name=FRESHNESS_CHECK,
    description=(
        "Fails when the sweeper sensor has not swept for freshness_intervals of its intervals "
        "(the dagster-daemon is down, or the sensor is stopped or failing)."
    ),
)
def sweeper_is_sweeping(
    context: AssetCheckExecutionContext, sweeper: SweeperSettings, backlog: BacklogSettings
) -> AssetCheckResult:
    return evaluate_freshness(
        sweeper_states(context.instance, SENSOR_NAME),
        time.time(),
        sweeper,
        backlog.freshness_intervals,
    )


BACKLOG_CHECKS = [no_dead_tasks, no_failing_tasks, no_stale_orphans, sweeper_is_sweeping]

polaris_backlog_job = define_asset_job(
    JOB_NAME,
    selection=AssetSelection.assets(polaris_task_backlog),
    executor_def=in_process_executor,
    description="Refresh the backlog asset and run its checks, for every realm, in one run.",
)


def build_backlog_schedule(
    cron_schedule: str = DEFAULT_CRON,
    *,
    default_status: DefaultScheduleStatus = DefaultScheduleStatus.RUNNING,
) -> ScheduleDefinition:
    """One backlog run (every realm, every check) at each tick of ``cron_schedule``."""
    return ScheduleDefinition(
        name=SCHEDULE_NAME,
        cron_schedule=cron_schedule,
        job=polaris_backlog_job,
        default_status=default_status,
        description=(
            "Refreshes polaris_task_backlog and its checks (dead, failing, stale orphans, "
            "sweeper freshness) for every realm: one short in-process run."
        ),
    )


polaris_backlog_schedule = build_backlog_schedule()

__all__ = [
    "ASSET_NAME",
    "BACKLOG_CHECKS",
    "CHECK_NAMES",
    "DEAD_CHECK",
    "FAILING_CHECK",
    "FRESHNESS_CHECK",
    "JOB_NAME",
    "OLDEST_ORPHAN_KEY",
    "ORPHAN_CHECK",
    "SCHEDULE_NAME",
    "TOTAL_KEY",
    "BacklogSettings",
    "RealmBacklog",
    "backlog_realms",
    "build_backlog_schedule",
    "evaluate_dead_check",
    "evaluate_failing_check",
    "evaluate_freshness",
    "evaluate_orphan_check",
    "no_dead_tasks",
    "no_failing_tasks",
    "no_stale_orphans",
    "polaris_backlog_job",
    "polaris_backlog_schedule",
    "polaris_task_backlog",
    "read_backlog",
    "realm_key",
    "sweeper_is_sweeping",
    "sweeper_states",
]
