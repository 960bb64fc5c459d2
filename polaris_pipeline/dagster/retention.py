"""Run retention, opt-in: finished runs of the task job deleted after N days.

Dagster OSS keeps every run for ever (dagster-io/dagster#4100) and the sweeper makes one
per task. ``retention_definitions`` gives ``polaris_run_retention_job`` and its schedule
only when an age is configured. Each run selects (``get_run_records``) finished runs of
the task job and its own, older than ``success_days`` (SUCCESS) or ``failure_days``
(FAILURE, CANCELED), oldest first, ``batch_size`` a tick, and ``delete_run``s them; a run
not finished, or of another job, is never selected. ``dry_run`` deletes nothing. Its runs
carry a higher ``dagster/priority`` so a backlog does not hold it back.

After ``delete_run`` it removes the captured logs (a manager that cannot is counted, not a
failure) and, on SQLite, the per-run event-log file. Before, what must outlive the run is
recorded: an unreported run is reported (``reporting.report_run``) and an in-run
materialization still its asset's latest is re-reported as a runless event.
"""

# No ``from __future__ import annotations``: Dagster reads the op's config and
# resource annotations as classes, not strings.
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dagster import (
    AssetMaterialization,
    Config,
    ConfigurableResource,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    DefaultScheduleStatus,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    RunRecord,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    schedule,
)

# No public name for the SQLite event log, the one storage whose delete_run leaves a file.
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
)
from pydantic import Field

from polaris_pipeline.dagster.contract import JOB_NAME, PRIORITY_TAG, TAG_TOTAL
from polaris_pipeline.dagster.reporting import REPORTED_STATUSES, report_run
from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.errors import one_line
from polaris_pipeline.settings import RetentionSection

RETENTION_JOB_NAME = "polaris_run_retention_job"
RETENTION_SCHEDULE_NAME = "polaris_run_retention"
RETENTION_OP_NAME = "delete_old_runs"

