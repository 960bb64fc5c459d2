"""``polaris_task_job``: one Dagster run per leased Polaris task.

The sensor leases a task and passes the lease as op config. The run adopts the
lease under its own executor id, runs it with the engine's ``Runner``, and, when
a table cleanup creates child tasks, runs those children as mapped steps of the
same run in three ordered stages: manifest children (content files and the
manifests), then the batch children (manifest lists, older metadata, statistics),
then the child that deletes the current metadata file. Children are grouped,
``children_per_step`` to a mapped step, because each step has a fixed cost.

Every op process of a run uses one executor id derived from the run id, so the
children (created already leased by that id) need no take-over, and the
heartbeat of whichever op is running renews every lease the run holds.
"""

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from dagster import (
    Backoff,
    Config,
    DynamicOut,
    DynamicOutput,
    ExecutorDefinition,
    Failure,
    In,
    Jitter,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Out,
    Output,
    RetryPolicy,
    job,
    multiprocess_executor,
    op,
)
from pydantic import Field

from polaris_pipeline.cleanup.context import MAX_CHILD_STAGES
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.runner import Runner, Status, TaskOutcome
from polaris_pipeline.tasks.model import Lease, TaskRow, TaskState, TaskType

JOB_NAME = "polaris_task_job"
# Op retries: a transient failure (storage hiccup, lost connection) is retried
# inside the run under the same lease; the heartbeat keeps the lease alive.
DEFAULT_RETRY_POLICY = RetryPolicy(
    max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS
)
# Run retries (needs run_retries enabled in dagster.yaml): a run whose process
# died is retried from the failed steps; the new run takes the lease over.
# Op failures are retried by the RetryPolicy and then recorded in the task row,
# so a run retry after one would only find the task backing off: run retries
# are for runs whose worker died, not for op failures.
DEFAULT_RUN_TAGS = {
    "dagster/max_retries": "2",
    "dagster/retry_on_asset_or_op_failure": "false",
}

TAG_REALM = "polaris/realm"
TAG_TASK_ID = "polaris/task_id"
TAG_TASK_TYPE = "polaris/task_type"
TAG_ATTEMPT = "polaris/attempt"
TAG_EXECUTOR = "polaris/executor"

MANIFEST_TYPE_CODE = str(int(TaskType.MANIFEST_FILE_CLEANUP))
_PROGRESS_LOG_INTERVAL_S = 10.0
# Task names of batch children embed their whole file list: logs and metadata show
# this much of a name (the run's config and the metastore keep it whole).
_NAME_IN_LABEL = 60
# Refused or failed paths listed in a failure's metadata (the counts are exact).
_FAILURE_SAMPLE = 20
# Children per mapped step (see TaskLeaseConfig.children_per_step).
CHILDREN_PER_STEP = 20

# Still Dagster's multiprocess executor (one process per step), but steps fork
# from a server that has imported the engine once, instead of each spawning a
# fresh interpreter that imports Dagster, pyiceberg and pyarrow again: a table's
# children are many small steps. Run config can override it like any executor.
TASK_EXECUTOR = multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["dagster", __name__]}}},
    name="multiprocess",
)


class TaskLeaseConfig(Config):
    """A lease granted by the sensor, as op config.

    ``task_id`` is text: Polaris ids use 63 bits, more than a JavaScript number
    holds exactly, and the run config passes through the UI when a run is
    re-executed from there.
    """

    realm_id: str = Field(description="Realm of the task.")
    task_id: str = Field(description="Polaris entity id of the task (decimal text).")
    executor_id: str = Field(description="Executor id the lease was granted to.")
    attempt: int = Field(description="attemptCount written by the lease: the fencing token.")
    entity_version: int = Field(description="entity_version of the row after the lease.")
    start_time_ms: int = Field(description="Lease start, database clock (epoch ms).")
    name: str = Field(default="", description="Task name.")
    task_type: str | None = Field(default=None, description="taskType code (1, 2 or 3).")
    children_per_step: int = Field(
        default=CHILDREN_PER_STEP,
        ge=1,
        description=(
            "Child tasks a table cleanup's children are grouped by, one step per group: "
            "a step costs Dagster about a tenth of a second, a small manifest less."
        ),
    )

    def to_lease(self) -> Lease:
        return lease_from_dict(self.model_dump(exclude={"children_per_step"}))


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


