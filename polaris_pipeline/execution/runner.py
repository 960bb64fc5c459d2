"""Carrying one lease down the data path: start, execute, finish.

Start: ``start.py``; execute (fence, handler in the attempt's span and events, end:
``attempt_end.py``); finish a table after its children: ``table_finish.py``. Holders:
``holder.py``; contexts: ``contexts.py``; children and sweeps: ``sweep.py``; dry run:
``dry_run.py``. The CLI sweep and every Dagster run use this one ``Runner``.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.errors import (
    LeaseLost,
    PayloadError,
    PolarisPipelineError,
    TableRestored,
    is_permanent,
    one_line,
)
from polaris_pipeline.execution.attempt_end import AttemptEnds
from polaris_pipeline.execution.attempt_record import AttemptRecords
from polaris_pipeline.execution.contexts import TaskContexts
from polaris_pipeline.execution.holder import Holder, make_executor_id
from polaris_pipeline.execution.observer import AttemptObserver
from polaris_pipeline.execution.outcome import ProgressFn, Status, TableFinish, TaskOutcome
from polaris_pipeline.execution.start import StartAction, StartDecision, decide_start
from polaris_pipeline.execution.table_finish import TableFinisher
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import NewTask
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced import leftover_check
from polaris_pipeline.unreferenced.mode import UnreferencedMode

if TYPE_CHECKING:
    # Imported where a runner is built: it brings in pyiceberg's file IO, which
    # the code location's sensor ticks never need.
    from polaris_pipeline.storage.resolve import StorageResolver

log = logging.getLogger("polaris_pipeline.runner")


class Runner:
    """Executes leased tasks. One Runner is one holder: an executor id and its heartbeat."""

    def __init__(
        self,
        metastore: Metastore,
        config: StorageConfig | None = None,
        *,
        executor_id: str | None = None,
        run_id: str | None = None,
        resolver: StorageResolver | None = None,
        heartbeat_interval_s: float | None = None,
        progress: ProgressFn | None = None,
        tracer_provider: Any | None = None,
        deletion_record: str | None = None,
        releases: ReleaseProbe | None = None,
    ) -> None:
        """The policy is the metastore's, resolved once, for all the runner does.
        ``tracer_provider``: else the global one (no-op without OpenTelemetry). ``deletion_record``:
        the fsspec prefix of ``storage/deletion_record.py``'s records (static storage config);
        None: no record. ``releases``: the run's probe, when its steps share one; else the
        runner's own.
        """
        self.metastore = metastore
        config = config or StorageConfig()
        if resolver is None:
            from polaris_pipeline.storage.resolve import StorageResolver

            resolver = StorageResolver(config)
        # Beat within the shortest lease of any realm (realms may override the timeout).
        interval = heartbeat_interval_s or metastore.policy.shortest_lease_timeout_ms / 5000
        self.holder = Holder(metastore, executor_id or make_executor_id(), interval)
        records = AttemptRecords(deletion_record, resolver)
        self.contexts = TaskContexts(
            metastore,
            config,
            resolver,
            holder=self.holder,
            records=records,
            run_id=run_id,
            progress=progress,
            releases=releases,
        )
        self.observer = AttemptObserver(
            metastore,
            write_task_events=metastore.policy.task_events,
            tracer_provider=tracer_provider,
            releases=self.contexts.releases,
        )
        self._ends = AttemptEnds(metastore, records, run_id)
        self.table_finisher = TableFinisher(self.contexts, self._ends)

    @property
    def executor_id(self) -> str:
        return self.holder.executor_id

    def close(self) -> None:
        self.holder.stop()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- leases

    def lease(self, limit: int, realms: Iterable[str] | None = None) -> list[Lease]:
        leases = self.metastore.lease_available(self.executor_id, limit, realms)
        for realm in {lease.realm_id for lease in leases}:
            self.holder.watch(realm)
        return leases

    def start(
        self, realm_id: str, task_id: int, *, operator: bool = False, may_adopt: bool = True
    ) -> StartDecision:
        """Lease, adopt or refuse one named task as its work starts (``execution/start.py``).

        ``operator``: the start is an operator's deliberate act (a manual run, a
        re-execution), so a backing-off or dead task is retried now.
        """
        decision = decide_start(
            self.metastore,
            self.executor_id,
            realm_id,
            task_id,
            operator=operator,
            may_adopt=may_adopt,
        )
        if decision.lease is not None:
            self.holder.watch(realm_id)
        return decision

    def resume(
        self, lease: Lease, *, operator: bool = False, may_adopt: bool = True
    ) -> StartDecision:
        """Carry on with ``lease``, handed over by an earlier step (a table's child): the same
        attempt continues while it still holds its task; otherwise the task is ``start``ed anew.
        """
        if may_adopt and lease.executor_id == self.executor_id:
            task = self.metastore.get_task(lease.realm_id, lease.task_id)
            if task is not None and self.metastore.holds(lease):
                self.holder.watch(lease.realm_id)
                message = (
                    f"task {task.label}: kept the lease its parent created (attempt "
                    f"{lease.attempt}); the same attempt continues"
                )
                return StartDecision(StartAction.ADOPTED, message, lease, task)
        return self.start(lease.realm_id, lease.task_id, operator=operator, may_adopt=may_adopt)

    def record_failure(self, lease: Lease, error: str) -> TaskOutcome:
        """Record a failure found before the cleanup could start (a configuration error)."""
        task = self.metastore.get_task(lease.realm_id, lease.task_id)
        if task is None:
            return TaskOutcome(lease, Status.DONE, lease.task_type_code)
        return self._ends.fail(lease, task, error)

    # ---------------------------------------------------------------- execute

    def execute(
        self, lease: Lease, *, record_failure: bool = True, decoded: DecodedTask | None = None
    ) -> TaskOutcome:
        """Run one leased task to an outcome, which is written back to its row.

        ``record_failure=False``: a transient failure is returned unwritten and the lease kept,
        for a Dagster op's RetryPolicy; permanent ones are always recorded. ``decoded``: the task
        as its start leased it; else the row is read and decoded here, once, and the outcome
        carries it (``TaskOutcome.task``).
        """
        if lease.executor_id != self.executor_id:
            raise ValueError("a lease granted to another executor is not this runner's to execute")
        self.holder.watch(lease.realm_id)
        given = decoded is not None and (decoded.row.realm_id, decoded.row.id) == (
            lease.realm_id,
            lease.task_id,
        )
        task = decoded if given else self.contexts.read(lease)
        if task is None:
            # Finished by someone else after we leased it; success by Polaris's rules.
            return TaskOutcome(lease, Status.DONE, lease.task_type_code)
        if not self.metastore.holds(lease):
            lost = self._ends.lost(lease, task.row.task_type_code, "before it started")
            return lost.evolve(started=False, task=task)
        # The attempt proper: inside its span, between its Polaris events (when enabled).
        outcome = self.observer.observe(
            lease,
            task.row.task_type_code,
            self.executor_id,
            lambda: self._attempt(lease, task, record_failure),
        )
        # Its row vanished while held: what is left under its location is said, not lost.
        return leftover_check.after_attempt(self.contexts, outcome.evolve(task=task))

    def _attempt(self, lease: Lease, decoded: DecodedTask, record_failure: bool) -> TaskOutcome:
        task = decoded.row
        children: list[Lease] = []

        def create_children(kids: Iterable[NewTask]) -> list[NewTask]:
            batch = list(kids)
            children.extend(self.metastore.insert_tasks(batch, holder=lease))
            return batch

        ctx = self.contexts.cleanup_context(decoded, lease)
        ctx.create_children = create_children
        try:
            # The task's own storage_configuration_info, else its catalog's, may say
            # how to reach its storage; a malformed one is a PayloadError, recorded below.
            self.contexts.reach_storage(ctx)
            result = run_cleanup(ctx)
        except LeaseLost:
            return self._ends.lost(lease, task.task_type_code, "during the cleanup", children)
        except TableRestored as found:
            return self._ends.restored(lease, task, found, children)
        except PayloadError as exc:
            message = exc.for_task(task.label).args[0]
            return self._ends.fail(lease, task, message, children=children, permanent=True)
        except (PolarisPipelineError, OSError) as exc:
            return self._ends.fail(
                lease,
                task,
                one_line(exc),
                children=children,
                record=record_failure,
                permanent=is_permanent(exc),
            )
        except Exception as exc:  # a bug or an unexpected library error: record it, keep sweeping
            log.error("task %s: unexpected error\n%s", task.label, traceback.format_exc())
            return self._ends.fail(
                lease,
                task,
                f"unexpected {one_line(exc)}",
                children=children,
                record=record_failure,
            )
        if not result.ok:
            summary = result.error_summary() or "cleanup reported a failure"
            permanent = any(is_permanent(refusal) for refusal in result.refused)
            return self._ends.fail(
                lease,
                task,
                summary,
                result=result,
                children=children,
                permanent=permanent,
                record=record_failure or permanent,
            )
        return self.table_finisher.after_purge(
            lease, decoded, ctx, result, children, record_failure
        )

    # ------------------------------------------------------ a table's last stage

    def finish_table(
        self, finish: TableFinish, *, children_done: bool, result: CleanupResult | None = None
    ) -> TaskOutcome:
        """A table's last stage, once its children ran: the CLI's and the task job's one
        path (``TableFinisher.finish``)."""
        if finish.mode is UnreferencedMode.DELETE:
            # The row is still held by the table's lease, renewed while the phase lists and
            # deletes: the task job runs this in a step whose runner never executed the table.
            self.holder.watch(finish.lease.realm_id)
        return self.table_finisher.finish(finish, children_done=children_done, result=result)
