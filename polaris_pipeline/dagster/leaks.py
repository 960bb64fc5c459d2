"""The leak report as a Dagster asset: leaked table roots per catalog, and a check on their bytes.

``polaris_leaked_roots`` runs ``leaks/find.py`` and records per catalog the leaked bytes,
roots and the oldest root's last write; ``leaked_bytes_below_threshold`` warns above
``LeakSettings.max_bytes``. The walk lists whole catalogs: its schedule is STOPPED until
an operator starts it.

Reclaiming (``leaks/reclaim.py``) happens two ways: ``polaris_leak_reclaim_job``, launched
with run config naming the roots (its results are op metadata and an observation of the
asset; a root refused or not wholly reclaimed fails the run); or auto-reclaim, a report
run with ``auto_reclaim`` reclaiming roots of ``LeakSettings.auto_reclaim_catalogs`` (none
by default) older than the minimum age.
"""

# No ``from __future__ import annotations``: Dagster reads the op's config and
# resource annotations as classes, not strings.
from collections.abc import Sequence
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetSelection,
    Config,
    ConfigurableResource,
    DefaultScheduleStatus,
    Failure,
    MaterializeResult,
    MetadataValue,
    OpExecutionContext,
    ScheduleDefinition,
    asset,
    define_asset_job,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.leaks.auto_reclaim import auto_reclaim
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.leaks.model import LeakReport
from polaris_pipeline.leaks.reclaim import ReclaimReport, check_min_age_days, reclaim_root
from polaris_pipeline.report.leaks_view import (
    catalog_heading,
    reclaim_json,
    reclaim_line,
    root_json,
)
from polaris_pipeline.settings import LeakSection
from polaris_pipeline.tasks.formatting import format_bytes

LEAKS_ASSET = "polaris_leaked_roots"
LEAKS_CHECK = "leaked_bytes_below_threshold"
LEAKS_JOB = "polaris_leak_report_job"
LEAKS_SCHEDULE = "polaris_leak_report_schedule"
RECLAIM_JOB = "polaris_leak_reclaim_job"
RECLAIM_OP = "polaris_reclaim_leaked_roots"
# The largest roots recorded in the metadata (the CLI's --json has them all).
LARGEST_ROOTS = 20


class LeakSettings(ConfigurableResource, LeakSection):
    """The leak report's threshold, catalogs, schedule and reclaims: ``LeakSection``'s
    fields."""

    def min_age_ms(self, days: float | None = None) -> int:
        """``days`` (None: ``min_age_days``) in milliseconds; a Failure below a day."""
        try:
            return check_min_age_days(self.min_age_days if days is None else days)
        except ValueError as e:
            raise Failure(str(e)) from None


class LeakReportConfig(Config):
    """A run of the report may reclaim (its schedule's runs do)."""

    auto_reclaim: bool = Field(
        default=False,
        description=(
            "Reclaim the reported roots of the leaks resource's auto_reclaim_catalogs "
            "(the schedule sets this; with no catalog named nothing is deleted)."
        ),
    )


class LeakReclaimConfig(Config):
    """The roots an operator reclaims, as the report names them."""

    roots: list[str] = Field(
        description=(
            "Leaked roots to reclaim, as polaris_leaked_roots (largest_roots) or "
            "`polaris-pipeline leaks` names them; each is judged again before any delete."
        )
    )
    min_age_days: float | None = Field(
        default=None,
        description=(
            "Only objects last modified at least this many days ago are deleted (below 1: "
            "refused); null: min_age_days of the leaks resource (7 by default)."
        ),
    )


