"""``polaris_task_sweeper``: select available Polaris tasks and request one run per task.

The sensor leases nothing: each run leases its task when it starts (``Runner.start``), so
a queued run holds no lease that could lapse. It is evaluated every few seconds but
touches the metastore only when its cursor's (``sweeper_state.SweepCursor``) time has
come: base interval plus random jitter, so deployments sharing a metastore spread out; a
sweep that filled its cap sets the next to now, draining the backlog in small ticks. A
due sweep also reports the backlog asset and its metastore checks (``backlog.sweep_report``).
``sweep_plan`` decides (pure), ``sweep_tick`` reads.
"""

import math
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from dagster import (
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    RunRecord,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.dagster.backlog.sweep_report import BacklogReporter
from polaris_pipeline.dagster.contract import (
    RUN_KEY_TAG,
    run_key,
)
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweep_plan import (
    plan_sweep,
    queue_full,
    queue_limit,
    rows_to_read,
    waiting_tasks,
)
from polaris_pipeline.dagster.sweeper_state import SENSOR_NAME, SweepCursor
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator
from polaris_pipeline.errors import MetastoreError, PolarisPipelineError, one_line
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.report.nothing_available import no_orphans_reason
from polaris_pipeline.storage.config import UNBOUNDED_WARNING
from polaris_pipeline.tasks.model import TaskState
from polaris_pipeline.tasks.orphans import CandidateRun

# How often the daemon may evaluate the sensor. Evaluations before the cursor's
# next sweep time cost nothing (no database access), so this can be short.
MINIMUM_INTERVAL_SECONDS = 10
# The start rate the queue note uses is measured over this window.
_START_RATE_WINDOW_S = 600
_STARTED_STATUSES = [
    DagsterRunStatus.STARTED,
    DagsterRunStatus.SUCCESS,
    DagsterRunStatus.FAILURE,
    DagsterRunStatus.CANCELED,
]
# Runs that exist but have not started yet, so have not leased their task.
_WAITING_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
]


def cadence_text(settings: SweeperSettings, evaluation_interval_s: int) -> str:
    """The sweep cadence in words, as the sensor page shows it."""
    jitter_s = settings.interval_seconds * settings.jitter
    return (
        f"Sweeps the metastore every {settings.interval_seconds:g} s plus up to "
        f"{jitter_s:g} s of random jitter ({settings.jitter:.0%}), at most "
        f"{settings.max_runs_per_tick} run(s) per sweep and none while "
        f"{settings.max_pending_runs} run(s) wait to start; a sweep that fills its cap "
        f"sweeps again at the next evaluation (every {evaluation_interval_s} s). The cursor "
        "holds the next sweep's time."
    )


def next_sweep_ms(now_ms: int, settings: SweeperSettings) -> int:
    """``now`` plus the base interval stretched by a random part of the jitter."""
    return now_ms + int(settings.interval_seconds * 1000 * (1 + settings.jitter * random.random()))


def _waiting_runs(context: SensorEvaluationContext, job_name: str) -> list[DagsterRun]:
    try:
        instance = context.instance
    except Exception:
        # A context built for a test without an instance: nothing to count.
        return []
    return list(instance.get_runs(RunsFilter(job_name=job_name, statuses=_WAITING_STATUSES)))


def _drain_note(context: SensorEvaluationContext, job_name: str, pending: int) -> str:
    """``; at the observed 9 starts/min that is 35 min`` from the runs started lately."""
    try:
        since = time.time() - _START_RATE_WINDOW_S
        records = context.instance.get_run_records(
            RunsFilter(
                job_name=job_name,
                updated_after=datetime.fromtimestamp(since, tz=UTC),
                statuses=_STARTED_STATUSES,
            ),
            limit=1000,
        )
    except Exception:
        return ""
    started = sum(1 for r in records if r.start_time is not None and r.start_time >= since)
    if not started:
        return "; no run of it started in the last 10 min"
    per_min = started / (_START_RATE_WINDOW_S / 60)
    return f"; at the observed {per_min:.1f} starts/min that is {pending / per_min:.0f} min"


def _recently_started(
    context: SensorEvaluationContext, job_name: str, within_s: float
) -> list[DagsterRun]:
    """Runs of the job in progress that started less than ``within_s`` ago: a run whose worker
    died stays "started" until monitoring notices, and its tasks must not wait beyond their lease.
    """
    try:
        records = context.instance.get_run_records(
            RunsFilter(job_name=job_name, statuses=[DagsterRunStatus.STARTED]), limit=1000
        )
    except Exception:
        return []
    since = time.time() - within_s
    return [r.dagster_run for r in records if r.start_time is None or r.start_time >= since]


def _idle_reason(
    metastore: PolarisMetastoreResource,
    wait_s: int,
    *,
    limit_note: str = "",
    per_realm: dict[str, Counter[TaskState]] | None = None,
) -> str:
    """Why nothing was leased, from one count per state (one query on PostgreSQL; ``per_realm``
    when the tick has it already), in ``report.nothing_available``'s words.
    """
    if per_realm is None:
        per_realm = metastore.get_metastore().count_by_state(metastore.realms)
    return no_orphans_reason(
        sum(per_realm.values(), Counter()),
        metastore.realms,
        wait_s=wait_s,
        seen=per_realm,
        limit_note=limit_note,
    )


