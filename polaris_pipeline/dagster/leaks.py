"""The leak report as a Dagster asset: leaked table roots per catalog, and a check on their bytes.

``polaris_leaked_roots`` runs the engine's report (``leaks/find.py``: each
catalog's locations listed one level at a time, live tables pruned) and records
per catalog the bytes and roots leaked and when the longest-leaked root was last
written. Its check, ``leaked_bytes_below_threshold``, warns when the leaked bytes
exceed ``LeakSettings.max_bytes``. The walk lists whole catalogs, so its schedule
is STOPPED until an operator starts it. Nothing here deletes: reclaiming a root
is the operator's ``polaris-pipeline leaks --reclaim``.
"""

from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetSelection,
    ConfigurableResource,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    ScheduleDefinition,
    asset,
    define_asset_job,
)

from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.leaks.model import LeakReport
from polaris_pipeline.report.formatting import format_bytes
from polaris_pipeline.report.leaks_view import catalog_heading, root_json
from polaris_pipeline.settings import LeakSection

LEAKS_ASSET = "polaris_leaked_roots"
LEAKS_CHECK = "leaked_bytes_below_threshold"
LEAKS_JOB = "polaris_leak_report_job"
LEAKS_SCHEDULE = "polaris_leak_report_schedule"
# The largest roots recorded in the metadata (the CLI's --json has them all).
LARGEST_ROOTS = 20


class LeakSettings(ConfigurableResource, LeakSection):
    """The leak report's threshold, catalogs and schedule: ``LeakSection``'s fields."""


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
        "Lists whole catalogs: its schedule is stopped by default. Deletes nothing."
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
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    leaks: LeakSettings,
) -> MaterializeResult:
    report = metastore_leaks(
        metastore.get_metastore(),
        storage.get_resolver(),
        realms=metastore.realms,
        catalogs=leaks.catalogs,
    )
    for catalog in report.catalogs:
        context.log.info(catalog_heading(catalog))
        for error in catalog.errors:
            context.log.warning(f"{catalog.catalog.name}: {error}")
    return MaterializeResult(
        metadata=leak_metadata(report),
        check_results=[evaluate_leak_check(report, leaks.max_bytes)],
    )


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
        default_status=DefaultScheduleStatus.STOPPED,
        description=(
            f"Launches {LEAKS_JOB}. Stopped by default: the report lists every catalog's "
            "locations; start it once its cost is known (docs/operator-guide.md)."
        ),
    )
