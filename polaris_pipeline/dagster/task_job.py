"""``polaris_task_job``: one Dagster run per Polaris task, which leases it when it starts.

The sweeper only selects available tasks and requests one run per task (run key
``<realm>:<task id>:<entity_version>``). The run's root op leases the task
through the engine (``Runner.start``) as its work starts, so a run that waits
in a queue holds no lease that could lapse, and an attempt is counted only for
a run that started work. What a run does at start depends on who launched it
(``run_intent``):

- a run the sweeper requested (tag ``polaris/launched_by: sweeper``): leases the
  task when it is available; a task taken meanwhile, gone, or no longer
  available ends the run as a success tagged ``polaris/outcome: skipped`` with
  the reason (the sweeper lost a race: not a failure);
- an operator's run (launched from the launchpad with ``realm_id`` and
  ``task_id``, or a re-execution from the UI): a backing-off or dead task is
  retried now (requeued and leased in one step, logged and tagged
  ``polaris/start``); a task held by another live holder, pending, or gone
  fails the run with the reason and what to do;
- a Dagster run retry (``dagster/retry_number``; its worker died): the run's
  executor id comes from its root run, so it adopts the lease its dead parent
  held and continues the same attempt; otherwise it acts as the original run.

A table cleanup's children run in the same run, as mapped steps in the ordered
stages the engine declares (``cleanup.stages.CHILD_STAGES``: manifest children,
then the batch children of manifest lists, older metadata and statistics, then
the child that deletes the current metadata file), a gate between each two;
``children_per_step`` children to a step. The graph is made from that plan, one
slot per stage. By default every step runs in
the run's own process (``in_process``): a run is one task's worth of work, and
the multiprocess executor (``MULTIPROCESS_EXECUTOR``) costs a forkserver and a
process per step; ``build_defs(executor="multiprocess")`` chooses it.
"""

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

from dagster import (
    Backoff,
    Config,
    DagsterRunStatus,
    DynamicOut,
    DynamicOutput,
    ExecutorDefinition,
    Failure,
    In,
    Jitter,
    JobDefinition,
    MetadataValue,
    OpDefinition,
    OpExecutionContext,
    Out,
    Output,
    RetryPolicy,
    RunsFilter,
    in_process_executor,
    job,
    multiprocess_executor,
    op,
)
from pydantic import Field

from polaris_pipeline.cleanup.stages import (
    CHILD_STAGES,
    ChildStage,
    Staged,
    check_plan,
    in_plan_order,
    orphan_stage,
)
from polaris_pipeline.dagster.reporting import location_metadata, run_tags_for_table, table_of
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.errors import PolarisPipelineError, StorageConfigError
from polaris_pipeline.execution.runner import Runner, Status, TaskOutcome
from polaris_pipeline.execution.start import StartAction, StartDecision
from polaris_pipeline.report.formatting import format_bytes, iso_utc_seconds, short_task_name
from polaris_pipeline.report.totals import STATUS, OutcomeTotals
from polaris_pipeline.tasks.model import Lease, TaskRow
from polaris_pipeline.tasks.summary import task_type_name

JOB_NAME = "polaris_task_job"
# Op retries: a transient failure (storage hiccup, lost connection) is retried
# inside the run under the same lease; the heartbeat keeps the lease alive.
DEFAULT_RETRY_POLICY = RetryPolicy(
    max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS
)
# Run retries (needs run_retries enabled in dagster.yaml): a run whose process
# died is retried from the failed steps; the new run adopts the lease (its
# executor id is its root run's). Op failures are retried by the RetryPolicy and
# then recorded in the task row, so a run retry after one would only find the
# task backing off: run retries are for runs whose worker died.
DEFAULT_RUN_TAGS = {
    "dagster/max_retries": "2",
    "dagster/retry_on_asset_or_op_failure": "false",
}

TAG_REALM = "polaris/realm"
TAG_TASK_ID = "polaris/task_id"
TAG_TASK_TYPE = "polaris/task_type"
TAG_ATTEMPT = "polaris/attempt"
TAG_EXECUTOR = "polaris/executor"
# "sweeper" on the runs the sensor requests; absent on an operator's launch.
TAG_LAUNCHED_BY = "polaris/launched_by"
LAUNCHED_BY_SWEEPER = "sweeper"
# "skipped" when a sweeper's run found its task taken or gone (nothing done).
TAG_OUTCOME = "polaris/outcome"
# On a run of the orphaned children of one purge: the parent task's name, how many.
TAG_ORPHANS_OF = "polaris/orphans_of"
TAG_TASK_COUNT = "polaris/tasks"
# How the run started its task when it was not a plain lease (operator retry, adoption).
TAG_START = "polaris/start"
# Set by Dagster: every re-execution and run retry has a parent and a root; only
# the daemon's automatic run retries have a retry number (it is not inherited).
PARENT_RUN_ID_TAG = "dagster/parent_run_id"
ROOT_RUN_ID_TAG = "dagster/root_run_id"
RETRY_NUMBER_TAG = "dagster/retry_number"

