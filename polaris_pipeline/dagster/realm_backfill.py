"""``polaris_realm_backfill_job``: sweep one realm, on demand.

Not partitioned: a realm sweep takes what is available now. The realm is the op's config,
checked at start (a typo fails naming the realms that exist)::

    dagster job launch -w workspace.yaml -j polaris_realm_backfill_job \
      --tags '{"polaris/realm": "POLARIS"}' \
      --config-json '{"ops": {"sweep_realm": {"config": {"realm": "POLARIS"}}}}'

A run leases every orphaned task of the realm under ``polaris-pipeline:run:<run id>`` and
runs each, children included, as the CLI sweep does, under the sweeper's rules. Give the
``polaris/realm`` tag at launch so the per-realm run cap counts it while queued.
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
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from polaris_pipeline.dagster.contract import DEFAULT_RUN_TAGS, TAG_REALM
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.report.outcome_line import log_line
from polaris_pipeline.report.progress import ProgressSink
from polaris_pipeline.report.totals import OutcomeTotals, RunningTotals, status_word
from polaris_pipeline.tasks.formatting import realms_text
from polaris_pipeline.tasks.model import TaskState

JOB_NAME = "polaris_realm_backfill_job"
OP_NAME = "sweep_realm"
_SAMPLE_SIZE = 10


class RealmSweepConfig(Config):
    """The realm to sweep, and bounds; the defaults sweep until nothing is available."""

    realm: str = Field(
        description="The realm to sweep: one of the metastore's realms (checked at start)."
    )
    max_tasks: int | None = Field(
        default=None,
        description="Stop after this many tasks (children included); null: until none is left.",
    )
    batch_size: int = Field(default=32, description="Tasks leased per lease statement.")


def check_realm(realm: str, known: list[str], deployment: list[str] | None) -> None:
    """Refuse, before leasing, a realm the metastore lacks or this deployment does not sweep,
    listing the realms there are.
    """
    if deployment is not None and realm not in deployment:
        raise Failure(
            description=(
                f"realm {realm!r} is not swept by this deployment (it sweeps "
                f"{realms_text(deployment)}); nothing was leased"
            ),
            allow_retries=False,
        )
    if realm not in known:
        listed = ", ".join(repr(r) for r in known) if known else "none"
        raise Failure(
            description=(
                f"realm {realm!r} has no tasks in the metastore (is it mistyped? realms with "
                f"tasks: {listed}); nothing was leased"
            ),
            allow_retries=False,
        )


class _Tally:
    """A sweep's outcomes: the engine's totals, a sample of failures, the log.

    Each task's line is the outcome view's; ``progress`` (also the Runner's, for long
    deletes) logs the running total every few seconds.
    """

    def __init__(self, context: OpExecutionContext, realm: str) -> None:
        self.context = context
        self.realm = realm
        self.running = RunningTotals()
        self.failures: list[dict[str, str]] = []
        self.progress = ProgressSink(context.log.info)

    def __call__(self, outcome: TaskOutcome) -> None:
        self.running.add(outcome)
        failed = outcome.status in (Status.FAILED, Status.DEAD)
        if failed and len(self.failures) < _SAMPLE_SIZE:
            self.failures.append(
                {
                    "task_id": str(outcome.lease.task_id),
                    "status": outcome.status.value,
                    "error": outcome.error or "",
                }
            )
        log = self.context.log.debug if outcome.ok else self.context.log.warning
        log(log_line(outcome))
        self.progress.note(f"realm {self.realm}: {self.line()} so far")

    @property
    def totals(self) -> OutcomeTotals:
        return self.running.totals

    @property
    def total(self) -> int:
        """Tasks run, children included."""
        return sum(self.totals.by_status.values())

    def line(self) -> str:
        return f"{self.totals.tasks_text()}; {self.totals.line()}"

    def metadata(self, executor_id: str, left: Counter[TaskState]) -> dict[str, Any]:
        every = self.totals.by_status
        meta: dict[str, Any] = {
            "realm": self.realm,
            "executor": executor_id,
            "tasks run": self.total,
            # Children included, one number per status: the run's page shows them as columns.
            **{status_word(s.value): every[s.value] for s in Status},
            **self.totals.metadata(),
        }
        # What the sweep could not take, and why (same states as the backlog asset).
        for state in TaskState:
            meta[f"left {state.value}"] = left[state]
        if self.failures:
            meta["failures (sample)"] = MetadataValue.json(self.failures)
        return meta


@op(
    name=OP_NAME,
    description=(
        "Lease and run every available task of the configured realm, children included, "
        "under the run's own executor id."
    ),
    tags={"kind": "polaris"},
)
def sweep_realm(
    context: OpExecutionContext,
    config: RealmSweepConfig,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
) -> Output[dict[str, Any]]:
    realm = config.realm.strip()
    store = metastore.get_metastore()
    check_realm(realm, store.realms(), list(metastore.realms) if metastore.realms else None)
    # The run queue may already have counted it (a tag given at launch); this makes
    # every run of a realm findable by the tag, however it was launched.
    if context.run.tags.get(TAG_REALM) != realm:
        context.instance.add_run_tags(context.run_id, {TAG_REALM: realm})
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
        progress=tally.progress,
        deletion_record=storage.deletion_record,
    ) as runner:
        sweep_tasks(
            runner,
            [realm],
            batch_size=config.batch_size,
            max_tasks=config.max_tasks,
            on_outcome=tally,
        )
    elapsed = time.monotonic() - started
    left = store.count_by_state([realm]).get(realm, Counter())
    meta = tally.metadata(executor_id, left)
    meta["seconds"] = MetadataValue.float(round(elapsed, 3))
    left_text = ", ".join(f"{left[s]} {s.value}" for s in TaskState)
    context.log.info(f"realm {realm}, {elapsed:.1f} s: {tally.line()}; left: {left_text}")
    summary = {"realm": realm, "tasks": tally.total, **tally.totals.by_status}
    failed = tally.totals.failed
    if failed:
        first = tally.failures[0]["error"] if tally.failures else "see the step log"
        raise Failure(
            description=(
                f"{failed} of {tally.total} task(s) in realm {realm} failed and were "
                f"recorded in their rows (backoff or dead-letter); first: {first}"
            ),
            metadata=meta,
            allow_retries=False,
        )
    return Output(summary, metadata=meta)


@job(
    name=JOB_NAME,
    description=(
        "Sweep one realm now (ops.sweep_realm.config.realm, checked against the "
        "metastore's realms): every available task of the realm and its children, in one run."
    ),
    tags=DEFAULT_RUN_TAGS,
    executor_def=in_process_executor,
)
def polaris_realm_backfill_job() -> None:
    sweep_realm()
