"""Every state transition of a Polaris task, against PostgreSQL or SQLite.

Each transition is one compare-and-set on (realm_id, id, entity_version,
grant_records_version), as Polaris writes its own leases, so a live Polaris and any
number of sweepers can share the table. A holder is (executor id, attemptCount): every
grant increments attemptCount, which makes it a fencing token. What a transition writes
is ``transitions.py``; the statements are ``queries.py``; here: I/O and the CAS loop.
"""

from __future__ import annotations

import random
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, Executable
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from polaris_pipeline.errors import LeaseLost, MetastoreError
from polaris_pipeline.metastore import queries, transitions
from polaris_pipeline.metastore.connection import make_engine, resolve_url, safe_url, url_secrets
from polaris_pipeline.metastore.ddl import LATEST_SCHEMA_VERSION
from polaris_pipeline.metastore.queries import Query
from polaris_pipeline.metastore.rows import (
    after_write,
    decode_row,
    insert_values,
    inserted,
    raw_text,
)
from polaris_pipeline.metastore.schema import (
    create_schema,
    has_events_table,
    read_schema_version,
    require_schema,
)
from polaris_pipeline.metastore.transitions import (
    CompleteOutcome,
    DiscardOutcome,
    DiscardResult,
    FailureRecord,
    HolderCas,
)
from polaris_pipeline.storage.redact import redact
from polaris_pipeline.tasks.hold import (
    DropEventTimes,
    HoldView,
    drop_keys,
    parent_name_of,
    parent_names,
)
from polaris_pipeline.tasks.model import NewTask, TaskPolicy, TaskRow, TaskState, parse_properties
from polaris_pipeline.tasks.ref import Lease