_PROGRESS_LOG_INTERVAL_S = 10.0
# Refused or failed paths listed in a failure's metadata (the counts are exact).
_FAILURE_SAMPLE = 20
# Children per mapped step (see TaskRunConfig.children_per_step).
CHILDREN_PER_STEP = 20
_IN_PROGRESS = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]

# The option for tables with many large children: one process per step, forked
# from a server that has imported the engine once instead of each spawning a
# fresh interpreter that imports Dagster, pyiceberg and pyarrow again.
MULTIPROCESS_EXECUTOR = multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["dagster", __name__]}}},
    name="multiprocess",
)
# Kept for callers of the earlier name.
TASK_EXECUTOR = MULTIPROCESS_EXECUTOR


class TaskRunConfig(Config):
    """Which task the run cleans up: all the launchpad asks for.

    ``task_id`` is text: Polaris ids use 63 bits, more than a JavaScript number
    holds exactly, and the run config passes through the UI.
    """

    realm_id: str = Field(description="Realm of the task.")
    task_id: str = Field(description="Polaris entity id of the task (decimal text).")
    entity_version: int | None = Field(
        default=None,
        description=(
            "entity_version of the row when the sweeper selected it (it names the run key); "
            "for information only: the run leases whatever the row is when it starts."
        ),
    )
    children_per_step: int = Field(
        default=CHILDREN_PER_STEP,
        ge=1,
        description=(
            "Child tasks a table cleanup's children are grouped by, one step per group: "
            "a step costs Dagster about a tenth of a second, a small manifest less."
        ),
    )
    task_ids: list[str] = Field(
        default_factory=list,
        description=(
            "Orphaned children of one table's purge (the parent row gone), run together: "
            "every task id of the group, each leased, fenced and recorded on its own row by "
            "the child steps. Empty for a single task."
        ),
    )

    def task_number(self) -> int:
        try:
            number = int(self.task_id.strip())
        except ValueError:
            raise Failure(
                description=f"task_id {self.task_id[:40]!r} is not a decimal task id",
                allow_retries=False,
            ) from None
        return number


# The earlier name of the config class.
TaskLeaseConfig = TaskRunConfig


def lease_to_dict(lease: Lease) -> dict[str, Any]:
    """The op config (and child payload) form of a lease."""
    return {
        "realm_id": lease.realm_id,
        "task_id": str(lease.task_id),
        "executor_id": lease.executor_id,
        "attempt": lease.attempt,
        "entity_version": lease.entity_version,
        "start_time_ms": lease.start_time_ms,
        "name": lease.name,
        "task_type": lease.task_type_code,
    }


def lease_from_dict(data: Mapping[str, Any]) -> Lease:
    return Lease(
        realm_id=str(data["realm_id"]),
        task_id=int(data["task_id"]),
        executor_id=str(data["executor_id"]),
        attempt=int(data["attempt"]),
        entity_version=int(data["entity_version"]),
        start_time_ms=int(data["start_time_ms"]),
        task_type_code=data.get("task_type"),
        name=str(data.get("name") or ""),
    )


def lease_tags(lease: Lease) -> dict[str, str]:
    """Run tags that let an operator find a task's runs in the UI."""
    return {
        TAG_REALM: lease.realm_id,
        TAG_TASK_ID: str(lease.task_id),
        TAG_TASK_TYPE: task_type_name(lease.task_type_code),
        TAG_ATTEMPT: str(lease.attempt),
        TAG_EXECUTOR: lease.executor_id,
    }


def run_key_for(task: TaskRow) -> str:
    """``<realm>:<task id>:<entity_version>``: one run per selected version of the row.

    Unchanged while the task waits, so Dagster drops a second request for the same
    candidate; every lease, failure, renewal or requeue bumps the version, so the
    next run of the task is never dropped as a repeat.
    """
    return f"{task.realm_id}:{task.id}:{task.entity_version}"


def candidate_tags(task: TaskRow) -> dict[str, str]:
    """Tags of the run the sweeper requests for ``task`` (attempt and executor come at start)."""
    return {
        TAG_REALM: task.realm_id,
        TAG_TASK_ID: str(task.id),
        TAG_TASK_TYPE: task_type_name(task.task_type_code),
        TAG_LAUNCHED_BY: LAUNCHED_BY_SWEEPER,
    }


def run_config_for(
    realm_id: str,
    task_id: int | str,
    *,
    entity_version: int | None = None,
    children_per_step: int | None = None,
    task_ids: Sequence[int | str] = (),
) -> dict[str, Any]:
    """Run config of the task job for one task."""
    config: dict[str, Any] = {"realm_id": realm_id, "task_id": str(task_id)}
    if entity_version is not None:
        config["entity_version"] = entity_version
    if children_per_step is not None:
        config["children_per_step"] = children_per_step
    if task_ids:
        config["task_ids"] = [str(t) for t in task_ids]
    return {"ops": {"run_polaris_task": {"config": config}}}


