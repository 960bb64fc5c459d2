"""``polaris_realm_backfill_job``: sweep one realm, on demand, as a partitioned job.

The job is partitioned by the realms (``polaris_realms``, kept up to date by the
sweeper sensor), so an operator can launch it for one realm or many from the
UI (a backfill: one run per realm) or from the command line::

    dagster job backfill -w workspace.yaml -j polaris_realm_backfill_job --partitions POLARIS

A run leases every orphaned task of its realm under its own executor id
(``polaris-pipeline:run:<run id>``) and runs each with the engine's ``Runner``,
children included, exactly as the CLI sweep does; the outcomes become the
step's metadata. The sweeper's rules hold: tasks leased by someone else,
backing off, dead-lettered or within the grace period are left alone. Runs
carry the ``polaris/realm`` tag, so the per-realm run cap of the run queue
counts them with the realm's task runs.
"""

import time
from collections import Counter
from typing import Any

from dagster import (
    Config,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    PartitionedConfig,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from polaris_pipeline.dagster.partitions import realm_partitions
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.task_job import DEFAULT_RUN_TAGS, TAG_REALM, task_type_name
from polaris_pipeline.runner import Runner, Status, TaskOutcome
from polaris_pipeline.tasks.model import TaskState

JOB_NAME = "polaris_realm_backfill_job"
OP_NAME = "sweep_realm"
_PROGRESS_LOG_INTERVAL_S = 10.0
_SAMPLE_SIZE = 10
# Batch children's names embed their file list: log lines show this much of a name.
_NAME_IN_LOG = 60


class RealmSweepConfig(Config):
    """Bounds of one realm sweep; the defaults sweep until nothing is available."""

    max_tasks: int | None = Field(
        default=None,
        description="Stop after this many tasks (children included); null: until none is left.",
    )
    batch_size: int = Field(default=32, description="Tasks leased per lease statement.")


def realm_tags(realm: str) -> dict[str, str]:
    """Tags of a realm's backfill run: the run queue caps runs per ``polaris/realm``."""
    return {TAG_REALM: realm}


def _run_config_for_realm(realm: str) -> dict[str, Any]:
    # The realm is the run's partition key; the op config keeps its defaults.
    return {}


class _Tally:
    """Outcomes of a sweep, as counters, samples and periodic log lines."""

    def __init__(self, context: OpExecutionContext, realm: str) -> None:
        self.context = context
        self.realm = realm
        self.status: Counter[str] = Counter()
        self.deleted = 0
        self.missing = 0
        self.bytes_freed = 0
        self.bytes_unknown = False
        self.refused = 0
        self.children = 0
        self.failures: list[dict[str, str]] = []
        self._last_log = time.monotonic()

    def __call__(self, outcome: TaskOutcome) -> None:
        self.status[outcome.status.value] += 1
        self.children += len(outcome.children)
        result = outcome.result
        if result is not None:
            self.deleted += result.deleted
            self.missing += result.missing
            self.refused += len(result.refused)
            if result.bytes_freed is None:
                self.bytes_unknown = True
            else:
                self.bytes_freed += result.bytes_freed
        lease = outcome.lease
        name = lease.name if len(lease.name) <= _NAME_IN_LOG else lease.name[:_NAME_IN_LOG] + "…"
        label = f"{lease.realm_id}/{lease.task_id} {name!r} ({task_type_name(outcome.task_type)})"
        if outcome.status in (Status.FAILED, Status.DEAD):
            if len(self.failures) < _SAMPLE_SIZE:
                self.failures.append(
                    {
                        "task_id": str(outcome.lease.task_id),
                        "status": outcome.status.value,
                        "error": outcome.error or "",
                    }
                )
            self.context.log.warning(f"task {label} {outcome.status.value}: {outcome.error}")
        elif outcome.status is Status.LEASE_LOST:
            self.context.log.warning(f"task {label}: {outcome.error}")
        else:
            self.context.log.debug(f"task {label} done")
        now = time.monotonic()
        if now - self._last_log >= _PROGRESS_LOG_INTERVAL_S:
            self._last_log = now
            self.context.log.info(f"realm {self.realm}: {self.line()} so far")

    @property
    def total(self) -> int:
        return sum(self.status.values())

    @property
    def failed(self) -> int:
        return self.status[Status.FAILED.value] + self.status[Status.DEAD.value]

    def line(self) -> str:
        return (
            f"{self.total} task(s) run: {self.status[Status.DONE.value]} done, "
            f"{self.status[Status.FAILED.value]} failed (backing off), "
            f"{self.status[Status.DEAD.value]} dead-lettered, "
            f"{self.status[Status.LEASE_LOST.value]} lease lost; "
            f"{self.deleted} file(s) deleted"
        )

    def metadata(self, executor_id: str, left: Counter[TaskState]) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "realm": self.realm,
            "executor": executor_id,
            "tasks run": self.total,
            "done": self.status[Status.DONE.value],
            "failed": self.status[Status.FAILED.value],
            "dead": self.status[Status.DEAD.value],
            "lease lost": self.status[Status.LEASE_LOST.value],
            "child tasks": self.children,
            "files deleted": self.deleted,
            "files already gone": self.missing,
            "bytes freed": MetadataValue.int(self.bytes_freed),
            "refused paths": self.refused,
        }
        if self.bytes_unknown:
            meta["note"] = "some storage did not report sizes: bytes freed is a lower bound"
        # What the sweep could not take, and why (same states as the backlog asset).
        for state in TaskState:
            meta[f"left {state.value}"] = left[state]
        if self.failures:
            meta["failures (sample)"] = MetadataValue.json(self.failures)
        return meta


