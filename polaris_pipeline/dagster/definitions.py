"""``build_defs``: everything the integration offers, as one ``Definitions``.

The one place that assembles the sensors, the jobs, the backlog asset and its
checks (reported by the sweeper and its watch: no schedule), the leak report asset
(its schedule stopped by default), and the resources.
``definitions.py`` (this repository's code location), the Celery location and
the ``dg`` Component all call it, so a new piece is added here once and reaches
every deployment.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from dagster import (
    AssetChecksDefinition,
    AssetsDefinition,
    BetaWarning,
    DefaultSensorStatus,
    Definitions,
    EnvVar,
    ExecutorDefinition,
    FilesystemIOManager,
    JobDefinition,
    ScheduleDefinition,
    SensorDefinition,
    in_process_executor,
)

from polaris_pipeline.dagster.alerts import (
    Notify,
    alert_sensors,
    notifier_from_env,
    ui_url_from_env,
)
from polaris_pipeline.dagster.backlog import (
    BACKLOG_CHECKS,
    build_sweeper_watch,
    polaris_task_backlog,
)
from polaris_pipeline.dagster.backlog_report import BacklogSettings
from polaris_pipeline.dagster.leaks import (
    LeakSettings,
    build_leak_report_schedule,
    polaris_leak_reclaim_job,
    polaris_leak_report_job,
    polaris_leaked_roots,
)
from polaris_pipeline.dagster.realm_backfill import polaris_realm_backfill_job
from polaris_pipeline.dagster.reporting import build_run_report_sensor
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.retention import (
    RetentionSettings,
    build_run_retention_job,
    build_run_retention_schedule,
)
from polaris_pipeline.dagster.sweeper import build_polaris_task_sweeper
from polaris_pipeline.dagster.task_job import MULTIPROCESS_EXECUTOR, build_polaris_task_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator
from polaris_pipeline.metastore import URL_ENV
from polaris_pipeline.settings import PipelineSettings
from polaris_pipeline.tasks.model import RealmOverride
from polaris_pipeline.tasks.release import ALWAYS, PolarisRelease, TaskEvents, parse_task_events
from polaris_pipeline.tasks.unreferenced_mode import DEFAULT_UNREFERENCED_MODE, UnreferencedMode

if TYPE_CHECKING:
    # An asset job (the leak report) before resolution; dagster exports no public name.
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

# How the task job's steps execute: all in the run's own process (the default: a
# run is one task's worth of work), one process per step, or on Celery workers
# (dagster-celery, an extra).
TaskExecutor = Literal["multiprocess", "in_process", "celery"]

TASK_EXECUTOR_ENV = "POLARIS_PIPELINE_TASK_EXECUTOR"


def _task_executor(executor: TaskExecutor | ExecutorDefinition | None) -> ExecutorDefinition | None:
    if executor is None or executor == "in_process":
        return None  # the task job's own default: every step in the run's process
    if isinstance(executor, ExecutorDefinition):
        return executor
    if executor == "multiprocess":
        return MULTIPROCESS_EXECUTOR
    if executor == "celery":
        # Imported here: dagster-celery is an extra, only the Celery location needs it.
        from polaris_pipeline.dagster.celery import build_celery_executor

        return build_celery_executor()
    raise ValueError(f"unknown task executor {executor!r}: multiprocess, in_process or celery")


def sweeper_default_status(autostart: bool | None) -> DefaultSensorStatus:
    """RUNNING unless told otherwise, but never by itself under ``dagster dev``/``dg dev``.

    A development start against a production metastore URL must not purge by
    surprise; ``POLARIS_PIPELINE_SWEEPER_AUTOSTART=true`` starts it there too. A
    status set in the UI is kept by the instance and beats this default.
    """
    if autostart is None:
        from dagster._utils.env import using_dagster_dev

        autostart = not using_dagster_dev()
    return DefaultSensorStatus.RUNNING if autostart else DefaultSensorStatus.STOPPED


def _storage_with_record(
    storage: PolarisStorageResource | None, deletion_record: str | None
) -> PolarisStorageResource:
    """The storage resource, carrying ``deletion_record`` when it is given."""
    storage = storage or PolarisStorageResource()
    if deletion_record is None or storage.deletion_record == deletion_record:
        return storage
    if storage.deletion_record is not None:
        raise ValueError(
            f"deletion_record {deletion_record!r} disagrees with the storage resource's "
            f"{storage.deletion_record!r}: set it in one place"
        )
    return PolarisStorageResource(
        config_path=storage.config_path,
        locations=storage.locations,
        allowed_prefixes=storage.allowed_prefixes,
        deletion_record=deletion_record,
    )


def build_defs(
    *,
    metastore_url: str | EnvVar | None = None,
    realms: Sequence[str] | None = None,
    lease_timeout_ms: int | None = None,
    grace_ms: int | None = None,
    max_attempts: int | None = None,
    metadata_batch_size: int | None = None,
    realm_overrides: Mapping[str, RealmOverride] | None = None,
    polaris_version: str | None = None,
    write_task_events: TaskEvents = False,
    unreferenced: UnreferencedMode | str = DEFAULT_UNREFERENCED_MODE,
    deletion_record: str | None = None,
    executor_prefix: str | None = None,
    storage: PolarisStorageResource | None = None,
    sweeper: SweeperSettings | None = None,
    backlog: BacklogSettings | None = None,
    executor: TaskExecutor | ExecutorDefinition | None = None,
    io_manager: FilesystemIOManager | None = None,
    sweeper_autostart: bool | None = None,
    notify: Notify | None = None,
    alert_ui_url: str | None = None,
    translator: PolarisTranslator | None = None,
    retention: RetentionSettings | None = None,
    leaks: LeakSettings | None = None,
) -> Definitions:
    """The sweeper sensor, the task and backfill jobs, the backlog and its checks.

    ``metastore_url`` should be an ``EnvVar`` so the UI shows the variable's
    name, never the URL; None means ``EnvVar("POLARIS_METASTORE_URL")``.
    Unset lease settings keep the library's defaults; ``polaris_version`` (``1.7``) is
    the Polaris release that reads the rows we write, None: inferred per realm
    (docs/polaris-releases.md); realms may override it. ``write_task_events``
    writes Polaris's task events (off by default, as in Polaris). ``unreferenced``
    (off, report, delete) is what a dropped table's run does, last, with the files
    its metadata no longer names; realms may override it. ``deletion_record``
    (an fsspec URI prefix) keeps a JSON Lines record of every path each attempt
    deletes (``storage/deletion_record.py``); it is the storage resource's
    setting, given here or there, not both differently. None: no record.
    ``executor`` chooses how the task job's steps run.
    ``sweeper_autostart``: see ``sweeper_default_status``. ``notify`` turns the
    alert sensors on (polaris_pipeline.dagster.alerts); ``alert_ui_url`` is the
    UI's base URL for the links in alerts. ``retention``: how long finished task
    runs are kept (polaris_pipeline.dagster.retention); its schedule stays
    STOPPED until an age is set. ``translator`` (a ``PolarisTranslator`` subclass)
    decides the runs' tags, the steps' metadata and the tables' asset keys and events.
    ``leaks``: the leak report's threshold and catalogs (polaris_pipeline.dagster.leaks);
    its schedule stays STOPPED until started.
    """
    resources = build_resources(
        metastore_url=metastore_url,
        realms=realms,
        lease_timeout_ms=lease_timeout_ms,
        grace_ms=grace_ms,
        max_attempts=max_attempts,
        metadata_batch_size=metadata_batch_size,
        realm_overrides=realm_overrides,
        polaris_version=polaris_version,
        write_task_events=write_task_events,
        unreferenced=unreferenced,
        deletion_record=deletion_record,
        executor_prefix=executor_prefix,
        storage=storage,
        sweeper=sweeper,
        backlog=backlog,
        retention=retention,
        leaks=leaks,
        io_manager=io_manager,
    )
    translator = translator or DEFAULT_TRANSLATOR
    task_job, retention_job = build_task_jobs(executor, translator)
    return compose_defs(
        resources,
        assets=[polaris_task_backlog, polaris_leaked_roots],
        asset_checks=BACKLOG_CHECKS,
        jobs=[
            task_job,
            polaris_realm_backfill_job,
            retention_job,
            polaris_leak_report_job,
            polaris_leak_reclaim_job,
        ],
        schedules=build_schedules(retention_job, resources),
        sensors=build_sensors(
            task_job,
            resources,
            sweeper_autostart=sweeper_autostart,
            notify=notify,
            alert_ui_url=alert_ui_url,
            translator=translator,
        ),
    )


def build_resources(
    *,
    metastore_url: str | EnvVar | None = None,
    realms: Sequence[str] | None = None,
    lease_timeout_ms: int | None = None,
    grace_ms: int | None = None,
    max_attempts: int | None = None,
    metadata_batch_size: int | None = None,
    realm_overrides: Mapping[str, RealmOverride] | None = None,
    polaris_version: str | None = None,
    write_task_events: TaskEvents = False,
    unreferenced: UnreferencedMode | str = DEFAULT_UNREFERENCED_MODE,
    deletion_record: str | None = None,
    executor_prefix: str | None = None,
    storage: PolarisStorageResource | None = None,
    sweeper: SweeperSettings | None = None,
    backlog: BacklogSettings | None = None,
    retention: RetentionSettings | None = None,
    leaks: LeakSettings | None = None,
    io_manager: FilesystemIOManager | None = None,
) -> dict[str, Any]:
    """The resources of ``build_defs`` by key (its arguments of the same names)."""
    policy: dict[str, Any] = {
        field: value
        for field, value in (
            ("lease_timeout_ms", lease_timeout_ms),
            ("grace_ms", grace_ms),
            ("max_attempts", max_attempts),
            ("metadata_batch_size", metadata_batch_size),
            ("polaris_version", _release(polaris_version)),
        )
        if value is not None
    }
    if executor_prefix:
        policy["executor_prefix"] = executor_prefix
    if realm_overrides:
        # A realm's text overrides (its unreferenced mode, its release) are fields of
        # their own in the resource.
        text_fields = {
            "unreferenced": "realm_unreferenced",
            "polaris_version": "realm_polaris_version",
        }
        policy["realm_overrides"] = {
            realm: {
                k: v
                for k, v in dataclasses.asdict(o).items()
                if v is not None and k not in text_fields
            }
            for realm, o in realm_overrides.items()
        }
        for key, resource_field in text_fields.items():
            by_realm = {r: getattr(o, key) for r, o in realm_overrides.items() if getattr(o, key)}
            if by_realm:
                policy[resource_field] = by_realm
    resources: dict[str, Any] = {
        "metastore": PolarisMetastoreResource(
            url=EnvVar(URL_ENV) if metastore_url is None else metastore_url,
            realms=list(realms) if realms else None,
            # The settings' "always" is the resource's second flag.
            write_task_events=bool(write_task_events),
            task_events_every_release=parse_task_events(write_task_events) == ALWAYS,
            unreferenced=UnreferencedMode.parse(unreferenced).value,
            **policy,
        ),
        # config_path unset: $POLARIS_PIPELINE_STORAGE_CONFIG, read when a run starts.
        "storage": _storage_with_record(storage, deletion_record),
        "sweeper": sweeper or SweeperSettings(),
        "backlog": backlog or BacklogSettings(),
        "retention": (retention or RetentionSettings()).validated(),
        "leaks": leaks or LeakSettings(),
    }
    if io_manager is not None:
        resources["io_manager"] = io_manager
    return resources


def build_task_jobs(
    executor: TaskExecutor | ExecutorDefinition | None, translator: PolarisTranslator
) -> tuple[JobDefinition, JobDefinition]:
    """The task job (its steps on ``executor``) and the retention job that prunes its runs."""
    task_job = build_polaris_task_job(executor_def=_task_executor(executor), translator=translator)
    return task_job, build_run_retention_job(task_job.name, translator=translator)


def build_schedules(
    retention_job: JobDefinition, resources: Mapping[str, Any]
) -> list[ScheduleDefinition]:
    """The run retention's and the leak report's schedules (both STOPPED until set up)."""
    return [
        build_run_retention_schedule(retention_job, resources["retention"]),
        build_leak_report_schedule(resources["leaks"]),
    ]


def build_sensors(
    task_job: JobDefinition,
    resources: Mapping[str, Any],
    *,
    sweeper_autostart: bool | None,
    notify: Notify | None,
    alert_ui_url: str | None,
    translator: PolarisTranslator,
) -> list[SensorDefinition]:
    """The sweeper (its cadence the ``sweeper`` resource's), its watch, the run report and
    the alerts (none without ``notify``)."""
    return [
        build_polaris_task_sweeper(
            task_job,
            default_status=sweeper_default_status(sweeper_autostart),
            cadence=resources["sweeper"],
            backlog_resource=True,
            translator=translator,
        ),
        build_sweeper_watch(),
        build_run_report_sensor(task_job.name, translator=translator),
        *alert_sensors(notify, alert_ui_url),
    ]


def compose_defs(
    resources: Mapping[str, Any],
    *,
    assets: Sequence[AssetsDefinition],
    asset_checks: Sequence[AssetChecksDefinition],
    jobs: Sequence[JobDefinition | UnresolvedAssetJobDefinition],
    schedules: Sequence[ScheduleDefinition],
    sensors: Sequence[SensorDefinition],
) -> Definitions:
    """The pieces as one ``Definitions``, its repository already built (see
    ``_resolve_quietly``)."""
    defs = Definitions(
        assets=assets,
        asset_checks=asset_checks,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        # For jobs without an executor of their own (the one behind the UI's
        # Materialize and Execute buttons): a few small queries, not worth a
        # process each.
        executor=in_process_executor,
        resources=dict(resources),
    )
    _resolve_quietly(defs)
    return defs


def _release(value: str | None) -> str | None:
    """``polaris_version`` checked now: a typo fails the code location, not a tick."""
    if value is None:
        return None
    try:
        return PolarisRelease.normalise(value)
    except ValueError as exc:
        raise ValueError(f"polaris_version: {exc}") from None


def _resolve_quietly(defs: Definitions) -> None:
    """Build the repository now, without Dagster's own ``owners`` beta warning.

    Binding resources to a sensor's job copies the sensor with
    ``SensorDefinition.with_attributes``, which passes ``owners=[]`` to the beta
    ``owners`` parameter: Dagster 1.13 warns although nobody set owners. The
    repository is cached on ``defs``, so the code server never builds it again;
    only that message is silenced (docs/dagster.md).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"Parameter `owners` of initializer `SensorDefinition.__init__`",
            category=BetaWarning,
        )
        defs.get_repository_def()


