"""Carrying one lease down the data path: load, fence, clean up, write the outcome.

The CLI sweep and every Dagster run use this same ``Runner``; Dagster adds
scheduling, UI and retries around it, never a second implementation.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.cleanup.stages import CHILD_STAGES, ChildStage, Staged, leases_in_stages
from polaris_pipeline.errors import (
    LeaseLost,
    MetastoreError,
    PayloadError,
    PolarisPipelineError,
    StorageError,
    is_permanent,
    one_line,
)
from polaris_pipeline.execution import leftover_check
from polaris_pipeline.execution.observer import AttemptObserver
from polaris_pipeline.execution.outcome import ProgressFn, Status, TaskOutcome
from polaris_pipeline.execution.start import StartDecision, decide_start
from polaris_pipeline.execution.task_storage import task_storage
from polaris_pipeline.execution.unreferenced_phase import mode_for, phase_entity, run_phase
from polaris_pipeline.metastore import CompleteOutcome, FailOutcome, Metastore, new_entity_id
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.settings.metastore import DEFAULT_EXECUTOR_PREFIX
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.deletion_record import DeletionRecord, RecordHeader
from polaris_pipeline.tasks.model import NewTask, TaskRow, TaskState
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.tasks.release import TaskEvents
from polaris_pipeline.tasks.unreferenced_mode import UnreferencedMode

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


class Heartbeat:
    """Renews, in the background, every lease its executor holds in the given realms."""

    def __init__(self, metastore: Metastore, executor_id: str, interval_s: float) -> None:
        self._metastore = metastore
        self._executor_id = executor_id
        self._interval_s = interval_s
        self._realms: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    def watch(self, realm_id: str) -> None:
        with self._lock:
            self._realms.add(realm_id)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)
            self._thread.start()

    def beat(self) -> None:
        with self._lock:
            realms = sorted(self._realms)
        for realm in realms:
            try:
                self._metastore.renew_held_by(realm, self._executor_id)
            except MetastoreError as exc:
                # A missed beat is survivable: the lease lasts several intervals,
                # and the fencing check catches a lease that really lapsed.
                self.failures += 1
                log.warning("lease heartbeat failed: %s", exc)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


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
        write_task_events: TaskEvents = False,
        tracer_provider: Any | None = None,
        unreferenced: UnreferencedMode | str | None = None,
        deletion_record: str | None = None,
    ) -> None:
        """``unreferenced``: what a dropped table's run does, last, with the files its
        metadata no longer names (``execution/unreferenced_phase.py``): the metastore
        policy's mode unless given here; realms' overrides in the policy beat either.
        ``write_task_events``: write Polaris's BEFORE/AFTER_ATTEMPT_TASK rows to the
        events table where the realm's release writes them (``"always"``: whatever the
        release),
        ``events`` table (schema v3+), off by default as Polaris's own listener is.
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
            write_task_events=write_task_events,
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
        # (realm, task id) -> the open deletion record of its attempt (or phase).
        self._records: dict[tuple[str, int], DeletionRecord] = {}
        self.unreferenced = (
            metastore.policy.unreferenced
            if unreferenced is None
            else UnreferencedMode.parse(unreferenced)
        )
        # Beat within the shortest lease of any realm (realms may override the timeout).
        interval = heartbeat_interval_s or metastore.policy.shortest_lease_timeout_ms / 5000
        self._heartbeat_interval_s = interval
        self.heartbeat = Heartbeat(metastore, self.executor_id, interval)
        # (realm, task id) -> the elapsed-clock time until which the lease is guaranteed.
        self._deadlines: dict[tuple[str, int], float] = {}

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

    def record_failure(self, lease: Lease, error: str) -> TaskOutcome:
        """Record a failure found before the cleanup could start (a configuration error)."""
        task = self.metastore.get_task(lease.realm_id, lease.task_id)
        if task is None:
            return TaskOutcome(lease, Status.DONE, lease.task_type_code)
        return self._fail(lease, task, error)

    def fence(self, lease: Lease) -> None:
        """Raise LeaseLost unless ``lease`` still holds its task (database clock).

        Also notes until when the database guarantees the lease, so that
        ``still_held`` can be asked before every single delete for free.
        """
        remaining = self.metastore.held_for_ms(lease)
        if remaining is None:
            self._deadlines.pop((lease.realm_id, lease.task_id), None)
            raise LeaseLost(f"lease on {lease.label} (attempt {lease.attempt}) was lost")
        # Keep a margin: a delete started just before the deadline must end before it.
        usable_s = remaining / 1000 * 0.8
        self._deadlines[(lease.realm_id, lease.task_id)] = _elapsed_clock() + usable_s

    def still_held(self, lease: Lease) -> None:
        """Raise LeaseLost if the lease may have lapsed: fence again once the noted period ended."""
        deadline = self._deadlines.get((lease.realm_id, lease.task_id))
        if deadline is None or _elapsed_clock() >= deadline:
            self.fence(lease)

    # ---------------------------------------------------------------- execute

    def execute(self, lease: Lease, *, record_failure: bool = True) -> TaskOutcome:
        """Run one leased task to an outcome, which is written back to its row.

        With ``record_failure=False`` a transient failure is returned without
        being written, and the lease stays held, so that the caller (a Dagster
        op with a RetryPolicy) can retry within the same lease. Permanent
        failures are always recorded.
        """
        if lease.executor_id != self.executor_id:
            raise ValueError("a lease granted to another executor is not this runner's to execute")
        self.heartbeat.watch(lease.realm_id)
        task = self.metastore.get_task(lease.realm_id, lease.task_id)
        if task is None:
            # Finished by someone else after we leased it; success by Polaris's rules.
            return TaskOutcome(lease, Status.DONE, lease.task_type_code)
        if not self.metastore.holds(lease):
            lost = self._lost(lease, task.task_type_code, "before it started")
            lost.started, lost.row = False, task
            return lost
        # The attempt proper: inside its span, between its Polaris events (when enabled).
        outcome = self.observer.observe(
            lease,
            task.task_type_code,
            self.executor_id,
            lambda: self._attempt(lease, task, record_failure),
        )
        outcome.row = task
        # Its row vanished while held: what is left under its location is said, not lost.
        return leftover_check.after_attempt(self, outcome, task)

    def _attempt(self, lease: Lease, task: TaskRow, record_failure: bool) -> TaskOutcome:
        children: list[Lease] = []

        def create_children(kids: Iterable[NewTask]) -> list[NewTask]:
            batch = list(kids)
            children.extend(self.metastore.insert_tasks(batch, holder=lease))
            return batch

        ctx = self._context(task, lease)
        ctx.create_children = create_children
        try:
            # The task's own storage_configuration_info, else its catalog's, may say
            # how to reach its storage; a malformed one is a PayloadError, recorded below.
            self._reach_storage(ctx)
            result = run_cleanup(ctx)
        except LeaseLost:
            return self._lost(lease, task.task_type_code, "during the cleanup", children)
        except PayloadError as exc:
            message = exc.for_task(task.label).args[0]
            return self._fail(lease, task, message, children=children, permanent=True)
        except (PolarisPipelineError, OSError) as exc:
            return self._fail(
                lease,
                task,
                one_line(exc),
                children=children,
                record=record_failure,
                permanent=is_permanent(exc),
            )
        except Exception as exc:  # a bug or an unexpected library error: record it, keep sweeping
            log.error("task %s: unexpected error\n%s", task.label, traceback.format_exc())
            return self._fail(
                lease,
                task,
                f"unexpected {one_line(exc)}",
                children=children,
                record=record_failure,
            )
        if not result.ok:
            summary = result.error_summary() or "cleanup reported a failure"
            permanent = any(is_permanent(refusal) for refusal in result.refused)
            return self._fail(
                lease,
                task,
                summary,
                result=result,
                children=children,
                permanent=permanent,
                record=record_failure or permanent,
            )
        mode = self.unreferenced_mode(task.realm_id)
        entity = phase_entity(mode, task, result)
        if entity is not None and children and mode is UnreferencedMode.DELETE:
            # Completed by finish_table once its children are done: the phase runs last.
            # This attempt's own deletes end here; the phase writes a record of its own.
            error = self._close_record(lease, "deferred", result=result)
            if error is not None:
                return self._fail(lease, task, error, result=result, children=children)
            return TaskOutcome(
                lease,
                Status.DONE,
                task.task_type_code,
                result=result,
                children=children,
                unreferenced_after=mode.value,
            )
        if entity is not None and children:
            # A report deletes nothing: the row completes as ever, the report comes last.
            done = self._complete(lease, task, result, children)
            if done.ok:
                done.unreferenced_after = mode.value
            return done
        if entity is not None:
            failed = self._unreferenced(lease, task, ctx, entity, result, record_failure, mode)
            if failed is not None:
                return failed
        return self._complete(lease, task, result, children)

    def _complete(
        self, lease: Lease, task: TaskRow, result: CleanupResult, children: list[Lease]
    ) -> TaskOutcome:
        # The record is closed before the row goes: a completed task has a whole record.
        error = self._close_record(lease, "done", result=result)
        if error is not None:
            return self._fail(lease, task, error, result=result, children=children)
        completed = self.metastore.complete(lease)
        if completed is CompleteOutcome.LEASE_LOST:
            return self._lost(lease, task.task_type_code, "before its result was written", children)
        return TaskOutcome(
            lease, Status.DONE, task.task_type_code, result=result, children=children
        )

    def unreferenced_mode(self, realm_id: str) -> UnreferencedMode:
        """The unreferenced mode ``realm_id`` runs under (its override, else the runner's)."""
        return mode_for(self.metastore.policy, realm_id, self.unreferenced)

    def _unreferenced(
        self,
        lease: Lease,
        task: TaskRow,
        ctx: CleanupContext,
        entity: Any,
        result: CleanupResult,
        record_failure: bool,
        mode: UnreferencedMode,
    ) -> TaskOutcome | None:
        """Run the table's unreferenced phase; the failed outcome, or None to complete."""
        try:
            error = run_phase(ctx, entity, mode, self.metastore, self.schema_version(), result)
        except LeaseLost:
            return self._lost(lease, task.task_type_code, "during its unreferenced files")
        if error is None or mode is not UnreferencedMode.DELETE:
            return None  # a report that failed says so in itself; it changes nothing
        # The referenced purge stays done; the retry finds the metadata gone and
        # goes straight to this phase.
        return self._fail(lease, task, error, result=result, record=record_failure)

    def finish_table(self, outcome: TaskOutcome, *, children_done: bool) -> TaskOutcome:
        """Finish a table (``outcome.deferred``) once its children ran.

        ``delete``: with every child done, its unreferenced phase, then its row is
        completed; otherwise the row is failed (recorded, retried after a backoff)
        without the phase: a retry plans again from what is left. ``report``: its
        row was completed by its attempt; the report is made from the row it read.
        """
        lease, result = outcome.lease, outcome.result or CleanupResult()
        report = outcome.unreferenced_after == UnreferencedMode.REPORT.value
        task = outcome.row if report else self.metastore.get_task(lease.realm_id, lease.task_id)
        if task is None or report:
            if task is not None and children_done:
                self._phase(lease, task, result, UnreferencedMode.REPORT)
                # A report deletes nothing: its record was never opened, and goes.
                self._close_record(lease, "done", result=result)
            outcome.result = result
            if task is None:  # vanished while its children ran: what is left is said
                return leftover_check.after_table_vanished(self, outcome)
            return outcome
        failed: TaskOutcome | None
        if not children_done:
            error = "unreferenced files not looked at: child task(s) of this table not done"
            failed = self._fail(lease, task, error, result=result, children=outcome.children)
        else:
            failed = self._phase(lease, task, result, self.unreferenced_mode(task.realm_id))
        final = failed or self._complete(lease, task, result, outcome.children)
        final.children, final.row = outcome.children, outcome.row or task
        return final

    def _phase(
        self, lease: Lease, task: TaskRow, result: CleanupResult, mode: UnreferencedMode
    ) -> TaskOutcome | None:
        entity = phase_entity(mode, task, result)
        if entity is None:
            return None
        ctx = self._context(task, lease)
        try:
            self._reach_storage(ctx)
        except (PolarisPipelineError, OSError) as exc:
            if mode is not UnreferencedMode.DELETE:
                result.notes.append(f"unreferenced files not reported: {one_line(exc)}")
                return None
            return self._fail(lease, task, one_line(exc), result=result)
        return self._unreferenced(lease, task, ctx, entity, result, True, mode)

    def _reach_storage(self, ctx: CleanupContext) -> None:
        """Give ``ctx`` the resolver for its task: the task's storage configuration,
        else its catalog's, looked up (``execution/task_storage.py``)."""
        storage = task_storage(ctx.task, self.metastore)
        ctx.resolver = self.resolver.for_task(ctx.task, storage.properties)
        ctx.catalog_storage_info = storage.from_catalog

    def _context(self, task: TaskRow, lease: Lease | None = None) -> CleanupContext:
        """The handler's context for ``task``; without a lease, a dry run's."""
        ctx = CleanupContext(
            task=task,
            resolver=self.resolver,
            config=self.config,
            dry_run=lease is None,
            new_task_id=new_entity_id,
            release=self.releases.release(task.realm_id),
            metadata_batch_size=self.metastore.policy.for_realm(task.realm_id).metadata_batch_size,
            # Every handler's shared-location guard asks the whole metastore.
            live=LiveLocations(self.metastore.engine, self.schema_version()),
        )
        if lease is not None:
            ctx.record = self._open_record(task, lease)
            ctx.fence = partial(self.fence, lease)
            ctx.still_held = partial(self.still_held, lease)
            ctx.progress = self._progress_for(lease)
        return ctx

    def _open_record(self, task: TaskRow, lease: Lease) -> DeletionRecord | None:
        """The attempt's deletion record (written from its first delete), when one is kept."""
        if self.deletion_record is None:
            return None
        header = RecordHeader(
            realm_id=task.realm_id,
            task_id=task.id,
            task_name=task.name,
            task_type=_type_name(task),
            attempt=lease.attempt,
            executor_id=self.executor_id,
            run_id=self.run_id,
        )
        record = DeletionRecord(self.deletion_record, self.resolver, header)
        self._records[(lease.realm_id, lease.task_id)] = record
        return record

    def _close_record(
        self,
        lease: Lease,
        status: str,
        error: str | None = None,
        result: CleanupResult | None = None,
    ) -> str | None:
        """Close the attempt's record (refusals, then totals); the error when it cannot."""
        record = self._records.pop((lease.realm_id, lease.task_id), None)
        if record is None:
            return None
        try:
            if record.opened and result is not None and result.refused:
                record.add_refusals((r.path, r.reason) for r in result.refused)
            record.close(status, error)
        except StorageError as exc:
            return one_line(exc)
        return None

    def _fail(
        self,
        lease: Lease,
        task: TaskRow,
        error: str,
        *,
        result: CleanupResult | None = None,
        children: list[Lease] | None = None,
        permanent: bool = False,
        record: bool = True,
    ) -> TaskOutcome:
        kids = children or []
        closing = self._close_record(lease, "failed", error, result)
        if closing is not None:
            error = f"{error}; {closing}"
        if not record and not permanent:
            return TaskOutcome(
                lease,
                Status.FAILED,
                task.task_type_code,
                error=error,
                result=result,
                children=kids,
                recorded=False,
            )
        written = self.metastore.fail(lease, error, run_id=self.run_id, permanent=permanent)
        if written.outcome is FailOutcome.LEASE_LOST:
            return self._lost(lease, task.task_type_code, "before its failure was written", kids)
        if written.outcome is FailOutcome.ALREADY_GONE:
            return TaskOutcome(
                lease, Status.DONE, task.task_type_code, result=result, children=kids
            )
        status = Status.DEAD if written.outcome is FailOutcome.DEAD else Status.FAILED
        log.warning("task %s failed (attempt %d): %s", task.label, lease.attempt, error)
        return TaskOutcome(
            lease,
            status,
            task.task_type_code,
            error=error,
            result=result,
            children=kids,
            next_attempt_ms=written.next_attempt_ms,
            permanent=permanent,
        )

    def _lost(
        self, lease: Lease, task_type: str | None, when: str, children: list[Lease] | None = None
    ) -> TaskOutcome:
        message = (
            f"lease on {lease.label} (attempt {lease.attempt}) lost {when}; "
            "stopped, nothing recorded"
        )
        self._close_record(lease, "lease lost", message)
        log.warning(message)
        return TaskOutcome(
            lease, Status.LEASE_LOST, task_type, error=message, children=children or []
        )

    def _progress_for(self, lease: Lease) -> Callable[[int, int, str], None] | None:
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total, what: progress(lease, done, total, what)

    # ------------------------------------------------------------------ sweep

    def execute_tree(
        self, lease: Lease, on_outcome: Callable[[TaskOutcome], None] | None = None
    ) -> list[TaskOutcome]:
        """Execute a task and then the children it created, stage by stage."""
        outcomes: list[TaskOutcome] = []
        queue = [lease]
        told = 0  # outcomes handed to on_outcome, in order (a parent before its children)
        while queue:
            outcome = self.execute(queue.pop(0))
            outcomes.append(outcome)
            # One at a time, so each stage is done before the next one starts.
            queue = [child for _, stage in child_stages(outcome) for child in stage] + queue
            if on_outcome and not outcomes[0].deferred:
                for told_outcome in outcomes[told:]:
                    on_outcome(told_outcome)
                told = len(outcomes)
        if outcomes[0].deferred:
            # A table waits for its children, then its unreferenced phase: its line and
            # its children's are told once it is finished, the parent first.
            done = all(o.status is Status.DONE for o in outcomes[1:])
            outcomes[0] = self.finish_table(outcomes[0], children_done=done)
            for told_outcome in outcomes:
                if on_outcome:
                    on_outcome(told_outcome)
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

    def plan(self, task: TaskRow) -> CleanupResult:
        """Dry run of one task: what would be deleted and refused; nothing leased or changed."""
        ctx = self._context(task)
        self._reach_storage(ctx)
        result = run_cleanup(ctx)
        mode = self.unreferenced_mode(task.realm_id)
        entity = phase_entity(mode, task, result)
        if entity is not None:
            # What the referenced plan deletes is listed apart; an error is the plan's note.
            error = run_phase(ctx, entity, mode, self.metastore, self.schema_version(), result)
            if error is not None:
                result.notes.append(error)
        return result

    def dry_run(
        self, realms: Iterable[str] | None = None
    ) -> list[tuple[TaskRow, CleanupResult | str]]:
        _, rows = self.metastore.tasks_with_state(realms)
        out: list[tuple[TaskRow, CleanupResult | str]] = []
        for task, state in rows:
            if state is not TaskState.ORPHANED:
                continue
            try:
                out.append((task, self.plan(task)))
            except PayloadError as exc:
                out.append((task, exc.for_task(task.label).args[0]))
            except (PolarisPipelineError, OSError) as exc:
                out.append((task, one_line(exc)))
        return out


def _type_name(task: TaskRow) -> str | None:
    """The task's type by Polaris's name (``BATCH_FILE_CLEANUP``), else its raw code."""
    try:
        return task.task_type().name
    except (PayloadError, ValueError):
        return task.task_type_code


def _elapsed_clock() -> float:
    """Seconds on a clock that keeps running while the process or machine is suspended.

    CLOCK_BOOTTIME counts a VM pause or a SIGSTOP; the lease period on the
    database does too, so a resumed holder sees its deadline passed.
    """
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        return time.clock_gettime(boottime)
    return time.monotonic()
