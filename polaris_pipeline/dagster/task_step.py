"""One task executed inside a step of the task job: started, run, and told to Dagster.

``open_step`` gives a step the engine's ``Runner`` under its run lineage's
executor id (``lineage.py``); ``run_task`` starts one task (``Runner.start``:
lease, adopt or refuse) and runs it to one of four ends:

- refused: the sweeper's run lost a race (skipped) or an operator's run could
  not start the task (a failure naming why);
- done: the step's output, its metadata and the run's tags;
- lease lost mid-way: not this run's failure, the current holder finishes it;
- failed: ``TransientTaskError`` for the op's RetryPolicy while tries remain,
  else a non-retried ``Failure`` once the failure is recorded in the task row.

``run_child_group`` runs one mapped step's group of child tasks this way. What
each end shows (tags, metadata) is the translator's (``translator.py``); the
outcome's numbers and lines are the report's renderers (``report/outcome_*.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dagster import Failure, OpExecutionContext, Output

from polaris_pipeline.dagster.contract import (
    OUTCOME_DONE,
    OUTCOME_LEASE_LOST,
    OUTCOME_RESTORED,
    OUTCOME_SKIPPED,
    TAG_ATTEMPT,
    TAG_START,
    is_group_run,
)
from polaris_pipeline.dagster.lineage import RunIntent, intent_of, lineage_busy
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.step_result import TaskResult
from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.errors import StorageConfigError
from polaris_pipeline.execution.outcome import Status
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.start import StartAction, StartDecision
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.report.outcome_line import log_line
from polaris_pipeline.report.outcome_metadata import step_output
from polaris_pipeline.report.progress import ProgressSink
from polaris_pipeline.tasks.decoded import task_type_name
from polaris_pipeline.tasks.formatting import iso_utc_seconds
from polaris_pipeline.tasks.ref import Lease, TaskRef


class TransientTaskError(Exception):
    """A failure left unrecorded so the op's RetryPolicy retries it under the same lease."""


@dataclass
class TaskStep:
    """What every task of one step shares: the runner, who launched the run, and so on."""

    runner: Runner
    intent: RunIntent
    may_adopt: bool
    translator: PolarisTranslator
    # A storage config that did not load: each task leased is failed with it, recorded.
    config_error: str | None = None


def add_tags(context: OpExecutionContext, tags: Mapping[str, str]) -> None:
    """Add ``tags`` to the run; a failure to is logged, never the run's failure."""
    try:
        context.instance.add_run_tags(context.run_id, dict(tags))
    except Exception as exc:  # tags are for the UI; never fail a run over them
        context.log.warning(f"run tags not added ({type(exc).__name__}: {exc})")


def _is_last_attempt(context: OpExecutionContext) -> bool:
    policy = context.job_def.get_retry_policy_for_handle(context.op_handle)
    max_retries = policy.max_retries if policy is not None else 0
    return context.retry_number >= max_retries


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else "task failed"


@lru_cache(maxsize=16)
def run_release_probe(store: Metastore, run_id: str) -> ReleaseProbe:
    """One probe for every step of a run (the schema and each realm's release read once
    per run, as a sweep reads them once): a run of a small table has seven steps."""
    return ReleaseProbe(store)


@contextmanager
def open_step(
    context: OpExecutionContext,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    realm_id: str,
    translator: PolarisTranslator,
) -> Iterator[TaskStep]:
    """The engine's runner under the run lineage's executor id, for one step."""
    intent = intent_of(context)
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
        deletion_record = storage.deletion_record
    except StorageConfigError as exc:
        # Not transient: recorded on the task (after leasing it) instead of retried.
        config_error = f"storage configuration: {exc}"
        config, resolver, deletion_record = None, None, None
    busy = lineage_busy(context, intent)
    if busy is not None:
        context.log.warning(f"run {busy} of this run's lineage is still in progress: no adoption")
    runner = Runner(
        store,
        config,
        executor_id=executor_id,
        run_id=context.run_id,
        resolver=resolver,
        # Long deletes show life in the step's log; every line is an event the run stores.
        progress=ProgressSink(context.log.info),
        deletion_record=deletion_record,
        releases=run_release_probe(store, context.run_id),
    )
    try:
        yield TaskStep(runner, intent, busy is None, translator, config_error)
    finally:
        runner.close()