def build_defs_from_env(
    environ: Mapping[str, str] | None = None, *, translator: PolarisTranslator | None = None
) -> Definitions:
    """``build_defs`` configured from the environment, as the CLI is.

    The engine's settings come from ``PipelineSettings.from_env`` (the variables
    the CLI reads too: docs/dagster.md); only the task executor is Dagster's own.
    ``translator``: as ``build_defs``'s (code, not a setting).
    """
    return build_defs(**_defs_arguments_from_env(environ), translator=translator)


# The arguments of build_defs that are not resources: how the pieces are built.
_COMPOSITION_ARGUMENTS = ("executor", "sweeper_autostart", "notify", "alert_ui_url")


@dataclasses.dataclass(frozen=True)
class EnvDeployment:
    """What ``build_defs_from_env`` configures, before it is composed: the resources by key
    and the arguments that choose how the jobs and sensors are built. A code location
    that composes its own ``Definitions`` from the library's pieces starts here."""

    resources: dict[str, Any]
    executor: TaskExecutor | None
    sweeper_autostart: bool | None
    notify: Notify | None
    alert_ui_url: str | None


def deployment_from_env(environ: Mapping[str, str] | None = None) -> EnvDeployment:
    """The resources and composition arguments ``build_defs_from_env`` would use."""
    arguments = _defs_arguments_from_env(environ)
    composition = {name: arguments.pop(name) for name in _COMPOSITION_ARGUMENTS}
    return EnvDeployment(resources=build_resources(**arguments), **composition)