_CAS_RETRIES = 20
# Values per IN list of a read: far below any driver's limit on bound parameters.
_IN_LIST_CHUNK = 500

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Metastore:
    """The Polaris metastore, addressed by a SQLAlchemy URL (default: $POLARIS_METASTORE_URL)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        policy: TaskPolicy | None = None,
        engine: Engine | None = None,
        guard_bound_s: float | None = None,
    ) -> None:
        self.url = resolve_url(url) if engine is None else engine.url
        self.policy = policy or TaskPolicy()
        # Each shared-location guard check's bound (None: this process's guard section).
        self.guard_bound_s = guard_bound_s
        self.engine = (
            engine
            if engine is not None
            else make_engine(
                self.url,
                # Half the lease: a frozen holder's locks are gone long before its lease.
                idle_in_transaction_timeout_ms=max(
                    1000, self.policy.shortest_lease_timeout_ms // 2
                ),
            )
        )
        self.dialect = self.engine.dialect.name
        # Whether the database has Polaris's events table (schema v3+), read once when a
        # hold needs its drop events: None until then.
        self._events_table: bool | None = None

    @property
    def display_url(self) -> str:
        return safe_url(self.url)

    def dispose(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ connections

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except DBAPIError as exc:
            if isinstance(exc, IntegrityError):
                raise
            raise MetastoreError(self._describe(exc)) from exc

    def _sql(self, query: Query[_P], /, *args: _P.args, **kwargs: _P.kwargs) -> Executable:
        """``query``'s statement for this database, built from the call's values."""
        return query.build(self.dialect, *args, **kwargs)

    def _describe(self, exc: SQLAlchemyError) -> str:
        orig = getattr(exc, "orig", None) or exc
        first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        # The driver may quote a password, from the userinfo or from the query.
        return f"metastore {self.display_url}: {redact(first, url_secrets(self.url))}"

    # ---------------------------------------------------------------- schema

    def init_schema(self, schema_version: int = LATEST_SCHEMA_VERSION) -> bool:
        """Create Polaris's tables of ``schema_version``; False when they already existed."""
        with self._begin() as conn:
            return create_schema(conn, schema_version)

    def check_schema(self) -> int | None:
        """Fail with a clear error unless the Polaris layout is there; return its version."""
        with self._begin() as conn:
            require_schema(conn, self.display_url)
            return read_schema_version(conn)

    # ----------------------------------------------------------------- reads

    def now_ms(self, conn: Connection | None = None) -> int:
        if conn is not None:
            return int(conn.execute(self._sql(queries.NOW)).scalar_one())
        with self._begin() as c:
            return self.now_ms(c)

    def realms(self) -> list[str]:
        """Realms that have at least one task."""
        with self._begin() as conn:
            return self._realms(conn)

    def _realms(self, conn: Connection) -> list[str]:
        return [row.realm_id for row in conn.execute(self._sql(queries.REALMS))]

    def list_tasks(
        self, realms: Iterable[str] | None = None, *, limit: int | None = None
    ) -> list[TaskRow]:
        with self._begin() as conn:
            return self._list(conn, realms, limit=limit)

    def _list(
        self, conn: Connection, realms: Iterable[str] | None, *, limit: int | None = None
    ) -> list[TaskRow]:
        return [decode_row(r) for r in conn.execute(self._sql(queries.LIST_TASKS, realms, limit))]

    def drop_events_table(self, conn: Connection | None = None) -> bool:
        """Whether a hold counts from Polaris's drop events here: a hold is set and the
        database has the events table (read once; an older schema has none)."""
        if not self.policy.holds_any:
            return False
        if self._events_table is None:
            if conn is None:
                with self._begin() as c:
                    return self.drop_events_table(c)
            self._events_table = has_events_table(conn)
        return self._events_table

    def _no_jit(self, conn: Connection) -> None:
        """No JIT for the rule statements of this transaction where they read drop events."""
        if self.drop_events_table(conn) and queries.NO_JIT.runs_on(self.dialect):
            conn.execute(self._sql(queries.NO_JIT))

    def hold_view(self, tasks: Sequence[TaskRow], conn: Connection | None = None) -> HoldView:
        """What the hold rule needs to judge ``tasks``: their catalogs' names, the parent
        rows their children name and the parents' drop events (nothing read when no realm
        or catalog has a hold)."""
        if conn is None:
            with self._begin() as c:
                return self.hold_view(tasks, c)
        if not self.policy.holds_any or not tasks:
            return HoldView(self.policy)
        realms = sorted({t.realm_id for t in tasks})
        catalogs = {
            (r.realm_id, int(r.id)): str(r.name)
            for r in conn.execute(self._sql(queries.CATALOG_NAMES, realms))
        }
        known = {(t.realm_id, t.name): t for t in tasks}
        parents: dict[tuple[str, str], TaskRow] = {}
        for realm, names in parent_names(tasks).items():
            missing = sorted(n for n in names if (realm, n) not in known)
            parents.update({(realm, n): known[(realm, n)] for n in names if (realm, n) in known})
            if missing:
                for row in conn.execute(self._sql(queries.TASKS_NAMED, realm, missing)):
                    parent = decode_row(row)
                    parents[(realm, parent.name)] = parent
        drops = self._drop_event_times([*tasks, *parents.values()], conn)
        return HoldView(self.policy, catalogs, parents, drops)

    def _drop_event_times(self, tasks: Sequence[TaskRow], conn: Connection) -> DropEventTimes:
        """The drop events ``tasks``' parent tasks may count their hold from."""
        times: dict[tuple[str, str, str, str], list[int]] = {}
        if not self.drop_events_table(conn):
            return times
        for realm, keys in drop_keys(tasks).items():
            identifiers = sorted({k.identifier for k in keys})
            for start in range(0, len(identifiers), _IN_LIST_CHUNK):
                chunk = identifiers[start : start + _IN_LIST_CHUNK]
                for r in conn.execute(self._sql(queries.DROP_EVENTS, realm, chunk)):
                    if r.catalog_id is not None:
                        key = (realm, str(r.catalog_id), str(r.event_type), r.resource_identifier)
                        times.setdefault(key, []).append(int(r.timestamp_ms))
        return times

    def _states(
        self, conn: Connection, tasks: Sequence[TaskRow], now: int
    ) -> list[tuple[TaskRow, TaskState]]:
        view = self.hold_view(tasks, conn)
        judged = [view.with_hold(t) for t in tasks]
        return [(t, t.state(now, self.policy)) for t in judged]

    def task_state(self, task: TaskRow) -> tuple[int, TaskRow, TaskState]:
        """(now, ``task`` with its hold, its state), on the database clock."""
        with self._begin() as conn:
            now = self.now_ms(conn)
            judged = self.hold_view([task], conn).with_hold(task)
            return now, judged, judged.state(now, self.policy)

    def get_task(self, realm_id: str, task_id: int) -> TaskRow | None:
        with self._begin() as conn:
            return self._get(conn, realm_id, task_id)

    def _get(self, conn: Connection, realm_id: str, task_id: int) -> TaskRow | None:
        row = conn.execute(self._sql(queries.GET_TASK, realm_id, task_id)).first()
        return decode_row(row) if row is not None else None

    def catalog_internal_properties(self, realm_id: str, catalog_id: int) -> dict[str, str] | None:
        """The internal properties of catalog ``catalog_id`` of ``realm_id`` (where Polaris
        keeps its ``storage_configuration_info``); None when no such catalog exists."""
        with self._begin() as conn:
            row = conn.execute(
                self._sql(queries.CATALOG_INTERNAL_PROPERTIES, realm_id, catalog_id)
            ).first()
        if row is None:
            return None
        return parse_properties(row.internal_properties, column="the catalog's internal_properties")

    def batch_rows_of_polaris(self, realm_id: str, limit: int) -> list[tuple[int, str | None]]:
        """(id, ``data``) of up to ``limit`` BATCH tasks of ``realm_id`` Polaris wrote
        (not our children): those that look typed first, then the newest."""
        with self._begin() as conn:
            rows = conn.execute(
                self._sql(queries.BATCH_EVIDENCE),
                {"realm": realm_id, "limit": limit, "typed": queries.TYPED_BATCH_PATTERN},
            )
            return [(int(r.id), r.data if isinstance(r.data, str) else None) for r in rows]

    def tasks_with_state(
        self, realms: Iterable[str] | None = None
    ) -> tuple[int, list[tuple[TaskRow, TaskState]]]:
        with self._begin() as conn:
            now = self.now_ms(conn)
            return now, self._states(conn, self._list(conn, realms), now)

    def count_by_state(self, realms: Iterable[str] | None = None) -> dict[str, Counter[TaskState]]:
        """Per realm, how many tasks are in each state (computed in the database on PostgreSQL)."""
        out: dict[str, Counter[TaskState]] = {}
        if queries.COUNT_BY_STATE.runs_on(self.dialect):
            params = queries.policy_params(self.policy)
            if realms is not None:
                params["realms"] = list(realms)
            statement = self._sql(
                queries.COUNT_BY_STATE, self.policy, self.drop_events_table(), realms is not None
            )
            with self._begin() as conn:
                self._no_jit(conn)
                params["now"] = self.now_ms(conn)
                for realm, state, n in conn.execute(statement, params):
                    out.setdefault(realm, Counter())[TaskState(state)] += int(n)
            return out
        _, rows = self.tasks_with_state(realms)
        for task, state in rows:
            out.setdefault(task.realm_id, Counter())[state] += 1
        return out

    # --------------------------------------------------------------- leasing

    def lease_available(
        self, executor_id: str, limit: int, realms: Iterable[str] | None = None
    ) -> list[Lease]:
        """Lease up to ``limit`` orphaned tasks for ``executor_id``.

        A task lost to a concurrent leaser is skipped; the others still lease.
        On PostgreSQL the batch is one UPDATE over a SKIP LOCKED selection.
        """
        transitions.require_executor(executor_id)
        if limit <= 0:
            return []
        realm_list = list(realms) if realms is not None else None
        if not queries.LEASE_BATCH.runs_on(self.dialect):
            return self._lease_per_row(executor_id, limit, realm_list)
        rows = self._rule_rows(queries.LEASE_BATCH, realm_list, executor=executor_id, limit=limit)
        leases = [Lease.from_leased_columns(row, executor_id) for row in rows if row[0]]
        # The orphans it picked but did not lease, their properties not a JSON object:
        # the statement found them in the same scan; each takes Polaris's
        # compare-and-set, which keeps the undecodable original (they are rare:
        # hostile or broken rows).
        for row in rows:
            lease = None if row[0] else self.lease_task(row[1], int(row[2]), executor_id)
            if lease is not None:
                leases.append(lease)
        return leases

    def _rule_rows(
        self, query: Query[[TaskPolicy, bool]], realms: list[str] | None, **params: Any
    ) -> Sequence[Any]:
        """The rows of ``query`` (a statement of the state rule) in ``realms``.

        ``realms`` None: every realm with a task, found in the same transaction.
        """
        params.update(queries.policy_params(self.policy))
        statement = self._sql(query, self.policy, self.drop_events_table())
        with self._begin() as conn:
            self._no_jit(conn)
            # Naming the realms lets the scan use Polaris's unique index.
            params["realms"] = self._realms(conn) if realms is None else realms
            return conn.execute(statement, params).all() if params["realms"] else []

    def _lease_per_row(self, executor_id: str, limit: int, realms: list[str] | None) -> list[Lease]:
        """List, then one compare-and-set per task: Polaris's own algorithm.

        The lease where there is no ``LEASE_BATCH`` (SQLite).
        """
        with self._begin() as conn:
            candidates = list(self._orphans_by_age(conn, realms))
        leases: list[Lease] = []
        for task in candidates:
            if len(leases) >= limit:
                break
            lease = self._cas_lease(task, executor_id)
            if lease is not None:
                leases.append(lease)
        return leases

    def _orphans_by_age(self, conn: Connection, realms: list[str] | None) -> Iterator[TaskRow]:
        """Orphaned tasks, oldest first, by the Python rule: where no statement runs the rule."""
        now = self.now_ms(conn)
        tasks = [decode_row(row) for row in conn.execute(self._sql(queries.TASKS_BY_AGE, realms))]
        for task, state in self._states(conn, tasks, now):
            if state is TaskState.ORPHANED:
                yield task

    def _cas_lease(self, task: TaskRow, executor_id: str) -> Lease | None:
        # Re-checked on the database clock inside the write transaction.
        written = self.lease_row(task, executor_id)
        return Lease.from_row(written) if written is not None else None

    def _cas_write(self, conn: Connection, task: TaskRow, props: dict[str, str], now: int) -> bool:
        return conn.execute(self._sql(queries.CAS_WRITE, task, props, now)).rowcount == 1

    def _write_leased_row(
        self, conn: Connection, task: TaskRow, props: dict[str, str], now: int
    ) -> TaskRow | None:
        """Compare-and-set ``props``; the row as written, None if the CAS lost."""
        if not self._cas_write(conn, task, props, now):
            return None
        return after_write(task, props, now)

    def lease_task(self, realm_id: str, task_id: int, executor_id: str) -> Lease | None:
        """Lease one named task if it is orphaned (e.g. a child a crashed run left behind)."""
        task = self.get_task(realm_id, task_id)
        if task is None:
            return None
        return self._cas_lease(task, executor_id)

    def lease_row(self, task: TaskRow, executor_id: str) -> TaskRow | None:
        """Lease ``task`` as read (its version guards the write) if it is orphaned, without
        reading it again; the row as the lease left it, None if it was not leased."""
        with self._begin() as conn:
            now = self.now_ms(conn)
            # The hold is judged here, in the lease's own transaction: no path leases
            # a held task (PostgreSQL's batch lease has the same rule in its SQL).
            held_until = self.hold_view([task], conn).held_until_ms(task)
            if task.state(now, self.policy, held_until) is not TaskState.ORPHANED:
                return None
            props = task.properties
            if task.properties_error:
                raw = conn.execute(
                    self._sql(queries.TASK_PROPERTIES, task.realm_id, task.id)
                ).scalar_one_or_none()
                props = transitions.original_properties(raw_text(raw))
            leased = transitions.lease(props, executor_id=executor_id, now_ms=now)
            return self._write_leased_row(conn, task, leased, now)

    def select_available(self, limit: int, realms: Iterable[str] | None = None) -> list[TaskRow]:
        """Up to ``limit`` tasks ``lease_available`` would lease now (same rule); writes nothing.

        The sweeper selects with it and each run leases its own task at start, so a queued run
        holds no lease that could lapse.
        """
        if limit <= 0:
            return []
        realm_list = list(realms) if realms is not None else None
        if not queries.SELECT_AVAILABLE.runs_on(self.dialect):
            with self._begin() as conn:
                return list(islice(self._orphans_by_age(conn, realm_list), limit))
        rows = self._rule_rows(queries.SELECT_AVAILABLE, realm_list, limit=limit)
        return [decode_row(r) for r in rows]

    def task_names_present(self, realm_id: str, names: Iterable[str]) -> set[str]:
        """Which of ``names`` name a task row of ``realm_id`` (Polaris's unique name index)."""
        wanted = sorted(set(names))
        if not wanted:
            return set()
        with self._begin() as conn:
            rows = conn.execute(self._sql(queries.TASK_NAMES, realm_id, wanted))
            return {row.name for row in rows}

    def task_named(self, realm_id: str, name: str) -> TaskRow | None:
        """The task row of ``realm_id`` named ``name`` (Polaris's unique name index), or None."""
        with self._begin() as conn:
            row = conn.execute(self._sql(queries.TASKS_NAMED, realm_id, [name])).first()
        return decode_row(row) if row is not None else None

    def lease_row_for_operator(self, task: TaskRow, executor_id: str) -> TaskRow | None:
        """An operator's "run it now": requeue and lease ``task`` as read, backing off or dead, in
        one CAS guarded by its version; the row as leased. None for any other state (an available
        task takes ``lease_row``) or when the row changed meanwhile.
        """
        if task.properties_error:
            return None
        with self._begin() as conn:
            now = self.now_ms(conn)
            if task.state(now, self.policy) not in (TaskState.BACKING_OFF, TaskState.DEAD):
                return None
            props = transitions.lease_for_operator(
                task.properties, executor_id=executor_id, now_ms=now
            )
            return self._write_leased_row(conn, task, props, now)

    # --------------------------------------------------------- holder's moves

    def _holder_cas(
        self, lease: Lease, change: Callable[[Connection, TaskRow, int], _T | None]
    ) -> tuple[HolderCas, _T | None]:
        """Apply ``change(conn, task, now)`` while ``lease`` is held; retry lost CAS races.

        ``change`` returns None when its CAS lost. Only the holder (its heartbeat) and a leaser
        after expiry write a held row, so a lost CAS is re-read and re-judged.
        Returns (APPLIED, value), or (GONE | LOST, None).
        """
        for _ in range(_CAS_RETRIES):
            with self._begin() as conn:
                now = self.now_ms(conn)
                task = self._get(conn, lease.realm_id, lease.task_id)
                if task is None:
                    return HolderCas.GONE, None
                if not transitions.holds(task, lease, now, self.policy):
                    return HolderCas.LOST, None
                value = change(conn, task, now)
                if value is not None:
                    return HolderCas.APPLIED, value
        return HolderCas.LOST, None

    def _holder_write(
        self, lease: Lease, transition: Callable[[TaskRow, int], tuple[dict[str, str], _T]]
    ) -> tuple[HolderCas, _T | None]:
        """While ``lease`` is held, write the properties ``transition(task, now)`` gives."""

        def change(conn: Connection, task: TaskRow, now: int) -> _T | None:
            props, value = transition(task, now)
            return value if self._cas_write(conn, task, props, now) else None

        return self._holder_cas(lease, change)

    def held_for_ms(self, lease: Lease) -> int | None:
        """How much longer ``lease`` is guaranteed (database clock), or None if it is lost."""
        with self._begin() as conn:
            now = self.now_ms(conn)
            task = self._get(conn, lease.realm_id, lease.task_id)
            if task is None or not transitions.holds(task, lease, now, self.policy):
                return None
            start = task.start_time_ms or now
            return start + self.policy.for_realm(lease.realm_id).lease_timeout_ms - now

    def holds(self, lease: Lease) -> bool:
        """Fencing check: does ``lease`` still hold its task, by the database clock?"""
        return self.held_for_ms(lease) is not None

    def renew_held_by(self, realm_id: str, executor_id: str) -> int:
        """Heartbeat everything one executor holds in a realm, in one statement; how many renewed.

        Executor ids are unique per sweep process and Dagster run, so this renews exactly the
        holder's running or queued tasks (a table cleanup's children).
        """
        params = {
            "realm": realm_id,
            "executor": transitions.require_executor(executor_id),
            "timeout": self.policy.for_realm(realm_id).lease_timeout_ms,
        }
        with self._begin() as conn:
            return int(conn.execute(self._sql(queries.RENEW_HELD_BY), params).rowcount)

    def complete(self, lease: Lease) -> CompleteOutcome:
        """Success: delete the task row, guarded on the holder's lease."""

        def change(conn: Connection, task: TaskRow, now: int) -> CompleteOutcome | None:
            deleted = conn.execute(self._sql(queries.COMPLETE, task)).rowcount == 1
            return CompleteOutcome.DONE if deleted else None

        status, _ = self._holder_cas(lease, change)
        return transitions.complete_outcome(status)

    def fail(
        self, lease: Lease, error: str, *, run_id: str | None = None, permanent: bool = False
    ) -> FailureRecord:
        """Record a failed attempt; back off, or dead-letter after ``max_attempts``.

        ``permanent`` (``errors.is_permanent``): retrying cannot heal it, so the
        task is dead-lettered at once, marked ``lastAttemptPermanent=true``.
        """

        def transition(task: TaskRow, now: int) -> tuple[dict[str, str], FailureRecord]:
            return transitions.fail(
                task.properties,
                error=error,
                now_ms=now,
                policy=self.policy,
                unit_random=random.random(),
                run_id=run_id,
                permanent=permanent,
            )

        status, record = self._holder_write(lease, transition)
        return record if record is not None else transitions.unrecorded_failure(status)

    # -------------------------------------------------------------- operator

    def requeue(
        self,
        realm_id: str,
        task_id: int,
        *,
        allow_shared_location: bool = False,
        force: bool = False,
    ) -> TaskState:
        """Revive a dead or backing-off task: attempts reset, backoff cleared.

        ``allow_shared_location`` records the operator's override of the shared-location guard
        (``Prop.ALLOW_SHARED_LOCATION``); ``force`` requeues a pending task too. MetastoreError
        for a task that is missing, leased now, or refused by ``transitions.requeue_refusal``.
        """
        for _ in range(_CAS_RETRIES):
            with self._begin() as conn:
                now = self.now_ms(conn)
                task = self._get(conn, realm_id, task_id)
                if task is None:
                    raise MetastoreError(f"no task {task_id} in realm {realm_id!r}")
                refusal = transitions.requeue_refusal(
                    task,
                    now,
                    self.policy,
                    allow_shared_location=allow_shared_location,
                    force=force,
                )
                if refusal is not None:
                    raise MetastoreError(refusal)
                props = transitions.requeue(
                    task.properties, allow_shared_location=allow_shared_location
                )
                if self._cas_write(conn, task, props, now):
                    written = after_write(task, props, now)
                    held_until = self.hold_view([written], conn).held_until_ms(written)
                    return written.state(now, self.policy, held_until)
        raise MetastoreError(f"task {realm_id}/{task_id} kept changing; try again")

    def end_restored(self, task: TaskRow, holder: Lease | None = None) -> list[TaskRow]:
        """End a restored table's purge: its parent task and every child named after it (``task``
        is either), each by CAS, in one transaction; the rows ended, parent first.

        Refused (MetastoreError naming the holder), ending nothing, while any is leased by
        another than ``holder``'s executor, when ``task`` is gone, or when any changed since read.
        """
        family = parent_name_of(task) or task.name
        with self._begin() as conn:
            now = self.now_ms(conn)
            rows = [
                decode_row(r)
                for r in conn.execute(self._sql(queries.TASK_FAMILY, task.realm_id, family))
            ]
            ended = sorted(
                (t for t in rows if family in (t.name, parent_name_of(t))),
                key=lambda t: t.name != family,
            )
            if not any(t.id == task.id for t in ended):
                raise MetastoreError(f"task {task.label} is gone: nothing to end")
            for row in ended:
                ours = holder is not None and row.executor_id == holder.executor_id
                if row.lease_held(now, self.policy) and not ours:
                    raise MetastoreError(
                        f"task {row.label} is leased by {row.executor_id} (attempt "
                        f"{row.attempt_count}): nothing ended; run the restore again when "
                        "that run ends"
                    )
            for row in ended:
                if conn.execute(self._sql(queries.DISCARD, row)).rowcount != 1:
                    raise MetastoreError(
                        f"task {row.label} changed while it was being ended: nothing ended; "
                        "run the restore again"
                    )
            return ended

    def discard_unhandled(
        self,
        task_ids: Sequence[int] | None = None,
        realms: Iterable[str] | None = None,
        *,
        dry_run: bool = False,
    ) -> list[DiscardResult]:
        """Delete unhandled tasks (``TaskState.UNHANDLED``) and nothing else.

        ``task_ids`` None: every unhandled task of ``realms`` (None: all). Each delete is a CAS on
        the judged entity_version; a named task not unhandled, or in several realms, is refused.
        """
        realm_list = list(realms) if realms is not None else None
        with self._begin() as conn:
            now = self.now_ms(conn)
            query = self._sql(queries.LIST_FOR_DISCARD, realm_list, task_ids)
            found = [decode_row(r) for r in conn.execute(query)]
        candidates, results = transitions.discard_candidates(found, task_ids, realm_list)
        for task in candidates:
            results.append(self._discard_one(task, now, dry_run=dry_run))
        return results

    def _discard_one(self, task: TaskRow, now: int, *, dry_run: bool) -> DiscardResult:
        refusal = transitions.discard_refusal(task.state(now, self.policy))
        if refusal is None and not dry_run:
            with self._begin() as conn:
                if conn.execute(self._sql(queries.DISCARD, task)).rowcount != 1:
                    refusal = "it changed or went away since it was read; not discarded"
        if refusal is not None:
            outcome = DiscardOutcome.REFUSED
        else:
            outcome = DiscardOutcome.WOULD_DISCARD if dry_run else DiscardOutcome.DISCARDED
        return DiscardResult(task.realm_id, task.id, outcome, task.name, refusal or "")

    # ------------------------------------------------------------- children

    def insert_tasks(self, tasks: Sequence[NewTask], *, holder: Lease | None = None) -> list[Lease]:
        """Insert tasks in one transaction.

        With ``holder``, its lease is checked in the same transaction and the tasks are created
        leased by its executor (attempt 1): nobody else starts them while it runs, and they fall
        to any sweeper once that lease lapses.
        """
        if not tasks:
            return []
        with self._begin() as conn:
            now = self.now_ms(conn)
            if holder is not None:
                parent = self._get(conn, holder.realm_id, holder.task_id)
                if not transitions.holds(parent, holder, now, self.policy):
                    raise LeaseLost(
                        f"lease on {holder.label} lost before its children were created"
                    )
            rows = [
                inserted(
                    task,
                    dict(task.properties)
                    if holder is None
                    else transitions.lease_child(
                        task.properties, executor_id=holder.executor_id, now_ms=now
                    ),
                    now,
                )
                for task in tasks
            ]
            conn.execute(self._sql(queries.INSERT_TASKS), [insert_values(row) for row in rows])
        return [] if holder is None else [Lease.from_row(row) for row in rows]

    def count_tasks(self, realms: Iterable[str] | None = None) -> int:
        with self._begin() as conn:
            return int(conn.execute(self._sql(queries.COUNT_TASKS, realms)).scalar_one())


def new_entity_id() -> int:
    """A random positive 63-bit id, as Polaris makes them."""
    return secrets.randbits(63) or 1