def task_type_name(code: str | None) -> str:
    """``entity_cleanup_scheduler`` for "1", and so on; ``unknown(<code>)`` otherwise."""
    try:
        return TaskType(int(code or "")).name.lower()
    except ValueError:
        return f"unknown({(code or '')[:20]})"


def lease_tags(lease: Lease) -> dict[str, str]:
    """Run tags that let an operator find a task's runs in the UI."""
    return {
        TAG_REALM: lease.realm_id,
        TAG_TASK_ID: str(lease.task_id),
        TAG_TASK_TYPE: task_type_name(lease.task_type_code),
        TAG_ATTEMPT: str(lease.attempt),
        TAG_EXECUTOR: lease.executor_id,
    }


def run_config_for(lease: Lease) -> dict[str, Any]:
    """Run config that hands ``lease`` to the root op of the task job."""
    return {"ops": {"run_polaris_task": {"config": lease_to_dict(lease)}}}


class TransientTaskError(Exception):
    """A failure left unrecorded so the op's RetryPolicy retries it under the same lease."""


# ------------------------------------------------------------------ one task


def _is_last_attempt(context: OpExecutionContext) -> bool:
    policy = context.job_def.get_retry_policy_for_handle(context.op_handle)
    max_retries = policy.max_retries if policy is not None else 0
    return context.retry_number >= max_retries


def _label(lease: Lease) -> str:
    """``realm/id 'name'`` with the name cut short enough to read in a log line."""
    name = lease.name
    if len(name) > _NAME_IN_LABEL:
        name = name[: _NAME_IN_LABEL - 1] + "…"
    return f"{lease.realm_id}/{lease.task_id} {name!r}"


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "unknown bytes"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit} ({n} bytes)"
        size /= 1024
    return f"{n} B"


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def _holder_text(task: TaskRow, store: Metastore) -> str:
    now = store.now_ms()
    state = task.state(now, store.policy)
    who = task.executor_id or "nobody"
    if state is TaskState.LEASED:
        return f"another executor holds task {task.label}: {who}, attempt {task.attempt_count}"
    status = task.status or "unknown"
    return (
        f"another executor holds task {task.label} or its attempt ended: now {state.value} "
        f"(last executor {who}, attempt {task.attempt_count}, last status {status})"
    )


