"""``build_defs``: everything the integration offers, as one ``Definitions``.

The one place that assembles the sensors, the jobs (the restore job among them), the
backlog asset and its checks (reported by the sweeper and its watch: no schedule), the
leak report asset (its schedule stopped by default), and the resources.
``definitions.py`` (this repository's code location), the Celery location and
the ``dg`` Component all call it, so a new piece is added here once and reaches
every deployment.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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

from polaris_pipeline.dagster.alerts import alert_sensors
from polaris_pipeline.dagster.backlog import (
    BACKLOG_CHECKS,
    STORAGE_CHECKS,
    BacklogSettings,
    polaris_sweeper_watch,
    polaris_task_backlog,
)
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
from polaris_pipeline.dagster.resources.restore import PolarisRestoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.restore_job import polaris_restore_table_job
from polaris_pipeline.dagster.retention import RetentionSettings, retention_definitions
from polaris_pipeline.dagster.sweeper import build_polaris_task_sweeper
from polaris_pipeline.dagster.task_job import MULTIPROCESS_EXECUTOR, build_polaris_task_job
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator
from polaris_pipeline.settings import (
    ENV_VARIABLES,
    URL_ENV,
    AlertSection,
    PipelineSettings,
    TaskExecutor,
    executor_settings,
)

RESTORE_SECRET_ENV = ENV_VARIABLES[("restore", "client_secret")]

if TYPE_CHECKING:
    # An asset job (the leak report) before resolution: Dagster 1.13 exports no public name.
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


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
    """RUNNING unless told otherwise, but never by itself under ``dagster dev``/``dg dev``: a
    development start against a production URL must not purge by surprise
    (``POLARIS_PIPELINE_SWEEPER_AUTOSTART=true`` starts it). A status set in the UI wins.
    """
    if autostart is None:
        # Set by `dagster dev` and `dg dev` for the processes they start; Dagster has no
        # public API for it (its private using_dagster_dev reads the same variable).
        autostart = not os.environ.get("DAGSTER_IS_DEV_CLI")
    return DefaultSensorStatus.RUNNING if autostart else DefaultSensorStatus.STOPPED


@dataclasses.dataclass(frozen=True)
class DeploymentResources:
    """A deployment's seven resources as given (None: not given), each field named as its key.

    The one statement of the resources a deployment has, their types and their
    defaults (``by_key``): ``build_defs`` takes them as keyword arguments of the same
    names and types (its public signature, kept equal to these fields by
    tests/test_dagster_definitions.py) and hands them here; ``build_resources`` and
    ``deployment_from_env`` build from here.
    """

    metastore: PolarisMetastoreResource | None = None
    storage: PolarisStorageResource | None = None
    sweeper: SweeperSettings | None = None
    backlog: BacklogSettings | None = None
    retention: RetentionSettings | None = None
    leaks: LeakSettings | None = None
    restore: PolarisRestoreResource | None = None

    def by_key(self) -> dict[str, Any]:
        """Every resource by its key, its default where none was given: the metastore at
        ``EnvVar("POLARIS_METASTORE_URL")``, every other section at its defaults."""
        return {
            "metastore": self.metastore or PolarisMetastoreResource(url=EnvVar(URL_ENV)),
            "storage": self.storage or PolarisStorageResource(),
            "sweeper": self.sweeper or SweeperSettings(),
            "backlog": self.backlog or BacklogSettings(),
            "retention": self.retention or RetentionSettings(),
            "leaks": self.leaks or LeakSettings(),
            "restore": self.restore or PolarisRestoreResource(),
        }


def build_defs(
    *,
    metastore: PolarisMetastoreResource | None = None,
    storage: PolarisStorageResource | None = None,
    sweeper: SweeperSettings | None = None,
    backlog: BacklogSettings | None = None,
    retention: RetentionSettings | None = None,
    leaks: LeakSettings | None = None,
    restore: PolarisRestoreResource | None = None,
    executor: TaskExecutor | ExecutorDefinition | None = None,
    io_manager: FilesystemIOManager | None = None,
    alerts: AlertSection | None = None,
    translator: PolarisTranslator | None = None,
) -> Definitions:
    """The sweeper sensor, the task and backfill jobs, the backlog and its checks.

    Each setting is a field of one resource (``polaris_pipeline.settings``' sections):
    ``metastore`` (None: ``url=EnvVar("POLARIS_METASTORE_URL")`` and the defaults,
    the realms' task policy and the guard's bound included), ``storage``, ``sweeper``,
    ``backlog``, ``retention`` (its job and schedule only when an age is set), ``leaks``,
    ``restore`` (the restore job's REST target; ``DeploymentResources``). ``executor``
    chooses how the task job's steps run.
    ``alerts`` (the component's ``alerts:`` block) turns the alert sensors on when it
    names a destination (polaris_pipeline.dagster.alerts). ``translator`` (a
    ``PolarisTranslator`` subclass) decides the runs' tags, the steps' metadata and the
    tables' asset keys and events.
    """
    # The seven resource arguments are spelt out above for the signature users call and
    # type-check against; what they are and default to is DeploymentResources'.
    given = DeploymentResources(
        metastore=metastore,
        storage=storage,
        sweeper=sweeper,
        backlog=backlog,
        retention=retention,
        leaks=leaks,
        restore=restore,
    )
    return _assemble(
        build_resources(given, io_manager=io_manager),
        executor=executor,
        alerts=alerts,
        translator=translator,
    )


def _assemble(
    resources: Mapping[str, Any],
    *,
    executor: TaskExecutor | ExecutorDefinition | None,
    alerts: AlertSection | None,
    translator: PolarisTranslator | None,
) -> Definitions:
    """``build_defs``' ``Definitions`` over resources already built (``build_resources``)."""
    translator = translator or DEFAULT_TRANSLATOR
    task_job = build_task_job(executor, translator)
    jobs, schedules = build_jobs_and_schedules(task_job, resources, translator)
    return compose_defs(
        resources,
        assets=[polaris_task_backlog, polaris_leaked_roots],
        asset_checks=[*BACKLOG_CHECKS, *STORAGE_CHECKS],
        jobs=jobs,
        schedules=schedules,
        sensors=build_sensors(
            task_job,
            resources,
            alerts=alerts,
            translator=translator,
        ),
    )


def build_resources(
    given: DeploymentResources | None = None,
    *,
    io_manager: FilesystemIOManager | None = None,
) -> dict[str, Any]:
    """The resources of ``build_defs`` by key: ``given``'s, each at its default where
    none was given."""
    resources = (given or DeploymentResources()).by_key()
    if io_manager is not None:
        resources["io_manager"] = io_manager
    return resources


def build_task_job(
    executor: TaskExecutor | ExecutorDefinition | None, translator: PolarisTranslator
) -> JobDefinition:
    """The task job, its steps on ``executor``."""
    return build_polaris_task_job(executor_def=_task_executor(executor), translator=translator)


def build_jobs_and_schedules(
    task_job: JobDefinition, resources: Mapping[str, Any], translator: PolarisTranslator
) -> tuple[list[JobDefinition | UnresolvedAssetJobDefinition], list[ScheduleDefinition]]:
    """Every job and schedule beside the task job's sensor: the realm backfill, the leak
    report (its schedule STOPPED until started) and its reclaim, the restore of a dropped
    table (launched by an operator) and, only when an age is set, the run retention
    (opt-in: without one there is nothing to delete)."""
    retention_jobs, retention_schedules = retention_definitions(
        resources["retention"], task_job.name, translator=translator
    )
    jobs: list[JobDefinition | UnresolvedAssetJobDefinition] = [
        task_job,
        polaris_realm_backfill_job,
        polaris_leak_report_job,
        polaris_leak_reclaim_job,
        polaris_restore_table_job,
        *retention_jobs,
    ]
    return jobs, [build_leak_report_schedule(resources["leaks"]), *retention_schedules]


def build_sensors(
    task_job: JobDefinition,
    resources: Mapping[str, Any],
    *,
    alerts: AlertSection | None,
    translator: PolarisTranslator,
) -> list[SensorDefinition]:
    """The sweeper (its cadence the ``sweeper`` resource's), its watch, the run report and
    the alerts (none without a destination in ``alerts``)."""
    return [
        build_polaris_task_sweeper(
            task_job,
            default_status=sweeper_default_status(resources["sweeper"].autostart),
            cadence=resources["sweeper"],
            translator=translator,
        ),
        polaris_sweeper_watch,
        build_run_report_sensor(task_job.name, translator=translator),
        *alert_sensors(alerts),
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


def _resolve_quietly(defs: Definitions) -> None:
    """Build the repository now, without Dagster 1.13's ``owners`` beta warning, which binding
    resources to a sensor's job raises (``with_attributes`` passes ``owners=[]``) although
    nobody set owners. The repository is cached on ``defs`` (docs/dagster.md).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"Parameter `owners` of initializer `SensorDefinition.__init__`",
            category=BetaWarning,
        )
        defs.get_repository_def()


@dataclasses.dataclass(frozen=True)
class EnvDeployment:
    """What ``build_defs_from_env`` configures, before it is composed: the resources by key
    and the arguments that choose how the jobs and sensors are built. A code location
    that composes its own ``Definitions`` from the library's pieces starts here."""

    resources: dict[str, Any]
    executor: TaskExecutor | None
    alerts: AlertSection


def deployment_from_env(environ: Mapping[str, str] | None = None) -> EnvDeployment:
    """The resources and composition arguments ``build_defs_from_env`` uses: the one
    reading of the environment, the engine's settings (``PipelineSettings.from_env``, the
    variables the CLI reads too) turned into the resources they are sections of."""
    settings = PipelineSettings.from_env(environ)
    steps = executor_settings(environ)
    executor = steps.task_executor
    io_manager = None
    if executor == "celery":
        from polaris_pipeline.dagster.celery import io_manager_for

        io_manager = io_manager_for(steps)
    # A secret that is set stays a reference to its variable: the UI shows the name only.
    secret = EnvVar(RESTORE_SECRET_ENV) if settings.restore.client_secret else None
    given = DeploymentResources(
        # The URL stays a reference to its variable: the UI shows the name, never the URL.
        metastore=PolarisMetastoreResource.from_section(
            settings.metastore, EnvVar(URL_ENV), settings.guard
        ),
        storage=PolarisStorageResource(**settings.storage.model_dump()),
        sweeper=SweeperSettings(**settings.sweeper.model_dump()),
        backlog=BacklogSettings(**settings.backlog.model_dump()),
        retention=RetentionSettings(**settings.retention.model_dump()),
        leaks=LeakSettings(**settings.leaks.model_dump()),
        restore=PolarisRestoreResource.from_section(settings.restore, secret),
    )
    resources = build_resources(given, io_manager=io_manager)
    return EnvDeployment(
        resources=resources,
        executor=executor,
        # The alerts section read above, not the environment once more.
        alerts=settings.alerts,
    )


def build_defs_from_env(
    environ: Mapping[str, str] | None = None, *, translator: PolarisTranslator | None = None
) -> Definitions:
    """``build_defs`` configured from the environment, as the CLI is (docs/dagster.md).

    ``translator``: as ``build_defs``'s (code, not a setting).
    """
    deployment = deployment_from_env(environ)
    return _assemble(
        deployment.resources,
        executor=deployment.executor,
        alerts=deployment.alerts,
        translator=translator,
    )
