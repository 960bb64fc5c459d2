"""The backlog's numbers and its three metastore checks, from one read of the metastore.

One ``count_by_state`` gives every realm's tasks by state; the task rows are read
(once, only for the realms that have them) when the counts show orphaned,
backing-off or dead tasks: the longest wait, the stale orphans and the samples
need them. The sweeper reports the result with its sweeps (``backlog_events``),
and the asset and its checks compute the same result when run by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    ConfigurableResource,
    MetadataValue,
)

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.formatting import short_task_name
from polaris_pipeline.settings import BacklogSection
from polaris_pipeline.tasks.model import Prop, TaskRow, TaskState
from polaris_pipeline.tasks.summary import orphaned_since_ms

ASSET_NAME = "polaris_task_backlog"
ASSET_KEY = AssetKey(ASSET_NAME)
DEAD_CHECK = "no_dead_tasks"
FAILING_CHECK = "no_failing_tasks"
ORPHAN_CHECK = "no_stale_orphans"
FRESHNESS_CHECK = "sweeper_is_sweeping"
CHECK_NAMES = (DEAD_CHECK, FAILING_CHECK, ORPHAN_CHECK, FRESHNESS_CHECK)
# The checks a read of the metastore answers; the freshness check reads the instance.
METASTORE_CHECKS = (DEAD_CHECK, FAILING_CHECK, ORPHAN_CHECK)

# Metadata keys of the asset: one per state (the TaskState values), then these;
# each also prefixed by a realm (``realm_key``).
TOTAL_KEY = "total"
OLDEST_ORPHAN_KEY = "oldest orphan age (s)"

# States whose rows the report reads: the checks list them, the orphans' waits need them.
_DETAILED = (TaskState.ORPHANED, TaskState.BACKING_OFF, TaskState.DEAD)


def realm_key(realm: str, key: str) -> str:
    """The metadata key of one realm's number: ``POLARIS/orphaned``."""
    return f"{realm}/{key}"


class BacklogSettings(ConfigurableResource, BacklogSection):
    """Thresholds of the backlog checks, and how often the sweeper reports them:
    ``BacklogSection``'s fields."""


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


@dataclass(frozen=True)
class BacklogReport:
    """Every realm's backlog, and the rows of its orphaned, backing-off and dead tasks."""

    realms: list[str]
    backlogs: list[RealmBacklog]
    rows: list[tuple[TaskRow, TaskState]]

    def tasks(self, state: TaskState) -> list[TaskRow]:
        return [task for task, s in self.rows if s is state]


def read_report(
    store: Metastore,
    realms: Sequence[str] | None,
    counts: Mapping[str, Counter[TaskState]] | None = None,
) -> BacklogReport:
    """The report of ``realms`` (None: every realm with tasks).

    ``counts``: the ``count_by_state(realms)`` the caller already made, if it did.
    """
    per_realm = store.count_by_state(realms) if counts is None else counts
    realms = list(realms) if realms is not None else sorted(per_realm)
    detailed = [r for r in realms if any(per_realm.get(r, Counter())[s] for s in _DETAILED)]
    rows: list[tuple[TaskRow, TaskState]] = []
    now = 0
    if detailed:
        now, every = store.tasks_with_state(detailed)
        rows = [(task, state) for task, state in every if state in _DETAILED]
    backlogs = []
    for realm in realms:
        orphans = [
            Orphan(task, max(0.0, (now - orphaned_since_ms(task, store.policy)) / 1000))
            for task, state in rows
            if state is TaskState.ORPHANED and task.realm_id == realm
        ]
        orphans.sort(key=lambda o: o.waited_s, reverse=True)
        backlogs.append(RealmBacklog(realm, Counter(per_realm.get(realm, Counter())), orphans))
    return BacklogReport(list(realms), backlogs, rows)


def backlog_metadata(backlogs: Iterable[RealmBacklog]) -> dict[str, MetadataValue]:
    """Numbers only, so that the UI plots each of them over time: all realms, then each."""
    listed = list(backlogs)
    overall = sum((backlog.counts for backlog in listed), Counter[TaskState]())
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