@dataclass(frozen=True)
class CheckProblem:
    """Why a tick selects nothing before reading a task (``config_problem``). ``unreachable``: the
    metastore could not be reached; it heals by itself, unlike a configuration error.
    """

    detail: str
    unreachable: bool = False

    def skip_reason(self, wait_s: int) -> str:
        if self.unreachable:
            return (
                f"metastore unreachable, nothing selected: {self.detail}; next check in {wait_s} s"
            )
        return (
            f"configuration error, nothing selected (every run would fail): {self.detail}; "
            f"next check in {wait_s} s"
        )


def config_problem(
    metastore: PolarisMetastoreResource, storage: PolarisStorageResource
) -> CheckProblem | None:
    """What would make every run fail, found before anything is selected; None if all is well:
    valid lease settings, a metastore with Polaris's tables, a storage config that loads.
    """
    try:
        metastore.policy()
        metastore.get_metastore().check_schema()
        storage.get_config()
    except (PolarisPipelineError, ValueError) as exc:
        return CheckProblem(one_line(exc), _unreachable(exc))
    except Exception as exc:
        # Unknown errors may quote a URL with its password: the type alone.
        return CheckProblem(
            f"{type(exc).__name__} while checking the metastore and storage configuration",
            _unreachable(exc),
        )
    return None


def release_line(store: Metastore, realms: Iterable[str]) -> str:
    """The Polaris release the runs of ``realms`` will write for, and its evidence: one bounded
    query per realm each tick (an upgrade shows at once); never fails the tick.
    """
    probe = ReleaseProbe(store)
    try:
        return "Polaris release: " + "; ".join(probe.resolve(r).text for r in realms)
    except (PolarisPipelineError, SQLAlchemyError, ValueError) as exc:
        return f"Polaris release not resolved: {one_line(exc)}"


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is the metastore out of reach rather than misconfigured.

    The store raises ``MetastoreError`` from an ``OperationalError`` when it cannot connect or
    loses the connection; other ``MetastoreError`` (no URL, driver or tables) and
    ``ProgrammingError`` (a missing grant) are configuration. psycopg gives a refused login no
    code, so a wrong password or database reads as unreachable, with the server's words.
    """
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, MetastoreError) and isinstance(exc.__cause__, OperationalError)


# The storage configs this process has warned of (once each, at the first tick).
_warned_unbounded: set[str] = set()


def _warn_unbounded_once(context: SensorEvaluationContext, storage: PolarisStorageResource) -> None:
    """The sensor's log says once per process and config that no allowed_prefixes bound
    the runs' deletes (``storage.config.UNBOUNDED_WARNING``)."""
    if storage.get_config().allowed_prefixes:
        return
    key = storage.model_dump_json()
    if key not in _warned_unbounded:
        _warned_unbounded.add(key)
        context.log.warning(UNBOUNDED_WARNING)


def sweep_tick(
    context: SensorEvaluationContext,
    metastore: PolarisMetastoreResource,
    sweeper: SweeperSettings,
    storage: PolarisStorageResource,
    backlog: BacklogSettings,
    *,
    job_name: str,
    translator: PolarisTranslator,
) -> SensorResult | SkipReason:
    """One evaluation of the sweeper (see the module docstring). ``backlog``: the reported checks'
    thresholds; ``translator``: the requested runs' tags.
    """
    now = int(time.time() * 1000)
    cursor = SweepCursor.parse(context.cursor)
    if cursor.next_sweep_ms is not None and now < cursor.next_sweep_ms:
        wait_s = math.ceil((cursor.next_sweep_ms - now) / 1000)
        return SkipReason(f"next sweep in {wait_s} s (jittered)")

    later = next_sweep_ms(now, sweeper)
    wait_s = math.ceil((later - now) / 1000)
    problem = config_problem(metastore, storage)
    if problem is not None:
        return SensorResult(
            skip_reason=problem.skip_reason(wait_s),
            cursor=SweepCursor(later, reported_ms=cursor.reported_ms).dump(),
        )
    _warn_unbounded_once(context, storage)
    report = BacklogReporter(context, metastore, backlog, cursor, now)
    waiting = _waiting_runs(context, job_name)
    pending = len(waiting)
    cap = queue_limit(
        pending,
        sweeper,
        job_name=job_name,
        wait_s=wait_s,
        # Read from the instance only when the queue is full: the note is for that reason.
        drain=_drain_note(context, job_name, pending) if queue_full(pending, sweeper) else "",
    )
    if cap.skip_reason is not None:
        events = report.events()  # before the cursor: it records the report
        return SensorResult(
            skip_reason=cap.skip_reason, cursor=report.cursor(later), asset_events=events
        )
    # Tasks of runs still waiting, and of runs started within a lease timeout (their
    # steps may not have leased them yet: a group's children are leased step by step).
    queued = waiting_tasks(
        [*waiting, *_recently_started(context, job_name, metastore.lease_timeout_ms / 1000)]
    )

    store = metastore.get_metastore()
    started = time.monotonic()
    rows = store.select_available(rows_to_read(cap.runs, queued), metastore.realms)
    plan = plan_sweep(
        rows,
        queued,
        limit=cap.runs,
        settings=sweeper,
        parents_present=store.task_names_present,
        pending=pending,
        wait_s=wait_s,
        elapsed_s=time.monotonic() - started,
        translator=translator,
    )
    events = report.events()
    if plan.idle_note is not None:
        return SensorResult(
            skip_reason=_idle_reason(
                metastore, wait_s, limit_note=plan.idle_note, per_realm=report.counts
            ),
            cursor=report.cursor(later),
            asset_events=events,
        )
    context.log.info(plan.available_line)
    context.log.info(release_line(store, plan.realms))
    context.log.info(plan.selected_line)
    return SensorResult(
        run_requests=_relaunch_used_keys(
            context,
            list(zip(plan.runs, plan.requests, strict=True)),
            now,
            started_within_s=metastore.lease_timeout_ms / 1000,
        ),
        cursor=report.cursor(now if plan.more else later, backlog=plan.more),
        asset_events=events,
    )