class _ProgressLog:
    """Runner progress, logged at most every few seconds so long deletes show life."""

    def __init__(self, context: OpExecutionContext) -> None:
        self._context = context
        self._last = 0.0

    def __call__(self, lease: Lease, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if now - self._last < _PROGRESS_LOG_INTERVAL_S and done != total:
            return
        self._last = now
        of = f"/{total}" if total else ""
        self._context.log.info(f"{_label(lease)}: {what} {done}{of}")


def _adopt(
    context: OpExecutionContext, runner: Runner, lease: Lease, store: Metastore
) -> tuple[Lease | None, dict[str, Any] | None]:
    """The lease, now held by this run; or None and the summary of why not."""
    task = store.get_task(lease.realm_id, lease.task_id)
    if task is None:
        context.log.info(
            f"task {_label(lease)} is already gone (finished by another executor); nothing to do"
        )
        return None, {"status": "already-done", "message": "task already gone"}
    if task.executor_id == runner.executor_id and task.lease_held(store.now_ms(), store.policy):
        # An op retry: an earlier try of this run already took the lease over (or
        # leased the task again); the executor id is the run's, so it is ours.
        held = Lease(
            realm_id=lease.realm_id,
            task_id=lease.task_id,
            executor_id=runner.executor_id,
            attempt=task.attempt_count,
            entity_version=task.entity_version,
            start_time_ms=task.start_time_ms or lease.start_time_ms,
            task_type_code=lease.task_type_code,
            name=lease.name,
        )
        return runner.adopt(held), None
    if lease.executor_id != runner.executor_id:
        # The sensor's lease (or, in a run retry, the previous run's): take it over.
        mine = runner.adopt(lease)
        if mine is not None:
            return mine, None
        task = store.get_task(lease.realm_id, lease.task_id)
        if task is None:
            context.log.info(f"task {_label(lease)} finished by another executor meanwhile")
            return None, {"status": "already-done", "message": "task already gone"}
    if task.state(store.now_ms(), store.policy) is TaskState.ORPHANED:
        # The lease lapsed before this step started (a long run queue, a slow
        # step queue) and nobody took the task since: lease it afresh rather
        # than waste the attempt.
        fresh = store.lease_task(lease.realm_id, lease.task_id, runner.executor_id)
        if fresh is not None:
            context.log.warning(
                f"the lease on {_label(lease)} (attempt {lease.attempt}) expired before "
                f"the run started; leased the task again as attempt {fresh.attempt}"
            )
            return runner.adopt(fresh), None
        task = store.get_task(lease.realm_id, lease.task_id) or task
    message = (
        f"lease lost before the run started: {_holder_text(task, store)}; "
        f"this run's lease (attempt {lease.attempt}) is void; nothing was deleted"
    )
    context.log.warning(message)
    return None, {"status": Status.LEASE_LOST.value, "message": message}


def _summary(outcome: TaskOutcome) -> dict[str, Any]:
    result = outcome.result
    return {
        "task": outcome.lease.label,
        "realm_id": outcome.lease.realm_id,
        "task_id": str(outcome.lease.task_id),
        "task_type": task_type_name(outcome.task_type),
        "status": outcome.status.value,
        "attempt": outcome.lease.attempt,
        "deleted": result.deleted if result else 0,
        "bytes_freed": result.bytes_freed if result else 0,
        "refused": len(result.refused) if result else 0,
        "children": len(outcome.children),
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
        "lease started": _iso(lease.start_time_ms) or "",
    }


def _done_metadata(outcome: TaskOutcome) -> dict[str, Any]:
    result = outcome.result
    meta = {**_lease_metadata(outcome.lease), "status": outcome.status.value}
    meta["type"] = task_type_name(outcome.task_type)
    if result is None:
        meta["note"] = "task row already gone: finished by another executor"
        return meta
    meta["files deleted"] = result.deleted
    meta["files already gone"] = result.missing
    meta["bytes freed"] = result.bytes_freed if result.bytes_freed is not None else "unknown"
    meta["refused paths"] = len(result.refused)
    meta["child tasks"] = len(outcome.children)
    if result.deleted_paths_sample:
        meta["deleted paths (sample)"] = MetadataValue.json(list(result.deleted_paths_sample))
    if result.notes:
        meta["notes"] = MetadataValue.md("\n".join(f"- {n}" for n in result.notes))
    return meta


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else "task failed"


@contextmanager
def _open_runner(
    context: OpExecutionContext,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    realm_id: str,
) -> Iterator[Runner]:
    """The engine's runner under the run's executor id, for one step."""
    store = metastore.get_metastore()
    if realm_id:
        # One renewal of every lease this run holds in the realm, once per step:
        # children queued behind earlier steps stay held. Not once per child: a
        # run holding thousands of children would rewrite them all for each one.
        store.renew_held_by(realm_id, metastore.run_executor_id(context.run_id))
    runner = Runner(
        store,
        storage.get_config(),
        executor_id=metastore.run_executor_id(context.run_id),
        run_id=context.run_id,
        resolver=storage.get_resolver(),
        progress=_ProgressLog(context),
    )
    try:
        yield runner
    finally:
        runner.close()


def run_leased_task(
    context: OpExecutionContext, runner: Runner, lease: Lease
) -> tuple[dict[str, Any], dict[str, Any], TaskOutcome | None]:
    """Adopt and execute one lease; returns (summary, output metadata, outcome).

    Raises TransientTaskError for the op's RetryPolicy, or a non-retryable
    ``Failure`` once the failure is recorded in the task row.
    """
    store = runner.metastore
    mine, lost = _adopt(context, runner, lease, store)
    if mine is None:
        summary = {"task": lease.label, **(lost or {})}
        meta = {**_lease_metadata(lease), **(lost or {})}
        return summary, meta, None
    outcome = runner.execute(mine, record_failure=_is_last_attempt(context))

    if outcome.status is Status.DONE:
        result = outcome.result
        if result is None:
            context.log.info(f"task {_label(mine)} was already finished by another executor")
        else:
            context.log.info(
                f"task {_label(mine)} ({task_type_name(outcome.task_type)}) done: "
                f"{result.deleted} file(s) deleted, {_human_bytes(result.bytes_freed)} freed, "
                f"{result.missing} already gone, {len(result.refused)} refused by the guard, "
                f"{len(outcome.children)} child task(s); lease {mine.executor_id} "
                f"attempt {mine.attempt}"
            )
            sample = result.deleted_paths_sample
            if sample:
                of = (
                    f"first {len(sample)} of {result.deleted}"
                    if result.deleted > len(sample)
                    else "all"
                )
                context.log.info(f"deleted ({of}): " + ", ".join(sample))
        return _summary(outcome), _done_metadata(outcome), outcome

    if outcome.status is Status.LEASE_LOST:
        if not outcome.started:
            task = store.get_task(mine.realm_id, mine.task_id)
            holder = _holder_text(task, store) if task else f"task {_label(mine)} is gone"
            message = (
                f"lease lost before the run started: {holder}; "
                f"this run's lease (attempt {mine.attempt}) is void; nothing was deleted"
            )
        else:
            message = (
                f"{outcome.error}; the cleanup stopped at once and the current holder "
                "finishes it (handlers are idempotent)"
            )
        context.log.warning(message)
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
        "status": outcome.status.value,
        "error": outcome.error or error,
        "permanent": outcome.permanent,
        "dagster run id": context.run_id,
    }
    if outcome.next_attempt_ms is not None:
        meta["next attempt"] = _iso(outcome.next_attempt_ms) or ""
    result = outcome.result
    if result is not None:
        meta["files deleted"] = result.deleted
        meta["files already gone"] = result.missing
        meta["bytes freed"] = result.bytes_freed if result.bytes_freed is not None else "unknown"
        meta["refused paths"] = len(result.refused)
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