def _defs_arguments_from_env(environ: Mapping[str, str] | None) -> dict[str, Any]:
    """``build_defs``'s keyword arguments (all but the translator) from the environment:
    the one place that reads it, for ``build_defs_from_env`` and ``deployment_from_env``."""
    env = os.environ if environ is None else environ
    settings = PipelineSettings.from_env(env)
    executor = env.get(TASK_EXECUTOR_ENV, "").strip() or None
    io_manager = None
    if executor == "celery":
        from polaris_pipeline.dagster.celery import io_manager_from_env

        io_manager = io_manager_from_env(env)
    return {
        "realms": settings.realm_list(),
        "lease_timeout_ms": settings.lease_timeout_ms,
        "grace_ms": settings.grace_ms,
        "max_attempts": settings.max_attempts,
        "metadata_batch_size": settings.metadata_batch_size,
        "realm_overrides": settings.realm_overrides,
        "polaris_version": settings.polaris_version,
        "write_task_events": settings.task_events,
        "unreferenced": settings.unreferenced,
        "deletion_record": settings.deletion_record,
        "executor_prefix": settings.executor_prefix,
        "sweeper": SweeperSettings(
            interval_seconds=settings.sweep_interval_s,
            jitter=settings.sweep_jitter,
            max_runs_per_tick=settings.sweep_max_runs,
            max_pending_runs=settings.sweep_max_pending_runs,
        ),
        "backlog": BacklogSettings(max_orphan_age_seconds=settings.max_orphan_age_s),
        "retention": RetentionSettings.from_settings(settings),
        "leaks": LeakSettings.from_settings(settings),
        "executor": executor,  # checked by _task_executor
        "io_manager": io_manager,
        "sweeper_autostart": settings.sweeper_autostart,
        "notify": notifier_from_env(env),
        "alert_ui_url": ui_url_from_env(env),
    }
