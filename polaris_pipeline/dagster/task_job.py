"""``polaris_task_job``: one Dagster run per Polaris task, which leases it when it starts
(``Runner.start``), so a run that waits in a queue holds no lease that could lapse.

A table cleanup's children run in the same run, as mapped steps in the ordered
stages the engine declares (``cleanup.stages.CHILD_STAGES``), a gate between each
two; ``children_per_step`` children to a step. By default every step runs in the run's own process
(``in_process``): a run is one task's worth of work, and the multiprocess
executor (``MULTIPROCESS_EXECUTOR``) costs a forkserver and a process per step;
``build_defs(executor="multiprocess")`` chooses it.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from dagster import (
    Backoff,
    DynamicOut,
    DynamicOutput,
    ExecutorDefinition,
    Failure,
    In,
    Jitter,
    JobDefinition,
    OpDefinition,
    OpExecutionContext,
    Out,
    Output,
    RetryPolicy,
    in_process_executor,
    job,
    multiprocess_executor,
    op,
)

from polaris_pipeline.cleanup.stages import (
    CHILD_STAGES,
    ChildStage,
    Staged,
    check_plan,
    in_plan_order,
    orphan_stage,
)
from polaris_pipeline.dagster.contract import (
    DEFAULT_RUN_TAGS,
    FINISH_OUTPUT,
    FINISH_STEP,
    JOB_NAME,
    OUTCOME_OUTPUT,
    ROOT_STEP,
    TaskRunConfig,
    check_run_contract,
    child_step,
    gate_step,
    stage_output,
    task_number,
)
from polaris_pipeline.dagster.lineage import intent_of
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.task_step import (
    add_tags,
    open_step,
    run_child_group,
    run_task,
)
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.execution.outcome import Status, TableFinish, TaskOutcome
from polaris_pipeline.execution.sweep import child_stages
from polaris_pipeline.report.fields import UNREFERENCED
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.report.outcome_metadata import unreferenced_metadata
from polaris_pipeline.report.step_record import StepRecord
from polaris_pipeline.tasks.ref import TaskRef

# Op retries: a transient failure (storage hiccup, lost connection) is retried
# inside the run under the same lease; the heartbeat keeps the lease alive.
DEFAULT_RETRY_POLICY = RetryPolicy(
    max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS
)

# The option for tables with many large children: one process per step, forked
# from a server that has imported the engine once instead of each spawning a
# fresh interpreter that imports Dagster, pyiceberg and pyarrow again.
MULTIPROCESS_EXECUTOR = multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["dagster", __name__]}}},
    name="multiprocess",
)

# A group of child tasks handed from step to step: a table's children as the leases
# its attempt created them under (``Lease.to_dict``), orphans as ``TaskRef.to_dict``.
RefGroup = list[dict[str, Any]]
T = TypeVar("T")


# ----------------------------------------------------------------------- ops
#
# The root op has one output per stage: the first feeds that stage's mapped child
# op, each later one a gate that hands its stage out once every step of the stage
# before is done.


def _stage_text(plan: tuple[ChildStage, ...], stage: ChildStage) -> str:
    return f"Stage {plan.index(stage) + 1} of {len(plan)}, {stage.name}: {stage.description}"


def _root_op(plan: tuple[ChildStage, ...], translator: PolarisTranslator) -> OpDefinition:
    """``run_polaris_task``, with one output per stage of ``plan``."""
    out: dict[str, Out] = {OUTCOME_OUTPUT: Out(dict, description="What the task did.")}
    for stage in plan:
        text = _stage_text(plan, stage)
        if stage is plan[0]:
            out[stage_output(stage.name)] = DynamicOut(
                list, is_required=False, description=f"{text} Groups of up to children_per_step."
            )
        else:
            out[stage_output(stage.name)] = Out(
                list,
                is_required=False,
                description=f"{text} Its groups, for the gate before the stage.",
            )
    out[FINISH_OUTPUT] = Out(
        dict,
        is_required=False,
        description=(
            "A dropped table waiting for its children (``TableFinish.to_dict``), for its "
            "last step once its last stage is done."
        ),
    )

    @op(
        name=ROOT_STEP,
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
        check_run_contract(context.dagster_run.tags)
        if config.task_ids:
            yield from _orphan_stages(context, config, metastore, plan, translator)
            return
        task_id = task_number(config.task_id)
        with open_step(context, metastore, storage, config.realm_id, translator) as step:
            ran = run_task(context, step, config.realm_id, task_id)
        yield Output(ran.output, OUTCOME_OUTPUT, metadata=ran.metadata)
        outcome = ran.outcome
        if outcome is None or not outcome.children:
            return
        if outcome.finish is not None:
            yield Output(outcome.finish.to_dict(), FINISH_OUTPUT)
        # The children keep the leases the attempt created them under (``Runner.resume``).
        staged = [
            (stage, [lease.to_dict() for lease in leases])
            for stage, leases in _in_job_plan(lambda: child_stages(outcome, plan))
        ]
        yield from _emit_stages(staged, config.children_per_step)

    return run_polaris_task


def _in_job_plan(staging: Callable[[], Staged[T]]) -> Staged[T]:
    """``staging()``, refused if it puts a child in a stage the job's plan lacks."""
    try:
        return staging()
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
                    group, mapping_key=_group_key(group), output_name=stage_output(stage.name)
                )
        else:
            yield Output(stage_groups, stage_output(stage.name))