@op(
    description="Adopt the sensor's lease on one Polaris task and run it to an outcome.",
    out={
        "outcome": Out(dict, description="What the task did."),
        "children": DynamicOut(
            list,
            is_required=False,
            description=(
                "First stage of child leases, in groups of up to children_per_step: "
                "manifest children (or the first stage there is)."
            ),
        ),
        "later_children": Out(
            list,
            is_required=False,
            description="Second stage: groups of batch children (manifest lists, old metadata).",
        ),
        "final_children": Out(
            list,
            is_required=False,
            description="Third stage: the child that deletes the current metadata file.",
        ),
    },
    retry_policy=DEFAULT_RETRY_POLICY,
    tags={"kind": "polaris"},
)
def run_polaris_task(
    context: OpExecutionContext,
    config: TaskLeaseConfig,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
) -> Iterator[Output[Any] | DynamicOutput[Any]]:
    lease = config.to_lease()
    with _open_runner(context, metastore, storage, lease.realm_id) as runner:
        summary, meta, outcome = run_leased_task(context, runner, lease)
    yield Output(summary, "outcome", metadata=meta)
    if outcome is None or not outcome.children:
        return
    stages = child_stages(outcome)
    groups = [_groups(stage, config.children_per_step) for stage in stages]
    # Only the first stage is fed straight from here: a stage fed by a collect of
    # nothing would be skipped by Dagster, so empty stages are already left out.
    for group in groups[0]:
        yield DynamicOutput(group, mapping_key=_group_key(group), output_name="children")
    for name, later in zip(("later_children", "final_children"), groups[1:], strict=False):
        yield Output(later, name)


def child_stages(outcome: TaskOutcome) -> list[list[Lease]]:
    """The outcome's children split into the ordered stages the handler asked for."""
    children = outcome.children
    sizes = outcome.result.child_stages if outcome.result is not None else []
    if sum(sizes) != len(children):
        # A handler that gave no stages: everything in one stage.
        sizes = [len(children)]
    stages: list[list[Lease]] = []
    start = 0
    for size in sizes:
        if size:
            stages.append(children[start : start + size])
        start += size
    if len(stages) > MAX_CHILD_STAGES:
        # Merging stages would break the order the handler asked for: refuse. The
        # children are already recorded, so a sweeper runs them once the lease lapses.
        raise PolarisPipelineError(
            f"the handler gave {len(stages)} child stages; this job runs at most {MAX_CHILD_STAGES}"
        )
    return stages


def _groups(leases: list[Lease], size: int) -> list[list[dict[str, Any]]]:
    step = max(1, size)
    return [[lease_to_dict(c) for c in leases[i : i + step]] for i in range(0, len(leases), step)]


def _group_key(group: list[dict[str, Any]]) -> str:
    first = f"t{group[0]['task_id']}"
    return first if len(group) == 1 else f"{first}_n{len(group)}"