def _refused(
    context: OpExecutionContext,
    step: TaskStep,
    decision: StartDecision,
    ref: TaskRef,
    *,
    child: bool,
) -> TaskResult:
    """A task this run did not start: skipped (the sweeper lost a race) or a failure."""
    summary: dict[str, Any] = {"status": "skipped", "message": decision.message}
    task = decision.task
    if task is not None:
        summary.update(
            task=task.label,
            realm_id=task.realm_id,
            task_id=str(task.id),
            task_type=task_type_name(task.task_type_code),
        )
    if child and decision.action is StartAction.GONE:
        # A child finished by an earlier try of this run (or its lineage): done.
        context.log.info(decision.message)
        return TaskResult(
            {**summary, "status": "already-done"},
            {"note": decision.message},
            found="already-done",
            task=ref,
        )
    if step.intent.operator:
        context.log.error(f"{decision.message} ({step.intent.how})")
        raise Failure(
            description=decision.message,
            metadata={"start": decision.action.value, "launched": step.intent.how},
            allow_retries=False,
        )
    context.log.info(f"skipped: {decision.message}; nothing was done")
    if not child:
        add_tags(context, step.translator.outcome_tags(OUTCOME_SKIPPED))
    return TaskResult(summary, step.translator.skipped_metadata(decision.message), task=ref)


def _start_tags(step: TaskStep, decision: StartDecision) -> dict[str, str]:
    """The run's tags once its own task started: the lease, the table, how it started."""
    lease = decision.lease
    assert lease is not None
    tags = step.translator.start_tags(lease, decision.decoded)
    if decision.action is StartAction.OPERATOR_RETRY:
        task = decision.task
        state = "dead" if task is not None and task.status == "dead" else "backing off"
        tags[TAG_START] = f"operator retry: {state} task retried now"
    elif decision.action is StartAction.ADOPTED and step.intent.parent_run_id is not None:
        tags[TAG_START] = f"adopted the lease of run lineage {step.intent.root_run_id}"
    return tags


def run_task(
    context: OpExecutionContext,
    step: TaskStep,
    realm_id: str,
    task_id: int,
    *,
    child: bool = False,
    held: Lease | None = None,
) -> TaskResult:
    """Start (``Runner.start``) and execute one task; returns its output and metadata.

    ``held``: the lease an earlier step handed over (a table's child), kept while
    it holds the task (``Runner.resume``).

    Raises TransientTaskError for the op's RetryPolicy, or a non-retryable
    ``Failure`` once the failure is recorded in the task row (or the operator's
    run could not start its task).
    """
    runner, translator = step.runner, step.translator
    operator, may_adopt = step.intent.operator, step.may_adopt
    decision = (
        runner.resume(held, operator=operator, may_adopt=may_adopt)
        if held is not None
        else runner.start(realm_id, task_id, operator=operator, may_adopt=may_adopt)
    )
    mine = decision.lease
    if mine is None:
        task = decision.task
        ref = TaskRef.from_row(task) if task is not None else TaskRef(realm_id, task_id)
        return _refused(context, step, decision, ref, child=child)
    label = translator.task_label(mine)
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
        add_tags(context, _start_tags(step, decision))
    if step.config_error is not None:
        outcome = runner.record_failure(mine, step.config_error)
        context.log.error(f"task {label} not run: {step.config_error} (recorded)")
        raise Failure(
            description=step.config_error,
            metadata=translator.failure_metadata(outcome, context.run_id, step.config_error),
            allow_retries=False,
        )
    outcome = runner.execute(
        mine, record_failure=_is_last_attempt(context), decoded=decision.decoded
    )
    table = translator.table_of(decision.decoded) if decision.decoded is not None else None

    if outcome.status is Status.DONE:
        context.log.info(log_line(outcome, table=table.label if table else None))
        result = outcome.result
        sample = result.deleted_paths_sample if result is not None else []
        if result is not None and sample:
            of = (
                f"first {len(sample)} of {result.deleted}"
                if result.deleted > len(sample)
                else "all"
            )
            context.log.info(f"deleted ({of}): " + ", ".join(sample))
        if not child:
            add_tags(context, translator.outcome_tags(OUTCOME_DONE))
        return TaskResult(
            step_output(outcome), translator.done_metadata(outcome, decision.decoded), outcome
        )

    if outcome.status is Status.RESTORED:
        # The table is live again: not a failure, and nothing was deleted.
        context.log.info(log_line(outcome))
        # A child too: the whole family was ended, so the run's table (or group) is
        # restored, whatever its root said before.
        add_tags(context, translator.outcome_tags(OUTCOME_RESTORED))
        return TaskResult(
            step_output(outcome), translator.done_metadata(outcome, decision.decoded), outcome
        )

    if outcome.status is Status.LEASE_LOST:
        # Taken away mid-way (this run stalled past its lease): the current holder
        # finishes it. Not this run's failure, and not work this run claims.
        message = (
            f"{outcome.error}; the cleanup stopped at once and the current holder "
            "finishes it (handlers are idempotent)"
        )
        context.log.warning(message)
        if not child:
            add_tags(context, translator.outcome_tags(OUTCOME_LEASE_LOST))
        output = {**step_output(outcome), "message": message}
        meta = translator.lease_lost_metadata(mine, message, outcome)
        return TaskResult(output, meta, found="lease-lost", task=mine)

    error = _first_line(outcome.error)
    if not outcome.recorded:
        context.log.warning(
            f"task {label} failed (try {context.retry_number + 1}), retrying in this run "
            f"under the same lease: {error}"
        )
        raise TransientTaskError(error)
    next_attempt = iso_utc_seconds(outcome.next_attempt_ms) or ""
    meta = translator.failure_metadata(
        outcome,
        context.run_id,
        error,
        next_attempt=next_attempt if outcome.next_attempt_ms is not None else None,
        table=table,
    )
    if outcome.status is Status.DEAD:
        lease = outcome.lease
        tail = (
            "dead-lettered after its last attempt; `polaris-pipeline tasks requeue "
            f"{lease.task_id} --realm {lease.realm_id}` revives it"
        )
    else:
        tail = f"recorded; the sweeper retries it after {meta.get('next attempt', 'a backoff')}"
    context.log.error(f"task {label} failed ({tail}): {outcome.error}")
    raise Failure(description=error, metadata=meta, allow_retries=False)