SUCCESS_STATUSES = (DagsterRunStatus.SUCCESS,)
FAILURE_STATUSES = (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
# A retention run waiting or in progress: the schedule skips its tick.
_UNFINISHED = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
# Dagster's run queue takes the highest ``dagster/priority`` first (0 unset): a
# retention run goes ahead of a backlog of task runs queued before it, which would
# otherwise delay it (and, the schedule skipping while it waits, every later tick)
# by the whole backlog while the runs it is there to delete pile up.
RETENTION_RUN_TAGS = {PRIORITY_TAG: "10"}
# Runs listed in the op's metadata (the counts are exact).
_LISTED = 100


class RetentionSettings(ConfigurableResource, RetentionSection):
    """How long finished runs of the task job are kept: ``RetentionSection``'s fields."""


@dataclass(frozen=True)
class RetentionRule:
    """Runs of one job and one outcome kept ``days`` after their last update."""

    job_name: str
    outcome: str  # "success" or "failure"
    statuses: tuple[DagsterRunStatus, ...]
    days: int

    def filter(self, now: datetime) -> RunsFilter:
        return RunsFilter(
            job_name=self.job_name,
            statuses=list(self.statuses),
            updated_before=now - timedelta(days=self.days),
        )


def retention_rules(settings: RetentionSettings, job_names: Sequence[str]) -> list[RetentionRule]:
    """The rules ``settings`` gives for each job, in the order runs are deleted."""
    rules = []
    for name in job_names:
        if settings.success_days is not None:
            rules.append(RetentionRule(name, "success", SUCCESS_STATUSES, settings.success_days))
        if settings.failure_days is not None:
            rules.append(RetentionRule(name, "failure", FAILURE_STATUSES, settings.failure_days))
    return rules


@dataclass
class RetentionResult:
    """What one pass deleted (or, in a dry run, would delete)."""

    dry_run: bool
    runs: list[RunRecord] = field(default_factory=list)
    by_rule: Counter[str] = field(default_factory=Counter)
    # Older runs beyond this pass's batch, left for the next tick.
    left: int = 0
    # Runs reported (table event recorded) before they went.
    reported: int = 0
    # In-run materializations re-reported as runless events before their run went.
    carried: int = 0
    # Deleted runs whose captured logs the compute log manager deleted, and those it
    # could not (with the first such error, type and first line).
    logs_deleted: int = 0
    logs_kept: int = 0
    logs_error: str | None = None
    # Per-run event-log files removed (SQLite event log storage only).
    event_log_files_removed: int = 0

    def line(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        parts = ", ".join(f"{n} {rule}" for rule, n in sorted(self.by_rule.items())) or "none"
        text = (
            f"{verb} {len(self.runs)} run(s) ({parts}); {self.left} older left for the "
            f"next tick; {self.reported} reported first, {self.carried} materialization(s) "
            "carried"
        )
        if self.dry_run:
            return text
        text += (
            f"; captured logs deleted for {self.logs_deleted} run(s), "
            f"{self.event_log_files_removed} event-log file(s) removed"
        )
        if self.logs_kept:
            text += f"; captured logs kept for {self.logs_kept} run(s): {self.logs_error}"
        return text

    def metadata(self) -> dict[str, MetadataValue]:
        listed = [
            {
                "run_id": r.dagster_run.run_id,
                "job": r.dagster_run.job_name,
                "status": r.dagster_run.status.value,
                "updated": r.update_timestamp.isoformat(timespec="seconds"),
            }
            for r in self.runs[:_LISTED]
        ]
        return {
            "dry run": MetadataValue.bool(self.dry_run),
            "runs": MetadataValue.int(len(self.runs)),
            **{f"runs {rule}": MetadataValue.int(n) for rule, n in sorted(self.by_rule.items())},
            "older runs left": MetadataValue.int(self.left),
            "reported first": MetadataValue.int(self.reported),
            "materializations carried": MetadataValue.int(self.carried),
            "captured logs deleted": MetadataValue.int(self.logs_deleted),
            "captured logs kept": MetadataValue.int(self.logs_kept),
            **(
                {"captured logs error": MetadataValue.text(self.logs_error)}
                if self.logs_error
                else {}
            ),
            "event-log files removed": MetadataValue.int(self.event_log_files_removed),
            f"first {_LISTED} runs": MetadataValue.json(listed),
        }


def apply_retention(
    instance: DagsterInstance,
    settings: RetentionSettings,
    job_names: Sequence[str] = (JOB_NAME,),
    *,
    task_job_name: str = JOB_NAME,
    translator: PolarisTranslator | None = None,
    dry_run: bool | None = None,
) -> RetentionResult:
    """Delete (or list) at most ``settings.batch_size`` old finished runs of ``job_names``.

    Oldest first within each rule, the rules in ``retention_rules`` order. Runs of
    ``task_job_name`` keep their table's history (the module's docstring), recorded
    by ``translator`` (the task job's) for a run not reported yet.
    """
    now = datetime.now(UTC)
    dry = settings.dry_run if dry_run is None else dry_run
    result = RetentionResult(dry_run=dry)
    budget = settings.batch_size
    for rule in retention_rules(settings, job_names):
        filters = rule.filter(now)
        records = instance.get_run_records(filters, limit=budget, ascending=True) if budget else []
        result.left += instance.get_runs_count(filters) - len(records)
        for record in records:
            run = record.dagster_run
            if not dry:
                if run.job_name == task_job_name:
                    result.reported += _report_if_unreported(instance, record, translator)
                result.carried += _carry_latest_materializations(instance, run.run_id)
                instance.delete_run(run.run_id)
                _delete_captured_logs(instance, run.run_id, result)
                result.event_log_files_removed += _remove_event_log_file(instance, run.run_id)
            result.runs.append(record)
            result.by_rule[f"{rule.job_name} {rule.outcome} > {rule.days} d"] += 1
        budget -= len(records)
    return result


def _delete_captured_logs(instance: DagsterInstance, run_id: str, result: RetentionResult) -> None:
    """The run's captured logs, deleted by the instance's compute log manager."""
    try:
        instance.compute_log_manager.delete_logs(prefix=[run_id])
    except Exception as exc:
        # The run is gone already: failing here would keep nothing, and stop the batch.
        result.logs_kept += 1
        if result.logs_error is None:
            result.logs_error = one_line(exc)
        return
    result.logs_deleted += 1


def _remove_event_log_file(instance: DagsterInstance, run_id: str) -> int:
    """On SQLite, the run's own event-log file, emptied by ``delete_run``: 1 if removed."""
    storage = instance.event_log_storage
    if not isinstance(storage, SqliteEventLogStorage):
        return 0
    path = Path(storage.path_for_shard(run_id))
    index = Path(storage.path_for_shard(INDEX_SHARD_NAME))
    # That one file of the storage's directory, never the index shard.
    if path.parent != index.parent or path == index or not path.is_file():
        return 0
    path.unlink()
    # The storage creates a run's tables only on its first connection to that run's
    # file: forget this one, so that a later read in this process (the run is gone,
    # its log is empty) makes a fresh file instead of failing on a file without tables.
    initialized = getattr(storage, "_initialized_dbs", None)
    if isinstance(initialized, set):
        initialized.discard(run_id)
    return 1


def _report_if_unreported(
    instance: DagsterInstance, record: RunRecord, translator: PolarisTranslator | None
) -> int:
    run = record.dagster_run
    if TAG_TOTAL in run.tags or run.status not in REPORTED_STATUSES:
        return 0
    report_run(instance, run, translator)
    return 1


def _carry_latest_materializations(instance: DagsterInstance, run_id: str) -> int:
    """Report again, runless, each in-run materialization still its asset's latest."""
    records = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=1000
    ).records
    carried = 0
    for key in dict.fromkeys(r.asset_key for r in records if r.asset_key is not None):
        latest = instance.get_latest_materialization_event(key)
        event = latest.asset_materialization if latest is not None else None
        if latest is None or event is None or latest.run_id != run_id:
            continue
        instance.report_runless_asset_event(
            AssetMaterialization(
                asset_key=key,
                description=event.description,
                metadata={
                    **event.metadata,
                    "materialized by run": MetadataValue.text(run_id),
                    "materialized at": MetadataValue.timestamp(latest.timestamp),
                    "carried by": MetadataValue.text(f"{RETENTION_JOB_NAME} (run deleted)"),
                },
                partition=event.partition,
                tags=event.tags,
            )
        )
        carried += 1
    return carried


class RetentionRunConfig(Config):
    """A launch of the retention job may ask for a dry run whatever the settings."""

    dry_run: bool | None = Field(
        default=None, description="true: list what would go, delete nothing; null: settings."
    )


def build_run_retention_job(
    task_job_name: str = JOB_NAME, *, translator: PolarisTranslator | None = None
) -> JobDefinition:
    """The retention job over ``task_job_name``'s runs (and its own); ``translator``
    records the table event of a run the report sensor has not reported yet."""

    @op(
        name=RETENTION_OP_NAME,
        description=(
            f"Deletes finished runs of {task_job_name} (and of this job) older than the "
            "retention settings, a bounded batch per run; never a run in progress."
        ),
    )
    def _delete_old_runs(
        context: OpExecutionContext, config: RetentionRunConfig, retention: RetentionSettings
    ) -> None:
        if not retention.enabled:
            context.log.info("no retention age configured (success_days, failure_days): kept")
            return
        result = apply_retention(
            context.instance,
            retention,
            (task_job_name, context.job_name),
            task_job_name=task_job_name,
            translator=translator,
            dry_run=config.dry_run,
        )
        context.log.info(result.line())
        context.add_output_metadata(result.metadata())

    @job(
        name=RETENTION_JOB_NAME,
        executor_def=in_process_executor,
        tags=RETENTION_RUN_TAGS,
        description=(
            f"Run retention for {task_job_name}: finished runs, their event logs and captured "
            "logs deleted after the configured days (failures kept longer), tables' history kept."
        ),
    )
    def _retention_job() -> None:
        _delete_old_runs()

    return _retention_job


def build_run_retention_schedule(
    retention_job: JobDefinition, settings: RetentionSettings
) -> ScheduleDefinition:
    """Runs ``retention_job`` on ``settings.cron``; RUNNING once an age is set (a status set in the
    UI wins). A tick while a retention run waits or runs is skipped.
    """

    @schedule(
        name=RETENTION_SCHEDULE_NAME,
        cron_schedule=settings.cron,
        job=retention_job,
        default_status=(
            DefaultScheduleStatus.RUNNING if settings.enabled else DefaultScheduleStatus.STOPPED
        ),
        description=f"Launches {retention_job.name} (a tick is skipped while one runs).",
    )
    def _tick(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        busy = context.instance.get_runs_count(
            RunsFilter(job_name=retention_job.name, statuses=_UNFINISHED)
        )
        if busy:
            return SkipReason(f"{busy} run(s) of {retention_job.name} not finished yet")
        return RunRequest()

    return _tick


def retention_definitions(
    settings: RetentionSettings,
    task_job_name: str = JOB_NAME,
    *,
    translator: PolarisTranslator | None = None,
) -> tuple[list[JobDefinition], list[ScheduleDefinition]]:
    """The retention job and its RUNNING schedule once an age is set; neither without.

    ``settings`` are checked first, so a bad value fails the code location even with
    retention off. ``task_job_name`` and ``translator``: as ``build_run_retention_job``.
    """
    if not settings.enabled:
        return [], []
    retention_job = build_run_retention_job(task_job_name, translator=translator)
    return [retention_job], [build_run_retention_schedule(retention_job, settings)]