@op(
    name=OP_NAME,
    description=(
        "Lease and run every available task of the run's realm (the partition), children "
        "included, under the run's own executor id."
    ),
    tags={"kind": "polaris"},
)
def sweep_realm(
    context: OpExecutionContext,
    config: RealmSweepConfig,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
) -> Output[dict[str, Any]]:
    realm = context.partition_key
    if metastore.realms is not None and realm not in metastore.realms:
        raise Failure(
            description=(
                f"realm {realm!r} is not swept by this deployment (its realms: "
                f"{', '.join(metastore.realms)}); nothing was leased"
            ),
            allow_retries=False,
        )
    store = metastore.get_metastore()
    executor_id = metastore.run_executor_id(context.run_id)
    tally = _Tally(context, realm)
    context.log.info(f"sweeping realm {realm} of {metastore.display_url} as {executor_id}")
    started = time.monotonic()
    with Runner(
        store,
        storage.get_config(),
        executor_id=executor_id,
        run_id=context.run_id,
        resolver=storage.get_resolver(),
    ) as runner:
        runner.sweep(
            [realm], batch_size=config.batch_size, max_tasks=config.max_tasks, on_outcome=tally
        )
    elapsed = time.monotonic() - started
    left = store.count_by_state([realm]).get(realm, Counter())
    meta = tally.metadata(executor_id, left)
    meta["seconds"] = MetadataValue.float(round(elapsed, 3))
    left_text = ", ".join(f"{left[s]} {s.value}" for s in TaskState)
    context.log.info(f"realm {realm}: {tally.line()} in {elapsed:.1f} s; left: {left_text}")
    summary = {
        "realm": realm,
        "tasks": tally.total,
        **{k: v for k, v in tally.status.items()},
    }
    if tally.failed:
        first = tally.failures[0]["error"] if tally.failures else "see the step log"
        raise Failure(
            description=(
                f"{tally.failed} of {tally.total} task(s) in realm {realm} failed and were "
                f"recorded in their rows (backoff or dead-letter); first: {first}"
            ),
            metadata=meta,
            allow_retries=False,
        )
    return Output(summary, metadata=meta)


@job(
    name=JOB_NAME,
    description=(
        "Sweep one realm (the partition) now: every orphaned task of the realm and its "
        "children, in one run. Launch it for one realm or a backfill over many."
    ),
    config=PartitionedConfig(
        partitions_def=realm_partitions,
        run_config_for_partition_key_fn=_run_config_for_realm,
        tags_for_partition_key_fn=realm_tags,
    ),
    tags=DEFAULT_RUN_TAGS,
    executor_def=in_process_executor,
)
def polaris_realm_backfill_job() -> None:
    sweep_realm()


__all__ = [
    "JOB_NAME",
    "OP_NAME",
    "RealmSweepConfig",
    "polaris_realm_backfill_job",
    "realm_tags",
    "sweep_realm",
]