def _orphan_stages(
    context: OpExecutionContext,
    config: TaskRunConfig,
    metastore: PolarisMetastoreResource,
    plan: tuple[ChildStage, ...],
    translator: PolarisTranslator,
) -> Iterator[Output[Any] | DynamicOutput[Any]]:
    """Orphaned children of one purge: each is started (leased) and run by a child step.

    Each goes to the stage the engine gives it (``stages.orphan_stage``), as a
    table cleanup stages its own; a child already gone is left out.
    """
    store = metastore.get_metastore()
    # The run's executor id, as its child steps lease under it (their attempts
    # are tagged by the steps, once known).
    executor_id = metastore.run_executor_id(intent_of(context).root_run_id)
    add_tags(context, translator.group_tags(executor_id))
    assigned: list[tuple[ChildStage, RefGroup]] = []
    gone = 0
    for raw in config.task_ids:
        row = store.get_task(config.realm_id, task_number(raw))
        if row is None:
            gone += 1
            continue
        assigned.append((orphan_stage(row), [TaskRef.from_row(row).to_dict()]))
    staged = _in_job_plan(lambda: in_plan_order(assigned, plan))
    count = sum(len(refs) for _, refs in staged)
    sizes = ", ".join(f"{len(refs)} {stage.name}" for stage, refs in staged)
    message = (
        f"{len(config.task_ids)} orphaned child task(s) of one purge, run together: "
        f"{sizes}; {gone} already gone"
    )
    context.log.info(message)
    summary = {"status": "orphans", "message": message, "children": count}
    yield Output(summary, OUTCOME_OUTPUT, metadata={"realm": config.realm_id, "note": message})
    yield from _emit_stages(staged, config.children_per_step)


def _groups(refs: RefGroup, size: int) -> list[RefGroup]:
    step = max(1, size)
    return [refs[i : i + step] for i in range(0, len(refs), step)]


def _group_key(group: RefGroup) -> str:
    if not group:
        return "none"  # the one step of an empty stage
    first = f"t{group[0]['task_id']}"
    return first if len(group) == 1 else f"{first}_n{len(group)}"