def backlog_lines(report: BacklogReport) -> list[str]:
    """One line per realm, for a log: ``realm A: 2 pending, ...; oldest orphan waiting 9 s``."""
    lines = []
    for backlog in report.backlogs:
        counts = ", ".join(f"{backlog.counts[s]} {s.value}" for s in TaskState)
        lines.append(
            f"realm {backlog.realm}: {counts}; "
            f"oldest orphan waiting {backlog.oldest_orphan_age_s:.0f} s"
        )
    return lines or ["no realm has tasks"]


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


def evaluate_dead_check(report: BacklogReport, sample_size: int) -> AssetCheckResult:
    """Dead after exhausting the attempts; permanent failures are ``no_failing_tasks``'s."""
    dead = [t for t in report.tasks(TaskState.DEAD) if not t.failure_permanent]
    meta: dict[str, Any] = {"dead tasks": MetadataValue.int(len(dead))}
    meta.update(_per_realm(dead, report.realms, "dead tasks"))
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
    report: BacklogReport, many_attempts: int, sample_size: int
) -> AssetCheckResult:
    """Permanent failures (ERROR) and tasks backing off after ``many_attempts`` (WARN)."""
    permanent = [t for t in report.tasks(TaskState.DEAD) if t.failure_permanent]
    retrying = [t for t in report.tasks(TaskState.BACKING_OFF) if t.attempt_count >= many_attempts]
    meta: dict[str, Any] = {
        "permanent failures": MetadataValue.int(len(permanent)),
        "backing off after many attempts": MetadataValue.int(len(retrying)),
        "many attempts": MetadataValue.int(many_attempts),
    }
    meta.update(_per_realm(permanent, report.realms, "permanent failures"))
    meta.update(_per_realm(retrying, report.realms, "backing off after many attempts"))
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
    report: BacklogReport, max_age_s: float, sample_size: int
) -> AssetCheckResult:
    orphans = sorted(
        (o for b in report.backlogs for o in b.orphans), key=lambda o: o.waited_s, reverse=True
    )
    stale = [o for o in orphans if o.waited_s > max_age_s]
    oldest = orphans[0].waited_s if orphans else 0.0
    meta: dict[str, Any] = {
        "orphaned": MetadataValue.int(sum(b.counts[TaskState.ORPHANED] for b in report.backlogs)),
        "stale orphans": MetadataValue.int(len(stale)),
        OLDEST_ORPHAN_KEY: MetadataValue.float(round(oldest, 3)),
        "threshold (s)": MetadataValue.float(float(max_age_s)),
    }
    meta.update(_per_realm((o.task for o in stale), report.realms, "stale orphans"))
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


def evaluate_metastore_check(
    name: str, report: BacklogReport, settings: BacklogSettings
) -> AssetCheckResult:
    """One of ``METASTORE_CHECKS`` on ``report``."""
    if name == DEAD_CHECK:
        return evaluate_dead_check(report, settings.sample_size)
    if name == FAILING_CHECK:
        return evaluate_failing_check(report, settings.many_attempts, settings.sample_size)
    if name == ORPHAN_CHECK:
        return evaluate_orphan_check(report, settings.max_orphan_age_seconds, settings.sample_size)
    raise ValueError(f"not a metastore check of the backlog: {name!r}")


def check_evaluation(name: str, result: AssetCheckResult) -> AssetCheckEvaluation:
    """``result`` as the event a sensor reports (no run, so no step to attach it to)."""
    return AssetCheckEvaluation(
        asset_key=ASSET_KEY,
        check_name=name,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
    )


def backlog_events(
    report: BacklogReport, settings: BacklogSettings, *, description: str
) -> list[AssetMaterialization | AssetCheckEvaluation]:
    """The asset's numbers, then its three metastore checks, as a sensor tick reports them."""
    events: list[AssetMaterialization | AssetCheckEvaluation] = [
        AssetMaterialization(
            asset_key=ASSET_KEY,
            description=description,
            metadata=backlog_metadata(report.backlogs),
        )
    ]
    events.extend(
        check_evaluation(name, evaluate_metastore_check(name, report, settings))
        for name in METASTORE_CHECKS
    )
    return events
