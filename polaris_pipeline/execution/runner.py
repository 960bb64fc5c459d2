"""Carrying one lease down the data path: load, fence, clean up, write the outcome
(``attempt_end.py``); then a table's children, stage by stage, and its last stage.

The CLI sweep and every Dagster run use this same ``Runner``; Dagster adds
scheduling, UI and retries around it, never a second implementation.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult, CleanupTally
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.cleanup.stages import CHILD_STAGES, ChildStage, Staged, leases_in_stages
from polaris_pipeline.errors import (
    LeaseLost,
    PayloadError,
    PolarisPipelineError,
    TableRestored,
    is_permanent,
    one_line,
)
from polaris_pipeline.execution.attempt_end import AttemptEnds
from polaris_pipeline.execution.attempt_record import AttemptRecords, RecordStatus
from polaris_pipeline.execution.fencing import LeaseDeadlines
from polaris_pipeline.execution.heartbeat import Heartbeat
from polaris_pipeline.execution.observer import AttemptObserver
from polaris_pipeline.execution.outcome import ProgressFn, Status, TableFinish, TaskOutcome
from polaris_pipeline.execution.start import StartAction, StartDecision, decide_start
from polaris_pipeline.execution.task_storage import task_storage
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.settings.metastore import DEFAULT_EXECUTOR_PREFIX
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import NewTask, TaskRow, TaskState
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.tasks.release import TaskEvents
from polaris_pipeline.unreferenced import leftover_check
from polaris_pipeline.unreferenced.mode import UnreferencedMode
from polaris_pipeline.unreferenced.phase import mode_for, phase_entity, run_phase

if TYPE_CHECKING:
    # Imported where a runner is built: it brings in pyiceberg's file IO, which
    # the code location's sensor ticks never need.
    from polaris_pipeline.storage.resolve import StorageResolver

log = logging.getLogger("polaris_pipeline.runner")


def make_executor_id(kind: str = "sweep", prefix: str = DEFAULT_EXECUTOR_PREFIX) -> str:
    """An executor id unique to this holder: the lease renewals and fencing depend on it."""
    return f"{prefix}:{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def child_stages(outcome: TaskOutcome, plan: Sequence[ChildStage] = CHILD_STAGES) -> Staged[Lease]:
    """The children an attempt created, in the stages its handler put them in."""
    staged = outcome.result.child_stages if outcome.result is not None else []
    return leases_in_stages(staged, outcome.children, plan)


class Runner:
    """Executes leased tasks. One Runner is one executor id and one heartbeat."""

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
        write_task_events: TaskEvents | None = None,
        tracer_provider: Any | None = None,
        unreferenced: UnreferencedMode | str | None = None,
        deletion_record: str | None = None,
    ) -> None:
        """``unreferenced``: what a dropped table's run does, last, with the files its
        metadata no longer names (``unreferenced/phase.py``): the metastore
        policy's mode unless given here; realms' overrides in the policy beat either.
        ``write_task_events``: write Polaris's BEFORE/AFTER_ATTEMPT_TASK rows to its
        ``events`` table (schema v3+) where the realm's release writes them (``"always"``:
        whatever the release); the metastore policy's setting unless given here.
        ``tracer_provider``: OpenTelemetry's, else the global one (spans are no-ops
        when none is configured or OpenTelemetry is not installed).
        ``deletion_record``: an fsspec URI prefix under which every attempt that
        deletes anything writes what it deleted (``storage/deletion_record.py``),
        reached through the static storage config; None: no record."""
        self.metastore = metastore
        # The schema version and each realm's Polaris release, read once per Runner (one
        # sweep or run): they say which Polaris reads the rows we write.
        self.releases = ReleaseProbe(metastore)
        self.observer = AttemptObserver(
            metastore,
            write_task_events=(
                metastore.policy.task_events if write_task_events is None else write_task_events
            ),
            tracer_provider=tracer_provider,
            releases=self.releases,
        )
        self.config = config or StorageConfig()
        if resolver is None:
            from polaris_pipeline.storage.resolve import StorageResolver

            resolver = StorageResolver(self.config)
        self.resolver = resolver
        self.executor_id = executor_id or make_executor_id()
        self.run_id = run_id
        self.progress = progress
        self.deletion_record = deletion_record
        self._records = AttemptRecords(deletion_record, resolver)
        self._ends = AttemptEnds(metastore, self._records, run_id)
        self.unreferenced = (
            metastore.policy.unreferenced
            if unreferenced is None
            else UnreferencedMode.parse(unreferenced)
        )
        # Beat within the shortest lease of any realm (realms may override the timeout).
        interval = heartbeat_interval_s or metastore.policy.shortest_lease_timeout_ms / 5000
        self._heartbeat_interval_s = interval
        self.heartbeat = Heartbeat(metastore, self.executor_id, interval)
        self._deadlines = LeaseDeadlines(metastore)

    def close(self) -> None:
        self.heartbeat.stop()

    def schema_version(self) -> int | None:
        """The metastore's Polaris schema version (None without a version row), cached."""
        return self.releases.schema_version()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- leases

    def lease(self, limit: int, realms: Iterable[str] | None = None) -> list[Lease]:
        leases = self.metastore.lease_available(self.executor_id, limit, realms)
        for realm in {lease.realm_id for lease in leases}:
            self.heartbeat.watch(realm)
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
            self.heartbeat.watch(realm_id)
        return decision

    def resume(
        self, lease: Lease, *, operator: bool = False, may_adopt: bool = True
    ) -> StartDecision:
        """Carry on with ``lease``, handed over by an earlier step (a table's child).

        The lease the table's attempt created is kept, not derived again: when it
        still holds its task, the same attempt continues under it. Otherwise (it
        lapsed, or an earlier try finished the task) the task is started as any
        other (``start``).
        """
        if may_adopt and lease.executor_id == self.executor_id:
            task = self.metastore.get_task(lease.realm_id, lease.task_id)
            if task is not None and self.metastore.holds(lease):
                self.heartbeat.watch(lease.realm_id)
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

        With ``record_failure=False`` a transient failure is returned without
        being written, and the lease stays held, so that the caller (a Dagster
        op with a RetryPolicy) can retry within the same lease. Permanent
        failures are always recorded. ``decoded``: the task as its start leased it
        (``StartDecision.decoded``), so that it is not read and decoded again.
        Otherwise its row is read and decoded here, once: the outcome carries that
        decoding (``TaskOutcome.task``) to whatever reads it.
        """
        if lease.executor_id != self.executor_id:
            raise ValueError("a lease granted to another executor is not this runner's to execute")
        self.heartbeat.watch(lease.realm_id)
        given = decoded is not None and (decoded.row.realm_id, decoded.row.id) == (
            lease.realm_id,
            lease.task_id,
        )
        task = decoded if given else self._read(lease)
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
        return leftover_check.after_attempt(self, outcome.evolve(task=task))

    def _attempt(self, lease: Lease, decoded: DecodedTask, record_failure: bool) -> TaskOutcome:
        task = decoded.row
        children: list[Lease] = []

        def create_children(kids: Iterable[NewTask]) -> list[NewTask]:
            batch = list(kids)
            children.extend(self.metastore.insert_tasks(batch, holder=lease))
            return batch

        ctx = self.cleanup_context(decoded, lease)
        ctx.create_children = create_children
        try:
            # The task's own storage_configuration_info, else its catalog's, may say
            # how to reach its storage; a malformed one is a PayloadError, recorded below.
            self.reach_storage(ctx)
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
        mode = self.unreferenced_mode(task.realm_id)
        entity = phase_entity(mode, decoded, result)
        if entity is not None and children:
            # The phase runs last, in the table's last stage (finish_table), once its
            # children are done.
            finish = TableFinish(lease, mode, decoded)
            if mode is UnreferencedMode.DELETE:
                # The row stays held until then. This attempt's own deletes end here;
                # the phase writes a record of its own.
                error = self._records.close(lease, RecordStatus.AWAITING_CHILDREN, result=result)
                if error is not None:
                    return self._ends.fail(lease, task, error, result=result, children=children)
                return TaskOutcome(
                    lease,
                    Status.DONE,
                    task.task_type_code,
                    result=result.freeze(),
                    children=tuple(children),
                    finish=finish,
                )
            # A report deletes nothing: the row completes as ever, the report comes last.
            done = self._ends.complete(lease, task, result, children)
            return done.evolve(finish=finish) if done.ok else done
        if entity is not None:
            failed = self._unreferenced(lease, task, ctx, entity, result, record_failure, mode)
            if failed is not None:
                return failed
        return self._ends.complete(lease, task, result, children)

    def unreferenced_mode(self, realm_id: str) -> UnreferencedMode:
        """The unreferenced mode ``realm_id`` runs under (its override, else the runner's)."""
        return mode_for(self.metastore.policy, realm_id, self.unreferenced)

    def _unreferenced(
        self,
        lease: Lease,
        task: TaskRow,
        ctx: CleanupContext,
        entity: Any,
        result: CleanupTally,
        record_failure: bool,
        mode: UnreferencedMode,
    ) -> TaskOutcome | None:
        """Run the table's unreferenced phase; the failed outcome, or None to complete."""
        try:
            error = run_phase(ctx, entity, mode, self.metastore, self.schema_version(), result)
        except LeaseLost:
            return self._ends.lost(lease, task.task_type_code, "during its unreferenced files")
        if error is None or mode is not UnreferencedMode.DELETE:
            return None  # a report that failed says so in itself; it changes nothing
        # The referenced purge stays done; the retry finds the metadata gone and
        # goes straight to this phase.
        return self._ends.fail(lease, task, error, result=result, record=record_failure)

    # ------------------------------------------------------ a table's last stage

    def finish_table(
        self,
        finish: TableFinish,
        *,
        children_done: bool,
        result: CleanupResult | None = None,
    ) -> TaskOutcome:
        """A table's last stage, once its children ran: the CLI's and the task job's one path.

        ``delete``: with every child done, its unreferenced phase, then its row is
        completed; otherwise the row is failed (recorded, retried after a backoff)
        without the phase: a retry plans again from what is left. ``report``: its
        row was completed by its attempt; the report is made from the task it read.
        ``result``: the attempt's, which the phase adds to; else the phase's alone.
        The task is the one the attempt decoded (``finish.task``), never decoded again
        here: in ``delete`` mode the row is re-read (still held?) and keeps that decoding
        (``DecodedTask.reread``).
        """
        # The phase adds to a tally of its own: the attempt's outcome keeps its result.
        tally = result.thaw() if result is not None else CleanupTally.start()
        lease, held = finish.lease, finish.task
        task_type = held.row.task_type_code if held is not None else lease.task_type_code
        report = finish.mode is UnreferencedMode.REPORT
        task = held if report else self._read(lease, held)
        if task is None or report:
            if task is not None and children_done:
                self._phase(lease, task, tally, UnreferencedMode.REPORT)
                # A report deletes nothing: its record was never opened, and goes.
                self._records.close(lease, RecordStatus.DONE, result=tally)
            done = tally.freeze()
            outcome = TaskOutcome(lease, Status.DONE, task_type, result=done, task=held)
            if task is None:  # vanished while its children ran: what is left is said
                return leftover_check.after_table_vanished(self, outcome)
            return outcome
        failed: TaskOutcome | None
        if not children_done:
            error = "unreferenced files not looked at: child task(s) of this table not done"
            failed = self._ends.fail(lease, task.row, error, result=tally)
        else:
            failed = self._phase(lease, task, tally, self.unreferenced_mode(task.row.realm_id))
        final = failed or self._ends.complete(lease, task.row, tally)
        return final.evolve(task=held or task)

    def _phase(
        self, lease: Lease, task: DecodedTask, result: CleanupTally, mode: UnreferencedMode
    ) -> TaskOutcome | None:
        entity = phase_entity(mode, task, result)
        if entity is None:
            return None
        ctx = self.cleanup_context(task, lease)
        try:
            self.reach_storage(ctx)
        except (PolarisPipelineError, OSError) as exc:
            if mode is not UnreferencedMode.DELETE:
                result.notes.append(f"unreferenced files not reported: {one_line(exc)}")
                return None
            return self._ends.fail(lease, task.row, one_line(exc), result=result)
        return self._unreferenced(lease, task.row, ctx, entity, result, True, mode)

    # ----------------------------------------------------------- the context

    def _read(self, lease: Lease, held: DecodedTask | None = None) -> DecodedTask | None:
        """The leased task's row, read and decoded (None: gone); ``held``: its decoding
        already made, kept when still valid (``DecodedTask.reread``)."""
        row = self.metastore.get_task(lease.realm_id, lease.task_id)
        if row is None:
            return None
        return held.reread(row) if held is not None else DecodedTask.from_row(row)

    def reach_storage(self, ctx: CleanupContext) -> None:
        """Give ``ctx`` the resolver for its task: the task's storage configuration,
        else its catalog's, looked up (``execution/task_storage.py``).

        Raises PayloadError when the configuration is malformed, or the
        ``PolarisPipelineError``/``OSError`` of a storage not reached: each caller
        says what that means for its work (a failed attempt, a note in a report).
        """
        storage = task_storage(ctx.decoded, self.metastore)
        ctx.resolver = self.resolver.for_task(ctx.task, storage.properties)
        ctx.catalog_storage_info = storage.from_catalog

    def cleanup_context(self, task: DecodedTask, lease: Lease | None = None) -> CleanupContext:
        """The handlers' context for ``task``, as decoded already (never decoded again).

        With ``lease``: the attempt's, fenced by it, with its deletion record and
        progress. Without: a dry run's, which deletes nothing (a plan, the leftover
        check). Its storage is reached by ``reach_storage``, apart, so that each
        caller handles a storage not reached its own way.
        """
        ctx = CleanupContext(
            task=task.row,
            decoded_task=task,
            resolver=self.resolver,
            config=self.config,
            dry_run=lease is None,
            new_task_id=new_entity_id,
            release=self.releases.release(task.row.realm_id),
            metadata_batch_size=self.metastore.policy.for_realm(
                task.row.realm_id
            ).metadata_batch_size,
            # Every handler's shared-location guard asks the whole metastore.
            live=LiveLocations(self.metastore.engine, self.schema_version()),
        )
        if lease is not None:
            ctx.record = self._records.open(task.row, lease, self.executor_id, self.run_id)
            ctx.fence = partial(self._deadlines.fence, lease)
            ctx.still_held = partial(self._deadlines.still_held, lease)
            ctx.progress = self._progress_for(lease)
        return ctx

    def _progress_for(self, lease: Lease) -> Callable[[int, int, str], None] | None:
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total, what: progress(lease, done, total, what)

    # ------------------------------------------------------------------ sweep

    def execute_tree(
        self, lease: Lease, on_outcome: Callable[[TaskOutcome], None] | None = None
    ) -> list[TaskOutcome]:
        """Execute a task, then the children it created, stage by stage, then (a table
        waiting for them) its last stage, ``finish_table``.

        ``on_outcome`` is told each outcome once it is final, a parent before its
        children: a table's children are told after its last stage.
        """
        root = self.execute(lease)
        tell = None if root.finish is not None else on_outcome
        if tell is not None:
            tell(root)
        # One at a time, so each stage is done before the next one starts.
        rest = [
            outcome
            for _, stage in child_stages(root)
            for child in stage
            for outcome in self.execute_tree(child, tell)
        ]
        if root.finish is None:
            return [root, *rest]
        done = all(outcome.ok for outcome in rest)
        finished = self.finish_table(root.finish, children_done=done, result=root.result)
        outcomes = [finished.evolve(children=root.children), *rest]
        if on_outcome is not None:
            for outcome in outcomes:
                on_outcome(outcome)
        return outcomes

    def sweep(
        self,
        realms: Iterable[str] | None = None,
        *,
        batch_size: int = 32,
        max_tasks: int | None = None,
        on_outcome: Callable[[TaskOutcome], None] | None = None,
    ) -> list[TaskOutcome]:
        """Lease and run every available task (and its children) until none remains."""
        realm_list = list(realms) if realms is not None else None
        outcomes: list[TaskOutcome] = []
        while max_tasks is None or len(outcomes) < max_tasks:
            limit = batch_size if max_tasks is None else min(batch_size, max_tasks - len(outcomes))
            leases = self.lease(limit, realm_list)
            if not leases:
                break
            try:
                for lease in leases:
                    outcomes += self.execute_tree(lease, on_outcome)
            except BaseException:
                # The batch is abandoned: stop renewing its leases so they lapse and
                # any sweeper (this one included, under a new id) can take them.
                self._new_executor()
                raise
        return outcomes

    def _new_executor(self) -> None:
        self.heartbeat.stop()
        self._deadlines.clear()
        self.executor_id = make_executor_id()
        self.heartbeat = Heartbeat(self.metastore, self.executor_id, self._heartbeat_interval_s)

    def plan(self, task: TaskRow | DecodedTask) -> CleanupResult:
        """Dry run of one task: what would be deleted and refused; nothing leased or changed."""
        decoded = DecodedTask.of(task)
        ctx = self.cleanup_context(decoded)
        self.reach_storage(ctx)
        result = run_cleanup(ctx)
        mode = self.unreferenced_mode(decoded.row.realm_id)
        entity = phase_entity(mode, decoded, result)
        if entity is not None:
            # What the referenced plan deletes is listed apart; an error is the plan's note.
            error = run_phase(ctx, entity, mode, self.metastore, self.schema_version(), result)
            if error is not None:
                result.notes.append(error)
        return result.freeze()

    def dry_run(
        self, realms: Iterable[str] | None = None
    ) -> list[tuple[DecodedTask, CleanupResult | str]]:
        """Each orphaned task, decoded once, with its plan (``plan``) or why it has none."""
        _, rows = self.metastore.tasks_with_state(realms)
        out: list[tuple[DecodedTask, CleanupResult | str]] = []
        for row, state in rows:
            if state is not TaskState.ORPHANED:
                continue
            task = DecodedTask.from_row(row)
            try:
                out.append((task, self.plan(task)))
            except PayloadError as exc:
                out.append((task, exc.for_task(task.label).args[0]))
            except (PolarisPipelineError, OSError) as exc:
                out.append((task, one_line(exc)))
        return out