def run_task_ids(run_config: Mapping[str, Any]) -> list[str]:
    """The task ids a run of the task job works on (its own, or its group's)."""
    try:
        config = run_config["ops"]["run_polaris_task"]["config"]
        ids = [str(config["task_id"]), *(str(t) for t in config.get("task_ids") or [])]
    except (KeyError, TypeError, AttributeError):
        return []
    return ids


class TransientTaskError(Exception):
    """A failure left unrecorded so the op's RetryPolicy retries it under the same lease."""


# ------------------------------------------------------------- who launched it


@dataclass(frozen=True)
class RunIntent:
    """Who launched the run, read from its tags, and what follows from it."""

    operator: bool  # an operator's deliberate act: backing-off and dead tasks run now
    root_run_id: str  # the run lineage's first run: it names the executor id
    parent_run_id: str | None
    retry_number: int | None  # an automatic run retry by the daemon
    how: str  # in words, for logs


def run_intent(run_id: str, tags: Mapping[str, str]) -> RunIntent:
    parent = tags.get(PARENT_RUN_ID_TAG) or None
    root = tags.get(ROOT_RUN_ID_TAG) or parent or run_id
    by_sweeper = tags.get(TAG_LAUNCHED_BY) == LAUNCHED_BY_SWEEPER
    raw_retry = tags.get(RETRY_NUMBER_TAG)
    retry = int(raw_retry) if raw_retry and raw_retry.isdigit() else None
    if parent is None:
        how = "requested by the sweeper" if by_sweeper else "launched by an operator"
        return RunIntent(not by_sweeper, root, None, None, how)
    if retry is not None:
        # The daemon's run retry carries the parent's tags: the original intent holds.
        how = f"automatic run retry {retry} of run {parent}"
        return RunIntent(not by_sweeper, root, parent, retry, how)
    return RunIntent(True, root, parent, None, f"re-execution of run {parent} by an operator")


def _intent(context: OpExecutionContext) -> RunIntent:
    return run_intent(context.run_id, context.dagster_run.tags)


def _lineage_busy(context: OpExecutionContext, intent: RunIntent) -> str | None:
    """Another run of this lineage still in progress (it shares the executor id), or None."""
    if intent.parent_run_id is None:
        return None  # a first run: the only holder of its executor id is itself
    try:
        instance = context.instance
        runs = instance.get_runs(RunsFilter(tags={ROOT_RUN_ID_TAG: intent.root_run_id}))
        root = instance.get_run_by_id(intent.root_run_id)
    except Exception:
        return None
    for run in [*runs, *([root] if root is not None else [])]:
        if run.run_id != context.run_id and run.status in _IN_PROGRESS:
            return run.run_id
    return None


# ------------------------------------------------------------------ one task


def _is_last_attempt(context: OpExecutionContext) -> bool:
    policy = context.job_def.get_retry_policy_for_handle(context.op_handle)
    max_retries = policy.max_retries if policy is not None else 0
    return context.retry_number >= max_retries


def _label(lease: Lease) -> str:
    """``realm/id 'name'``, the name cut as everywhere (``formatting.short_task_name``):
    a batch child's name holds its whole file list."""
    return f"{lease.realm_id}/{lease.task_id} {short_task_name(lease.name)!r}"