def reclaim_metadata(reports: Sequence[ReclaimReport]) -> dict[str, Any]:
    """Totals, then each root's result (``reclaim_json``) under ``roots``."""
    return {
        "reclaimed": MetadataValue.int(sum(r.ok and r.metadata_deleted for r in reports)),
        "refused": MetadataValue.int(sum(r.refusal is not None for r in reports)),
        "not_ok": MetadataValue.int(sum(not r.ok for r in reports)),
        "deleted": MetadataValue.int(sum(r.deleted for r in reports)),
        "bytes_deleted": MetadataValue.int(sum(r.bytes_deleted for r in reports)),
        "size_deleted": format_bytes(sum(r.bytes_deleted for r in reports)),
        "roots": MetadataValue.json([reclaim_json(r) for r in reports]),
    }


def leak_metadata(report: LeakReport) -> dict[str, Any]:
    """The asset's metadata: totals, then ``<realm>/<catalog>/...`` per catalog."""
    oldest = [c.oldest_ms for c in report.catalogs if c.oldest_ms is not None]
    meta: dict[str, Any] = {
        "leaked_bytes": MetadataValue.int(report.leaked_bytes),
        "leaked_size": format_bytes(report.leaked_bytes),
        "roots": MetadataValue.int(report.roots),
        "partial": MetadataValue.bool(report.partial),
    }
    if oldest:
        meta["oldest_leak"] = MetadataValue.timestamp(min(oldest) / 1000)
    for c in report.catalogs:
        key = f"{c.catalog.realm_id}/{c.catalog.name}"
        meta[f"{key}/leaked_bytes"] = MetadataValue.int(c.leaked_bytes)
        meta[f"{key}/roots"] = MetadataValue.int(len(c.roots))
        if c.oldest_ms is not None:
            meta[f"{key}/oldest_leak"] = MetadataValue.timestamp(c.oldest_ms / 1000)
    largest = sorted((r for c in report.catalogs for r in c.roots), key=lambda r: -r.bytes)
    meta["largest_roots"] = MetadataValue.json([root_json(r) for r in largest[:LARGEST_ROOTS]])
    return meta


def evaluate_leak_check(report: LeakReport, max_bytes: int) -> AssetCheckResult:
    """WARN when the leaked bytes exceed ``max_bytes``."""
    return AssetCheckResult(
        check_name=LEAKS_CHECK,
        passed=report.leaked_bytes <= max_bytes,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "leaked_bytes": MetadataValue.int(report.leaked_bytes),
            "max_bytes": MetadataValue.int(max_bytes),
            "roots": MetadataValue.int(report.roots),
            "partial": MetadataValue.bool(report.partial),
        },
        description=(
            f"{report.roots} leaked root(s), {format_bytes(report.leaked_bytes)} "
            f"(threshold {format_bytes(max_bytes)})"
            + ("; a listing failed: the report is partial" if report.partial else "")
        ),
    )


@asset(
    name=LEAKS_ASSET,
    group_name="polaris",
    kinds={"polaris"},
    description=(
        "Table roots under the catalogs' locations that no live entity owns and no task names: "
        "files of dropped tables and views no cleanup will delete. Bytes and roots per catalog "
        "(<realm>/<catalog>/leaked_bytes), and when the longest-leaked root was last written. "
        "Lists whole catalogs: its schedule is stopped by default. Deletes nothing unless "
        f"auto-reclaim is on for a catalog; reclaim reported roots with {RECLAIM_JOB}."
    ),
    check_specs=[
        AssetCheckSpec(
            LEAKS_CHECK,
            asset=LEAKS_ASSET,
            description="Warns when more bytes are leaked than max_bytes of the leaks resource.",
        )
    ],
)
def polaris_leaked_roots(
    context: AssetExecutionContext,
    config: LeakReportConfig,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    leaks: LeakSettings,
) -> MaterializeResult:
    store, resolver = metastore.get_metastore(), storage.get_resolver()
    report = metastore_leaks(store, resolver, realms=metastore.realms, catalogs=leaks.catalogs)
    for catalog in report.catalogs:
        context.log.info(catalog_heading(catalog))
        for error in catalog.errors:
            context.log.warning(f"{catalog.catalog.name}: {error}")
    metadata = leak_metadata(report)
    if config.auto_reclaim and leaks.auto_reclaim_catalogs:
        reclaims = auto_reclaim(
            store,
            resolver,
            report,
            leaks.auto_reclaim_catalogs,
            min_age_ms=leaks.min_age_ms(),
            deletion_record=storage.deletion_record,
            run_id=context.run.run_id,
        )
        _log_reclaims(context, reclaims)
        # The report above is what was found; these say what of it was given back.
        metadata.update({f"auto_reclaim/{k}": v for k, v in reclaim_metadata(reclaims).items()})
    # The check judges the report as found: a reclaim shows in the next report.
    return MaterializeResult(
        metadata=metadata,
        check_results=[evaluate_leak_check(report, leaks.max_bytes)],
    )