# ------------------------------------------------------------ a group of children


def run_child_group(
    context: OpExecutionContext,
    refs: Sequence[Mapping[str, Any]],
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    translator: PolarisTranslator,
) -> Output[dict]:
    """One mapped step: each child task of ``refs`` (``TaskRef`` dicts) started and run."""
    if not refs:
        note = "no child task in this stage: this step only lets the next stage start"
        context.log.info(note)
        return Output({"tasks": [], "deleted": 0, "bytes_freed": 0}, metadata={"note": note})
    # A table's children come with the leases they were created under; orphans (and
    # the children of runs made before leases were handed on) as references.
    children = [TaskRef.from_dict(data) for data in refs]
    leases = [_held(data) for data in refs]
    done: list[TaskResult] = []
    summaries: list[dict[str, Any]] = []
    transient: list[str] = []
    failures: list[Failure] = []
    with open_step(context, metastore, storage, children[0].realm_id, translator) as step:
        for child, held in zip(children, leases, strict=True):
            # Every child is run even when one fails: one bad file must not hold
            # back the rest of the table. Finished children are gone on a retry.
            try:
                ran = run_task(context, step, child.realm_id, child.task_id, child=True, held=held)
            except TransientTaskError as exc:
                transient.append(str(exc))
                continue
            except Failure as exc:
                failures.append(exc)
                continue
            outcome = ran.outcome
            if outcome is not None and outcome.children:
                # Only table cleanups create children, and a child is never one.
                context.log.warning(
                    f"child {translator.task_label(child)} created {len(outcome.children)} "
                    "task(s) of its own; they are left to the sweeper"
                )
            done.append(ran)
            # A step that found its task gone names none: the summary names it.
            summaries.append({"task_id": str(child.task_id), **ran.output})
        executor_id = step.runner.executor_id
    if is_group_run(context.dagster_run.run_config):
        _tag_group(context, translator, executor_id, done)
    if transient:
        raise TransientTaskError(
            f"{len(transient)} of {len(refs)} child task(s) failed, first: {transient[0]}"
        )
    if failures:
        first = failures[0]
        raise Failure(
            description=(
                f"{len(failures)} of {len(refs)} child task(s) failed and were recorded; "
                f"first: {first.description}"
            ),
            metadata=translator.group_failure_metadata(done, failures),
            allow_retries=False,
        )
    group = {
        "tasks": summaries,
        "deleted": sum(s.get("deleted") or 0 for s in summaries),
        "bytes_freed": sum(s.get("bytes_freed") or 0 for s in summaries),
    }
    return Output(group, metadata=translator.group_metadata(children, executor_id, done))


def _held(data: Mapping[str, Any]) -> Lease | None:
    """The lease a child's entry carries (``Lease.to_dict``), or None for a reference."""
    return Lease.from_dict(data) if data.get("executor_id") is not None else None


def _tag_group(
    context: OpExecutionContext,
    translator: PolarisTranslator,
    executor_id: str,
    done: Sequence[TaskResult],
) -> None:
    """A run of orphaned children: its executor and the highest attempt of its children.

    Each step knows its own children's attempts: the tag is the highest of these
    and of the tag earlier steps wrote (read from the instance, not the step's
    copy of the run, which is the run as it started).
    """
    attempts = [ran.outcome.lease.attempt for ran in done if ran.outcome is not None]
    try:
        run = context.instance.get_run_by_id(context.run_id)
        tagged = (run.tags if run is not None else {}).get(TAG_ATTEMPT, "")
    except Exception:
        tagged = ""
    if tagged.isdigit():
        attempts.append(int(tagged))
    add_tags(context, translator.group_tags(executor_id, attempts))