class _ProgressLog:
    """Runner progress, logged every few seconds of a step so long deletes show life.

    Nothing for a short one: its "done" line says it all, and every line is an
    event the run stores.
    """

    def __init__(self, context: OpExecutionContext) -> None:
        self._context = context
        self._last = time.monotonic()

    def __call__(self, lease: Lease, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if now - self._last < _PROGRESS_LOG_INTERVAL_S:
            return
        self._last = now
        of = f"/{total}" if total else ""
        self._context.log.info(f"{_label(lease)}: {what} {done}{of}")


def _add_tags(context: OpExecutionContext, tags: Mapping[str, str]) -> None:
    try:
        context.instance.add_run_tags(context.run_id, dict(tags))
    except Exception as exc:  # tags are for the UI; never fail a run over them
        context.log.warning(f"run tags not added ({type(exc).__name__}: {exc})")


def _summary(outcome: TaskOutcome) -> dict[str, Any]:
    """The step's output: which task, and its numbers (``OutcomeTotals``)."""
    counted = OutcomeTotals.of([outcome])
    return {
        "task": outcome.lease.label,
        "realm_id": outcome.lease.realm_id,
        "task_id": str(outcome.lease.task_id),
        "task_type": task_type_name(outcome.task_type),
        "status": outcome.status.value,
        "attempt": outcome.lease.attempt,
        "deleted": counted.files_deleted,
        "bytes_freed": counted.bytes_freed,
        "refused": counted.refused,
        "children": counted.children_created,
        "error": outcome.error,
    }


def _lease_metadata(lease: Lease) -> dict[str, Any]:
    return {
        "task": _label(lease),
        "realm": lease.realm_id,
        "task id": str(lease.task_id),
        "type": task_type_name(lease.task_type_code),
        "lease executor": lease.executor_id,
        "lease attempt": lease.attempt,
        "lease started": iso_utc_seconds(lease.start_time_ms) or "",
    }


def _done_metadata(outcome: TaskOutcome) -> dict[str, Any]:
    result = outcome.result
    meta = {**_lease_metadata(outcome.lease), STATUS: outcome.status.value}
    meta["type"] = task_type_name(outcome.task_type)
    if result is None:
        meta["note"] = "task row already gone: finished by another executor"
        return meta
    # Read back by the run report (reporting.run_total): the keys are OutcomeTotals'.
    meta.update(OutcomeTotals.of([outcome]).metadata())
    if result.deleted_paths_sample:
        meta["deleted paths (sample)"] = MetadataValue.json(list(result.deleted_paths_sample))
    if result.notes:
        meta["notes"] = MetadataValue.md("\n".join(f"- {n}" for n in result.notes))
    return meta


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else "task failed"


@dataclass
class _Step:
    """What every task of one step shares: the runner, who launched the run, and so on."""

    runner: Runner
    intent: RunIntent
    may_adopt: bool
    # A storage config that did not load: each task leased is failed with it, recorded.
    config_error: str | None = None


@contextmanager
def _open_step(
    context: OpExecutionContext,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    realm_id: str,
) -> Iterator[_Step]:
    """The engine's runner under the run lineage's executor id, for one step."""
    intent = _intent(context)
    store = metastore.get_metastore()
    executor_id = metastore.run_executor_id(intent.root_run_id)
    if realm_id:
        # One renewal of every lease this run holds in the realm, once per step:
        # children queued behind earlier steps stay held. Not once per child: a
        # run holding thousands of children would rewrite them all for each one.
        store.renew_held_by(realm_id, executor_id)
    config_error: str | None = None
    try:
        config = storage.get_config()
        resolver = storage.get_resolver()
    except StorageConfigError as exc:
        # Not transient: recorded on the task (after leasing it) instead of retried.
        config_error = f"storage configuration: {exc}"
        config, resolver = None, None
    busy = _lineage_busy(context, intent)
    if busy is not None:
        context.log.warning(f"run {busy} of this run's lineage is still in progress: no adoption")
    runner = Runner(
        store,
        config,
        executor_id=executor_id,
        run_id=context.run_id,
        resolver=resolver,
        progress=_ProgressLog(context),
        write_task_events=metastore.write_task_events,
    )
    try:
        yield _Step(runner, intent, busy is None, config_error)
    finally:
        runner.close()


def _refused(
    context: OpExecutionContext, step: _Step, decision: StartDecision, *, child: bool
) -> tuple[dict[str, Any], dict[str, Any], None]:
    """A task this run did not start: skipped (the sweeper lost a race) or a failure."""
    realm = decision.task.realm_id if decision.task is not None else ""
    summary: dict[str, Any] = {"status": "skipped", "message": decision.message}
    if decision.task is not None:
        summary.update(
            task=decision.task.label,
            realm_id=realm,
            task_id=str(decision.task.id),
            task_type=task_type_name(decision.task.task_type_code),
        )
    if child and decision.action is StartAction.GONE:
        # A child finished by an earlier try of this run (or its lineage): done.
        context.log.info(decision.message)
        return {**summary, "status": "already-done"}, {"note": decision.message}, None
    if step.intent.operator:
        context.log.error(f"{decision.message} ({step.intent.how})")
        raise Failure(
            description=decision.message,
            metadata={"start": decision.action.value, "launched": step.intent.how},
            allow_retries=False,
        )
    context.log.info(f"skipped: {decision.message}; nothing was done")
    if not child:
        _add_tags(context, {TAG_OUTCOME: "skipped"})
    return summary, {"status": "skipped", "message": decision.message}, None


def run_task(
    context: OpExecutionContext, step: _Step, realm_id: str, task_id: int, *, child: bool = False
) -> tuple[dict[str, Any], dict[str, Any], TaskOutcome | None]:
    """Start (``Runner.start``) and execute one task; returns (summary, metadata, outcome).

    Raises TransientTaskError for the op's RetryPolicy, or a non-retryable
    ``Failure`` once the failure is recorded in the task row (or the operator's
    run could not start its task).
    """
    runner = step.runner
    decision = runner.start(
        realm_id, task_id, operator=step.intent.operator, may_adopt=step.may_adopt
    )
    mine = decision.lease
    if mine is None:
        return _refused(context, step, decision, child=child)
    if decision.action is StartAction.OPERATOR_RETRY:
        context.log.warning(decision.message)
    elif (
        decision.action is StartAction.ADOPTED
        and context.retry_number == 0
        # A child this run created is held by it from the start: adopting it is
        # the normal path, and every line is an event the run stores. A retry or
        # re-execution taking over its lineage's lease is worth a line.
        and (not child or step.intent.parent_run_id is not None)
    ):
        context.log.info(f"{decision.message} ({step.intent.how})")
    if not child:
        tags = {TAG_ATTEMPT: str(mine.attempt), TAG_EXECUTOR: mine.executor_id}
        # The table, for the run list and the run report (reporting.py).
        tags.update(run_tags_for_table(table_of(decision.task) if decision.task else None))
        if decision.action is StartAction.OPERATOR_RETRY:
            task = decision.task
            state = "dead" if task is not None and task.status == "dead" else "backing off"
            tags[TAG_START] = f"operator retry: {state} task retried now"
        elif decision.action is StartAction.ADOPTED and step.intent.parent_run_id is not None:
            tags[TAG_START] = f"adopted the lease of run lineage {step.intent.root_run_id}"
        _add_tags(context, tags)
    if step.config_error is not None:
        outcome = runner.record_failure(mine, step.config_error)
        context.log.error(f"task {_label(mine)} not run: {step.config_error} (recorded)")
        raise Failure(
            description=step.config_error,
            metadata={**_lease_metadata(mine), "status": outcome.status.value},
            allow_retries=False,
        )
    outcome = runner.execute(mine, record_failure=_is_last_attempt(context))

    if outcome.status is Status.DONE:
        result = outcome.result
        if result is None:
            context.log.info(f"task {_label(mine)} was already finished by another executor")
        else:
            ref = table_of(decision.task) if decision.task else None
            of_table = f"; table {ref.label}" if ref else ""
            context.log.info(
                f"task {_label(mine)} ({task_type_name(outcome.task_type)}) done: "
                f"{result.deleted} file(s) deleted, "
                f"{format_bytes(result.bytes_freed, exact=True)} freed, "
                f"{result.missing} already gone, {len(result.refused)} refused by the guard, "
                f"{len(outcome.children)} child task(s); lease {mine.executor_id} "
                f"attempt {mine.attempt}{of_table}"
            )
            sample = result.deleted_paths_sample
            if sample:
                of = (
                    f"first {len(sample)} of {result.deleted}"
                    if result.deleted > len(sample)
                    else "all"
                )
                context.log.info(f"deleted ({of}): " + ", ".join(sample))
        table = location_metadata(table_of(decision.task) if decision.task else None)
        return _summary(outcome), {**table, **_done_metadata(outcome)}, outcome

    if outcome.status is Status.LEASE_LOST:
        # Taken away mid-way (this run stalled past its lease): the current holder
        # finishes it. Not this run's failure, and not work this run claims.
        message = (
            f"{outcome.error}; the cleanup stopped at once and the current holder "
            "finishes it (handlers are idempotent)"
        )
        context.log.warning(message)
        if not child:
            _add_tags(context, {TAG_OUTCOME: "lease-lost"})
        summary = {**_summary(outcome), "message": message}
        return summary, {**_lease_metadata(mine), "status": "lease-lost", "message": message}, None

    error = _first_line(outcome.error)
    if not outcome.recorded:
        context.log.warning(
            f"task {_label(mine)} failed (try {context.retry_number + 1}), retrying in this run "
            f"under the same lease: {error}"
        )
        raise TransientTaskError(error)

    meta = {
        **_lease_metadata(mine),
        STATUS: outcome.status.value,
        "error": outcome.error or error,
        "permanent": outcome.permanent,
        "dagster run id": MetadataValue.dagster_run(context.run_id),  # a link in the UI
    }
    if outcome.next_attempt_ms is not None:
        meta["next attempt"] = iso_utc_seconds(outcome.next_attempt_ms) or ""
    result = outcome.result
    if result is not None:
        meta.update(OutcomeTotals.of([outcome]).metadata())
        if result.refused:
            meta["refused paths (sample)"] = MetadataValue.json(
                [{"path": r.path, "reason": r.reason} for r in result.refused[:_FAILURE_SAMPLE]]
            )
        if result.failed:
            meta["failed deletes (sample)"] = MetadataValue.json(
                [{"path": u, "error": e} for u, e in list(result.failed.items())[:_FAILURE_SAMPLE]]
            )
    if outcome.status is Status.DEAD:
        tail = "dead-lettered after its last attempt; `polaris-pipeline tasks requeue` revives it"
    else:
        tail = f"recorded; the sweeper retries it after {meta.get('next attempt', 'a backoff')}"
    context.log.error(f"task {_label(mine)} failed ({tail}): {outcome.error}")
    raise Failure(description=error, metadata=meta, allow_retries=False)


# ----------------------------------------------------------------------- ops
#
# The graph follows the engine's stage plan (``cleanup.stages.CHILD_STAGES``):
# the root op has one output per stage; the first feeds that stage's mapped
# child op, each later one a gate that hands its stage out once every step of
# the stage before is done. One slot per stage, made in a loop from the plan.


def _output_name(stage: ChildStage) -> str:
    return f"{stage.name}_children"


def _stage_text(plan: tuple[ChildStage, ...], stage: ChildStage) -> str:
    return f"Stage {plan.index(stage) + 1} of {len(plan)}, {stage.name}: {stage.description}"


def _root_op(plan: tuple[ChildStage, ...]) -> OpDefinition:
    """``run_polaris_task``, with one output per stage of ``plan``."""
    out: dict[str, Out] = {"outcome": Out(dict, description="What the task did.")}
    for stage in plan:
        text = _stage_text(plan, stage)
        if stage is plan[0]:
            out[_output_name(stage)] = DynamicOut(
                list, is_required=False, description=f"{text} Groups of up to children_per_step."
            )
        else:
            out[_output_name(stage)] = Out(
                list,
                is_required=False,
                description=f"{text} Its groups, for the gate before the stage.",
            )

    @op(
        name="run_polaris_task",
        description=(
            "Lease one Polaris task as the run starts (or adopt this run lineage's lease) and "
            "run it to an outcome; hand out the children it created, stage by stage."
        ),
        out=out,
        retry_policy=DEFAULT_RETRY_POLICY,
        tags={"kind": "polaris"},
    )
    def run_polaris_task(
        context: OpExecutionContext,
        config: TaskRunConfig,
        metastore: PolarisMetastoreResource,
        storage: PolarisStorageResource,
    ) -> Iterator[Output[Any] | DynamicOutput[Any]]:
        if config.task_ids:
            yield from _orphan_stages(context, config, metastore, plan)
            return
        task_id = config.task_number()
        with _open_step(context, metastore, storage, config.realm_id) as step:
            summary, meta, outcome = run_task(context, step, config.realm_id, task_id)
        if outcome is not None and outcome.status is Status.DONE:
            _add_tags(context, {TAG_OUTCOME: "done"})
        yield Output(summary, "outcome", metadata=meta)
        if outcome is None or not outcome.children:
            return
        staged = [
            (stage, [lease_to_dict(c) for c in leases])
            for stage, leases in _job_stages(outcome, plan)
        ]
        yield from _emit_stages(staged, config.children_per_step)

    return run_polaris_task


def _job_stages(outcome: TaskOutcome, plan: tuple[ChildStage, ...]) -> Staged[Lease]:
    """The outcome's children in the stages of ``plan``, refused if one is not in it."""
    try:
        return outcome.child_stages(plan)
    except ValueError as exc:
        # Running it elsewhere would break the order the handler asked for. The
        # children are recorded, so a sweeper runs them once the lease lapses.
        raise PolarisPipelineError(f"{exc}: this job has no step for it") from None


def _emit_stages(
    staged: Staged[dict[str, Any]], per_step: int
) -> Iterator[Output[Any] | DynamicOutput[Any]]:
    groups = [(stage, _groups(refs, per_step)) for stage, refs in staged]
    filled = [i for i, (_, stage_groups) in enumerate(groups) if stage_groups]
    if not filled:
        return
    # Stages after the last full one are not fed: their steps are skipped.
    for i, (stage, stage_groups) in enumerate(groups[: filled[-1] + 1]):
        # An empty stage before a full one still gets a step, of no child: Dagster
        # skips the steps after a mapped step that never ran, so without it the
        # gate of the next stage would never open.
        stage_groups = stage_groups or [[]]
        if i == 0:
            for group in stage_groups:
                yield DynamicOutput(
                    group, mapping_key=_group_key(group), output_name=_output_name(stage)
                )
        else:
            yield Output(stage_groups, _output_name(stage))


def _orphan_stages(
    context: OpExecutionContext,
    config: TaskRunConfig,
    metastore: PolarisMetastoreResource,
    plan: tuple[ChildStage, ...],
) -> Iterator[Output[Any] | DynamicOutput[Any]]:
    """Orphaned children of one purge: each is started (leased) and run by a child step.

    Each goes to the stage the engine gives it (``stages.orphan_stage``), as a
    table cleanup stages its own; a child already gone is left out.
    """
    store = metastore.get_metastore()
    assigned: list[tuple[ChildStage, list[dict[str, Any]]]] = []
    gone = 0
    for raw in config.task_ids:
        number = TaskRunConfig(realm_id=config.realm_id, task_id=raw).task_number()
        row = store.get_task(config.realm_id, number)
        if row is None:
            gone += 1
            continue
        ref = {
            "realm_id": row.realm_id,
            "task_id": str(row.id),
            "name": row.name,
            "task_type": row.task_type_code,
        }
        assigned.append((orphan_stage(row), [ref]))
    try:
        staged = in_plan_order(assigned, plan)
    except ValueError as exc:
        raise PolarisPipelineError(f"{exc}: this job has no step for it") from None
    count = sum(len(refs) for _, refs in staged)
    sizes = ", ".join(f"{len(refs)} {stage.name}" for stage, refs in staged)
    message = (
        f"{len(config.task_ids)} orphaned child task(s) of one purge, run together: "
        f"{sizes}; {gone} already gone"
    )
    context.log.info(message)
    summary = {"status": "orphans", "message": message, "children": count}
    yield Output(summary, "outcome", metadata={"realm": config.realm_id, "note": message})
    yield from _emit_stages(staged, config.children_per_step)


def _groups(refs: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    step = max(1, size)
    return [refs[i : i + step] for i in range(0, len(refs), step)]


def _group_key(group: list[dict[str, Any]]) -> str:
    if not group:
        return "none"  # the one step of an empty stage
    first = f"t{group[0]['task_id']}"
    return first if len(group) == 1 else f"{first}_n{len(group)}"


def _child_op(plan: tuple[ChildStage, ...], stage: ChildStage) -> OpDefinition:
    """The mapped op of one stage: ``run_<stage>_children``."""

    @op(
        name=f"run_{stage.name}_children",
        description=(
            f"{_stage_text(plan, stage)} Runs a group of these child tasks one after the "
            "other, under the run's lease."
        ),
        retry_policy=DEFAULT_RETRY_POLICY,
        tags={"kind": "polaris"},
    )
    def run_children(
        context: OpExecutionContext,
        leases: list,
        metastore: PolarisMetastoreResource,
        storage: PolarisStorageResource,
    ) -> Output[dict]:
        return _run_child_group(context, leases, metastore, storage)

    return run_children


def _run_child_group(
    context: OpExecutionContext,
    leases: list,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
) -> Output[dict]:
    if not leases:
        note = "no child task in this stage: this step only lets the next stage start"
        context.log.info(note)
        return Output({"tasks": [], "deleted": 0, "bytes_freed": 0}, metadata={"note": note})
    done: list[tuple[dict[str, Any], TaskOutcome | None]] = []
    transient: list[str] = []
    failures: list[Failure] = []
    realm_id = str(leases[0]["realm_id"]) if leases else ""
    with _open_step(context, metastore, storage, realm_id) as step:
        for data in leases:
            # Only the task is needed: the step starts it (Runner.start) itself.
            child = Lease(
                realm_id=str(data["realm_id"]),
                task_id=int(data["task_id"]),
                executor_id=step.runner.executor_id,
                attempt=0,
                entity_version=0,
                start_time_ms=0,
                task_type_code=data.get("task_type"),
                name=str(data.get("name") or ""),
            )
            # Every child is run even when one fails: one bad file must not hold
            # back the rest of the table. Finished children are gone on a retry.
            try:
                summary, _meta, outcome = run_task(
                    context, step, child.realm_id, child.task_id, child=True
                )
            except TransientTaskError as exc:
                transient.append(str(exc))
                continue
            except Failure as exc:
                failures.append(exc)
                continue
            if outcome is not None and outcome.children:
                # Only table cleanups create children, and a child is never one.
                context.log.warning(
                    f"child {_label(child)} created {len(outcome.children)} task(s) of its "
                    "own; they are left to the sweeper"
                )
            summary.setdefault("task_id", str(child.task_id))
            done.append((summary, outcome))
        executor_id = step.runner.executor_id
    if transient:
        raise TransientTaskError(
            f"{len(transient)} of {len(leases)} child task(s) failed, first: {transient[0]}"
        )
    if failures:
        first = failures[0]
        raise Failure(
            description=(
                f"{len(failures)} of {len(leases)} child task(s) failed and were recorded; "
                f"first: {first.description}"
            ),
            metadata={
                **(first.metadata or {}),
                "failed child tasks": len(failures),
                "child tasks done": len(done),
            },
            allow_retries=False,
        )
    summaries = [summary for summary, _ in done]
    group = {
        "tasks": summaries,
        "deleted": sum(s.get("deleted") or 0 for s in summaries),
        "bytes_freed": sum(s.get("bytes_freed") or 0 for s in summaries),
    }
    return Output(group, metadata=_group_metadata(leases, executor_id, done))


def _group_metadata(
    leases: list, executor_id: str, done: list[tuple[dict[str, Any], TaskOutcome | None]]
) -> dict[str, Any]:
    """What a group step did, in total and per task, for the step's page in the UI."""
    totals = OutcomeTotals()
    for summary, outcome in done:
        if outcome is not None:
            totals.add(outcome, child=True)
        else:  # found already done: a status, no outcome
            totals.add_status(summary["status"], child=True)
    results = [o.result for _, o in done if o is not None and o.result is not None]
    sample = [p for r in results for p in r.deleted_paths_sample][:_FAILURE_SAMPLE]
    meta: dict[str, Any] = {
        "realm": ", ".join(sorted({str(data["realm_id"]) for data in leases})),
        "lease executor": executor_id,
        # Read back by the run report (reporting.run_total): the keys are OutcomeTotals'.
        **totals.metadata(),
        "tasks": MetadataValue.json(
            [
                {
                    "task id": s["task_id"],
                    "type": s.get("task_type"),
                    "status": s.get("status"),
                    "lease attempt": s.get("attempt"),
                    "files deleted": s.get("deleted", 0),
                    "bytes freed": s.get("bytes_freed", 0),
                }
                for s, _ in done
            ]
        ),
    }
    if sample:
        meta["deleted paths (sample)"] = MetadataValue.json(sample)
    return meta


def _gate_op(plan: tuple[ChildStage, ...], stage: ChildStage) -> OpDefinition:
    """The gate before one stage: ``release_<stage>_children``."""

    @op(
        name=f"release_{stage.name}_children",
        description=(
            f"Gate before {_stage_text(plan, stage)} Once every child of the stage before is "
            "done, it hands out this stage's children (which may delete files the stage "
            "before read)."
        ),
        ins={"groups": In(list), "previous_stage": In(list)},
        out=DynamicOut(list, is_required=False),
        tags={"kind": "polaris"},
    )
    def release_children(
        context: OpExecutionContext, groups: list, previous_stage: list
    ) -> Iterator[DynamicOutput[list]]:
        done = sum(len(g.get("tasks", [])) for g in previous_stage)
        count = sum(len(g) for g in groups)
        context.log.info(
            f"{done} child task(s) of the previous stage done; releasing {count} child "
            f"task(s) of stage {stage.name}"
        )
        for group in groups:
            yield DynamicOutput(group, mapping_key=_group_key(group))

    return release_children


@dataclass(frozen=True)
class _StageOps:
    root: OpDefinition
    children: tuple[OpDefinition, ...]  # one per stage
    gates: tuple[OpDefinition, ...]  # one per stage after the first


@cache
def _stage_ops(plan: tuple[ChildStage, ...]) -> _StageOps:
    # Once per plan: Dagster refuses two definitions of one op name in a code
    # location, and every job built from the engine's plan uses the same ops.
    return _StageOps(
        root=_root_op(plan),
        children=tuple(_child_op(plan, stage) for stage in plan),
        gates=tuple(_gate_op(plan, stage) for stage in plan[1:]),
    )


def build_polaris_task_job(
    name: str = JOB_NAME,
    *,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    tags: Mapping[str, str] | None = None,
    executor_def: ExecutorDefinition | None = None,
    stages: Sequence[ChildStage] = CHILD_STAGES,
) -> JobDefinition:
    """The task job; ``retry_policy`` replaces the op retry policy (tests use fast ones).

    ``executor_def`` defaults to ``in_process_executor`` (every step in the run's own
    process); ``MULTIPROCESS_EXECUTOR`` runs a process per step. ``stages`` is the
    plan the children run in, the engine's unless a test gives another.
    """
    plan = check_plan(stages)
    ops = _stage_ops(plan)
    root = ops.root.with_retry_policy(retry_policy)
    runs = [child.with_retry_policy(retry_policy) for child in ops.children]
    names = ", then ".join(stage.name for stage in plan)

    @job(
        name=name,
        description=(
            "One Polaris cleanup task per run: lease it as the run starts, clean up, then run "
            f"the child tasks of a table cleanup in {len(plan)} ordered stages ({names}). "
            "Launch it by hand with realm_id and task_id to run one task now."
        ),
        tags={**DEFAULT_RUN_TAGS, **(tags or {})},
        executor_def=executor_def or in_process_executor,
    )
    def polaris_task_graph() -> None:
        _outcome, first, *later = root()
        stage = first.map(runs[0])
        for gate, groups, run in zip(ops.gates, later, runs[1:], strict=True):
            stage = gate(groups, stage.collect()).map(run)

    return polaris_task_graph


polaris_task_job = build_polaris_task_job()

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "JOB_NAME",
    "MULTIPROCESS_EXECUTOR",
    "RunIntent",
    "TaskLeaseConfig",
    "TaskRunConfig",
    "TransientTaskError",
    "build_polaris_task_job",
    "candidate_tags",
    "lease_from_dict",
    "lease_tags",
    "lease_to_dict",
    "polaris_task_job",
    "run_config_for",
    "run_intent",
    "run_key_for",
    "run_task_ids",
]
