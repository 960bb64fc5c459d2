"""The ``polaris_task_backlog`` asset and its four checks, as Dagster definitions.

No run refreshes them: the sweeper reports the asset and the three metastore checks
with its sweeps, the watch sensor ``sweeper_is_sweeping``. The asset's *Materialize*
and a check's *Execute* compute the same results on demand, in a run.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetExecutionContext,
    MaterializeResult,
    asset,
    asset_check,
)

from polaris_pipeline.dagster.backlog.checks import (
    DEAD_CHECK,
    FAILING_CHECK,
    FRESHNESS_CHECK,
    METASTORE_CHECKS,
    ORPHAN_CHECK,
    evaluate_metastore_check,
)
from polaris_pipeline.dagster.backlog.freshness import freshness_of
from polaris_pipeline.dagster.backlog.report import (
    ASSET_NAME,
    backlog_lines,
    backlog_metadata,
    read_report,
)
from polaris_pipeline.dagster.backlog.restorable import RESTORABLE_CHECK, evaluate_restorable_check
from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.dagster.backlog.watch import WATCH_NAME
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings


@asset(
    name=ASSET_NAME,
    group_name="polaris",
    kinds={"polaris"},
    description=(
        "Cleanup tasks by state (pending, orphaned, leased, backing-off, dead, held: a purge "
        "on hold), their total, how long the longest-waiting orphan has waited and how long "
        "ago the oldest held table was dropped, in seconds: over all realms, and per "
        "realm under keys such as POLARIS/orphaned. Reported by the sweeper sensor with its "
        "sweeps; Materialize refreshes it now."
    ),
)
def polaris_task_backlog(
    context: AssetExecutionContext, metastore: PolarisMetastoreResource
) -> MaterializeResult:
    report = read_report(metastore.get_metastore(), metastore.realms)
    for line in backlog_lines(report):
        context.log.info(line)
    return MaterializeResult(metadata=backlog_metadata(report.backlogs))


_CHECK_DESCRIPTIONS = {
    DEAD_CHECK: (
        "Fails while tasks are dead-lettered after exhausting their attempts: their files stay in "
        "storage until an operator fixes the cause and requeues them."
    ),
    FAILING_CHECK: (
        "Fails on permanent failures (ERROR: dead-lettered at once, retrying cannot heal them) "
        "and on tasks backing off after many attempts (WARN: many_attempts of the backlog "
        "resource)."
    ),
    ORPHAN_CHECK: (
        "Fails when a task has been available to the sweepers for longer than the threshold "
        "(max_orphan_age_seconds of the backlog resource, default 1 h)."
    ),
}


def _metastore_check(name: str) -> AssetChecksDefinition:
    """The check ``name``: the sweeper reports it; Execute runs the same evaluation."""

    @asset_check(
        asset=polaris_task_backlog,
        name=name,
        description=_CHECK_DESCRIPTIONS[name] + " Reported by the sweeper sensor with its sweeps.",
    )
    def _check(metastore: PolarisMetastoreResource, backlog: BacklogSettings) -> AssetCheckResult:
        report = read_report(metastore.get_metastore(), metastore.realms)
        return evaluate_metastore_check(name, report, backlog)

    return _check


no_dead_tasks, no_failing_tasks, no_stale_orphans = (
    _metastore_check(name) for name in METASTORE_CHECKS
)


@asset_check(
    asset=polaris_task_backlog,
    name=RESTORABLE_CHECK,
    description=(
        "Fails when a held table (its purge on hold, hold_days) is no longer restorable: "
        "files its last metadata names are missing, so Polaris (or something else) still "
        "deletes on that storage and the hold cannot protect it. Read-only; passes when "
        "nothing is held."
    ),
)
def held_tables_restorable(
    metastore: PolarisMetastoreResource, storage: PolarisStorageResource, backlog: BacklogSettings
) -> AssetCheckResult:
    return evaluate_restorable_check(
        metastore.get_metastore(), storage.get_resolver(), backlog.sample_size
    )


@asset_check(
    asset=polaris_task_backlog,
    name=FRESHNESS_CHECK,
    description=(
        "Fails when the sweeper sensor has not swept for freshness_intervals of its intervals "
        "(the sensor is stopped, or its ticks fail). Reported by the "
        f"{WATCH_NAME} sensor: a daemon that is down reports nothing, so the last report ages."
    ),
)
def sweeper_is_sweeping(
    context: AssetCheckExecutionContext, sweeper: SweeperSettings, backlog: BacklogSettings
) -> AssetCheckResult:
    return freshness_of(context.instance, sweeper, backlog)


BACKLOG_CHECKS = [no_dead_tasks, no_failing_tasks, no_stale_orphans, sweeper_is_sweeping]
# Checks that read storage too (the storage resource): held tables' files.
STORAGE_CHECKS = [held_tables_restorable]