def _relaunch_used_keys(
    context: SensorEvaluationContext,
    requests: list[tuple[CandidateRun, RunRequest]],
    now_ms: int,
    *,
    started_within_s: float,
) -> list[RunRequest]:
    """``requests``, with a fresh key for each whose key a run that holds nothing used.

    Dagster silently drops a seen run key. A key repeats only when its run left the row
    unwritten: ended before leasing, or "started" past ``started_within_s`` (its worker died;
    the default launcher never fails such a run). Every lease bumps the version in the key.
    A new key keeps the promise of eventual execution; the lease's CAS keeps two runs off one
    task; the log says so.
    """
    keys = [r.run_key for _, r in requests if r.run_key]
    if not keys:
        return [r for _, r in requests]
    try:
        records = context.instance.get_run_records(
            RunsFilter(tags={RUN_KEY_TAG: keys}), limit=len(keys) * 4
        )
    except Exception:  # a context without an instance (unit tests): nothing is known
        return [r for _, r in requests]
    since = time.time() - started_within_s

    def in_progress(record: RunRecord) -> bool:
        run = record.dagster_run
        stale = run.status is DagsterRunStatus.STARTED and (record.start_time or since) < since
        return not run.is_finished and not stale

    # A key of a run still in progress stays: Dagster dropping it is right.
    busy = {r.dagster_run.tags.get(RUN_KEY_TAG) for r in records if in_progress(r)}
    used = {
        r.dagster_run.tags.get(RUN_KEY_TAG): r.dagster_run.run_id
        for r in records
        if r.dagster_run.tags.get(RUN_KEY_TAG) not in busy
    }
    out: list[RunRequest] = []
    for run, request in requests:
        earlier = used.get(request.run_key)
        if earlier is None:
            out.append(request)
            continue
        key = run_key(run, again_at_ms=now_ms)
        context.log.warning(
            f"run key {request.run_key} was used by run {earlier}, which ended, or is "
            f"'started' past the lease timeout, without writing the task (its worker died "
            f"before leasing it?): Dagster would drop the request; requesting it again as {key}"
        )
        out.append(request.with_replaced_attrs(run_key=key))
    return out


def build_polaris_task_sweeper(
    job: JobDefinition = polaris_task_job,
    *,
    # Running by default: a sweeper that waits for someone to switch it on guarantees
    # nothing. Stopping it in the UI is remembered by the instance.
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    cadence: SweeperSettings | None = None,
    translator: PolarisTranslator = DEFAULT_TRANSLATOR,
) -> SensorDefinition:
    """The sweeper sensor for ``job`` (built by ``build_polaris_task_job``, with ``translator``).

    ``cadence``: the sweeper settings, so the description states the real cadence. It requires
    the ``storage`` resource, so each sweep checks the runs' storage config loads, and the
    ``backlog`` resource, whose thresholds the reported checks use.
    """

    # Dagster gives a sensor the resources its typed parameters name.
    def evaluate(
        context: SensorEvaluationContext,
        metastore: PolarisMetastoreResource,
        sweeper: SweeperSettings,
        storage: PolarisStorageResource,
        backlog: BacklogSettings,
    ) -> SensorResult | SkipReason:
        return sweep_tick(
            context, metastore, sweeper, storage, backlog, job_name=job.name, translator=translator
        )

    return sensor(
        name=SENSOR_NAME,
        job=job,
        minimum_interval_seconds=MINIMUM_INTERVAL_SECONDS,
        default_status=default_status,
        description=(
            "Selects available Polaris cleanup tasks (never leased past the grace period, "
            "lease expired, backoff over, or requeued) and requests one run of the task job "
            "per task, which leases it when it starts. "
            + cadence_text(cadence or SweeperSettings(), MINIMUM_INTERVAL_SECONDS)
        ),
    )(evaluate)