def _log_reclaims(
    context: AssetExecutionContext | OpExecutionContext, reports: Sequence[ReclaimReport]
) -> None:
    for r in reports:
        if r.ok:
            context.log.info(reclaim_line(r))
        else:
            context.log.warning(reclaim_line(r))
        for uri, error in r.failed.items():
            context.log.warning(f"failed: {uri}: {error}")


@op(
    name=RECLAIM_OP,
    description=(
        "Reclaims the leaked roots named in its config, each judged again as "
        "`polaris-pipeline leaks --reclaim` judges it; per-root results as metadata."
    ),
)
def polaris_reclaim_leaked_roots(
    context: OpExecutionContext,
    config: LeakReclaimConfig,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    leaks: LeakSettings,
) -> None:
    min_age_ms = leaks.min_age_ms(config.min_age_days)
    if not config.roots:
        raise Failure("no root to reclaim: name the report's roots in the run config")
    store, resolver = metastore.get_metastore(), storage.get_resolver()
    reports = [
        reclaim_root(
            store,
            resolver,
            uri,
            min_age_ms=min_age_ms,
            deletion_record=storage.deletion_record,
            run_id=context.run_id,
        )
        for uri in dict.fromkeys(config.roots)
    ]
    _log_reclaims(context, reports)
    metadata = reclaim_metadata(reports)
    # On the asset's page too, next to the report the roots came from.
    context.log_event(AssetObservation(asset_key=AssetKey(LEAKS_ASSET), metadata=metadata))
    not_ok = [r for r in reports if not r.ok]
    if not_ok:
        raise Failure(
            f"{len(not_ok)} of {len(reports)} root(s) refused or failed: "
            + "; ".join(reclaim_line(r) for r in not_ok),
            metadata=metadata,
        )
    context.add_output_metadata(metadata)


@job(
    name=RECLAIM_JOB,
    executor_def=in_process_executor,
    description=(
        f"Reclaims leaked roots reported by {LEAKS_ASSET}: launch it with "
        f"ops.{RECLAIM_OP}.config.roots naming them (docs/operator-guide.md)."
    ),
)
def polaris_leak_reclaim_job() -> None:
    polaris_reclaim_leaked_roots()


polaris_leak_report_job = define_asset_job(
    LEAKS_JOB,
    selection=AssetSelection.assets(polaris_leaked_roots),
    description=f"Materializes {LEAKS_ASSET} and its check.",
)


def build_leak_report_schedule(settings: LeakSettings) -> ScheduleDefinition:
    """The report on ``settings.cron``, STOPPED by default (a status set in the UI is kept)."""
    return ScheduleDefinition(
        name=LEAKS_SCHEDULE,
        job=polaris_leak_report_job,
        cron_schedule=settings.cron,
        # Its runs reclaim what auto_reclaim_catalogs names (none by default).
        run_config={"ops": {LEAKS_ASSET: {"config": {"auto_reclaim": True}}}},
        default_status=DefaultScheduleStatus.STOPPED,
        description=(
            f"Launches {LEAKS_JOB}. Stopped by default: the report lists every catalog's "
            "locations; start it once its cost is known (docs/operator-guide.md)."
        ),
    )