def _child_op(
    plan: tuple[ChildStage, ...], stage: ChildStage, translator: PolarisTranslator
) -> OpDefinition:
    """The mapped op of one stage: ``run_<stage>_children``."""

    @op(
        name=child_step(stage.name),
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
        # A re-execution from failure may start here: the run's contract is checked too.
        check_run_contract(context.dagster_run.tags)
        return run_child_group(context, leases, metastore, storage, translator)

    return run_children


def _gate_op(plan: tuple[ChildStage, ...], stage: ChildStage) -> OpDefinition:
    """The gate before one stage: ``release_<stage>_children``."""

    @op(
        name=gate_step(stage.name),
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


def _finish_op(translator: PolarisTranslator) -> OpDefinition:
    """``finish_polaris_table``: a dropped table's last stage (``Runner.finish_table``).

    Runs after every step of the last stage is done (Dagster skips it when one
    failed). In ``delete`` mode the root left the row held, and this step completes
    it or records the phase's failure (skipped, the row stays held until its lease
    lapses and a sweeper's run retries the table); in ``report`` mode the root
    completed the row as ever and this step only reports.
    """

    @op(
        name=FINISH_STEP,
        description=(
            "After the last stage: the dropped table's unreferenced files (the files under "
            "its location its metadata no longer names: off, report or delete), then its "
            "task row is completed."
        ),
        ins={"table": In(dict), "last_stage": In(list)},
        retry_policy=DEFAULT_RETRY_POLICY,
        tags={"kind": "polaris"},
    )
    def finish_table(
        context: OpExecutionContext,
        table: dict,
        last_stage: list,
        metastore: PolarisMetastoreResource,
        storage: PolarisStorageResource,
    ) -> Output[dict]:
        check_run_contract(context.dagster_run.tags)
        finish = TableFinish.from_dict(table)
        with open_step(context, metastore, storage, finish.lease.realm_id, translator) as step:
            final = step.runner.finish_table(finish, children_done=True)
        return _finished(context, translator, final)

    return finish_table


def _finished(
    context: OpExecutionContext, translator: PolarisTranslator, final: TaskOutcome
) -> Output[dict]:
    """The table's last step told: the phase's numbers and line, never a task status
    (the root step counted the table, so the run's total counts it once)."""
    left = OutcomeFacts(final).unreferenced
    summary = left.summary() if left is not None else "no unreferenced phase"
    meta = {
        **translator.lease_metadata(final.lease),
        **unreferenced_metadata(final),
        **translator.step_record_metadata(StepRecord(unreferenced=left)),
    }
    label = translator.task_label(final.lease)
    if final.status is Status.DONE:
        context.log.info(f"table task {label} finished: {summary}")
        return Output({"status": final.status.value, UNREFERENCED: summary}, metadata=meta)
    if final.status is Status.LEASE_LOST:
        context.log.warning(f"{final.error}; the current holder finishes the table")
        return Output({"status": final.status.value, "message": final.error}, metadata=meta)
    context.log.error(f"table task {label} failed: {final.error}")
    raise Failure(description=final.error, metadata=meta, allow_retries=False)


@dataclass(frozen=True)
class _StageOps:
    root: OpDefinition
    children: tuple[OpDefinition, ...]  # one per stage
    gates: tuple[OpDefinition, ...]  # one per stage after the first
    finish: OpDefinition


@cache
def _stage_ops(plan: tuple[ChildStage, ...], translator: PolarisTranslator) -> _StageOps:
    # Once per plan and translator: Dagster refuses two definitions of one op name in
    # a code location, and every job built from them uses the same ops.
    return _StageOps(
        root=_root_op(plan, translator),
        children=tuple(_child_op(plan, stage, translator) for stage in plan),
        gates=tuple(_gate_op(plan, stage) for stage in plan[1:]),
        finish=_finish_op(translator),
    )


def build_polaris_task_job(
    name: str = JOB_NAME,
    *,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    tags: Mapping[str, str] | None = None,
    executor_def: ExecutorDefinition | None = None,
    stages: Sequence[ChildStage] = CHILD_STAGES,
    translator: PolarisTranslator | None = None,
) -> JobDefinition:
    """The task job; ``retry_policy`` replaces the op retry policy (tests use fast ones).

    ``executor_def`` defaults to ``in_process_executor`` (every step in the run's own
    process); ``MULTIPROCESS_EXECUTOR`` runs a process per step. ``stages`` is the
    plan the children run in, the engine's unless a test gives another.
    ``translator`` decides what the runs show (``PolarisTranslator`` by default).
    """
    plan = check_plan(stages)
    ops = _stage_ops(plan, translator or DEFAULT_TRANSLATOR)
    root = ops.root.with_retry_policy(retry_policy)
    runs = [child.with_retry_policy(retry_policy) for child in ops.children]
    finish = ops.finish.with_retry_policy(retry_policy)
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
        _outcome, first, *later, table = root()
        stage = first.map(runs[0])
        for gate, groups, run in zip(ops.gates, later, runs[1:], strict=True):
            stage = gate(groups, stage.collect()).map(run)
        # Once every step of the last stage is done.
        finish(table, stage.collect())

    return polaris_task_graph


polaris_task_job = build_polaris_task_job()