@op(
    description=(
        "Run a group of child tasks created by the table cleanup, one after the other, "
        "under the run's lease."
    ),
    retry_policy=DEFAULT_RETRY_POLICY,
    tags={"kind": "polaris"},
)
def run_child_task(
    context: OpExecutionContext,
    leases: list,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
) -> Output[dict]:
    done: list[tuple[dict[str, Any], TaskOutcome | None]] = []
    transient: list[str] = []
    failures: list[Failure] = []
    realm_id = str(leases[0]["realm_id"]) if leases else ""
    with _open_runner(context, metastore, storage, realm_id) as runner:
        for data in leases:
            child = lease_from_dict(data)
            # Every child is run even when one fails: one bad file must not hold
            # back the rest of the table. Finished children are gone on a retry.
            try:
                summary, _meta, outcome = run_leased_task(context, runner, child)
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
        executor_id = runner.executor_id
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
    results = [o.result for _, o in done if o is not None and o.result is not None]
    by_status: dict[str, int] = {}
    for summary, _ in done:
        by_status[summary["status"]] = by_status.get(summary["status"], 0) + 1
    freed = [r.bytes_freed for r in results]
    sample = [p for r in results for p in r.deleted_paths_sample][:_FAILURE_SAMPLE]
    meta: dict[str, Any] = {
        "realm": ", ".join(sorted({str(data["realm_id"]) for data in leases})),
        "lease executor": executor_id,
        "child tasks": len(done),
        "by status": MetadataValue.json(by_status),
        "files deleted": sum(r.deleted for r in results),
        "files already gone": sum(r.missing for r in results),
        "bytes freed": "unknown" if None in freed else sum(f or 0 for f in freed),
        "refused paths": sum(len(r.refused) for r in results),
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


@op(
    description=(
        "Gate between the stages: once every child of the previous stage is done, hand "
        "out the next stage's children (which may delete files the previous stage read)."
    ),
    ins={"groups": In(list), "previous_stage": In(list)},
    out=DynamicOut(list, is_required=False),
    tags={"kind": "polaris"},
)
def release_next_stage(
    context: OpExecutionContext, groups: list, previous_stage: list
) -> Iterator[DynamicOutput[list]]:
    done = sum(len(g.get("tasks", [])) for g in previous_stage)
    count = sum(len(g) for g in groups)
    context.log.info(
        f"{done} child task(s) of the previous stage done; releasing {count} child task(s)"
    )
    for group in groups:
        yield DynamicOutput(group, mapping_key=_group_key(group))


def build_polaris_task_job(
    name: str = JOB_NAME,
    *,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    tags: Mapping[str, str] | None = None,
    executor_def: ExecutorDefinition | None = None,
) -> JobDefinition:
    """The task job; ``retry_policy`` replaces the op retry policy (tests use fast ones).

    ``executor_def`` defaults to ``TASK_EXECUTOR`` (one process per step).
    """
    root = run_polaris_task.with_retry_policy(retry_policy)
    child = run_child_task.with_retry_policy(retry_policy)
    later_child = run_child_task.alias("run_later_child_task").with_retry_policy(retry_policy)
    final_child = run_child_task.alias("run_final_child_task").with_retry_policy(retry_policy)
    release_later = release_next_stage.alias("release_later_children")
    release_final = release_next_stage.alias("release_final_children")

    @job(
        name=name,
        description=(
            "One Polaris cleanup task per run: adopt the sweeper's lease, clean up, then "
            "run the child tasks of a table cleanup in three ordered stages."
        ),
        tags={**DEFAULT_RUN_TAGS, **(tags or {})},
        executor_def=executor_def or TASK_EXECUTOR,
    )
    def polaris_task_graph() -> None:
        _outcome, children, later, final = root()
        first_stage = children.map(child).collect()
        second_stage = release_later(later, first_stage).map(later_child).collect()
        release_final(final, second_stage).map(final_child)

    return polaris_task_graph


polaris_task_job = build_polaris_task_job()

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "JOB_NAME",
    "TaskLeaseConfig",
    "TransientTaskError",
    "build_polaris_task_job",
    "child_stages",
    "lease_from_dict",
    "lease_tags",
    "lease_to_dict",
    "polaris_task_job",
    "run_config_for",
]
