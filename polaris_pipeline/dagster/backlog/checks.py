"""The backlog's three metastore checks, on one report, and the events a sensor reports.

The sweeper reports them with its sweeps (``backlog_events``, through
``sweep_report``); the checks' *Execute* computes the same results in a run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetMaterialization,
    MetadataValue,
)

from polaris_pipeline.dagster.backlog.report import (
    ASSET_KEY,
    OLDEST_ORPHAN_KEY,
    BacklogReport,
    Orphan,
    backlog_metadata,
    realm_key,
)
from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.tasks.formatting import short_task_name
from polaris_pipeline.tasks.model import Prop, TaskRow, TaskState

DEAD_CHECK = "no_dead_tasks"
FAILING_CHECK = "no_failing_tasks"
ORPHAN_CHECK = "no_stale_orphans"
FRESHNESS_CHECK = "sweeper_is_sweeping"
CHECK_NAMES = (DEAD_CHECK, FAILING_CHECK, ORPHAN_CHECK, FRESHNESS_CHECK)
# The checks a read of the metastore answers; the freshness check reads the instance.
METASTORE_CHECKS = (DEAD_CHECK, FAILING_CHECK, ORPHAN_CHECK)


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


def evaluate_dead_check(report: BacklogReport, sample_size: int) -> AssetCheckResult:
    """Dead after exhausting the attempts; permanent failures are ``no_failing_tasks``'s."""
    dead = [t for t in report.tasks(TaskState.DEAD) if not t.failure_permanent]
    meta: dict[str, Any] = {"dead tasks": MetadataValue.int(len(dead))}
    meta.update(_per_realm(dead, report.realms, "dead tasks"))
    if not dead:
        return AssetCheckResult(passed=True, metadata=meta, severity=AssetCheckSeverity.ERROR)
    meta["sample"] = MetadataValue.json([_task_entry(t) for t in dead[:sample_size]])
    meta.update(_last_runs(dead[:sample_size]))
    # The first dead task's own command, ready to paste (each of the others by its id).
    meta["revive with"] = MetadataValue.text(
        f"polaris-pipeline tasks requeue {dead[0].id} --realm {dead[0].realm_id}"
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
    parts = []
    if permanent:
        meta["permanent (sample)"] = MetadataValue.json(
            [_task_entry(t) for t in permanent[:sample_size]]
        )
        meta.update(_last_runs(permanent[:sample_size]))
        parts.append(
            f"{len(permanent)} task(s) failed permanently (retrying cannot heal them: fix the "
            "cause, then requeue)"
        )
    if retrying:
        retrying.sort(key=lambda t: t.attempt_count, reverse=True)
        meta["backing off (sample)"] = MetadataValue.json(
            [_task_entry(t) for t in retrying[:sample_size]]
        )
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
