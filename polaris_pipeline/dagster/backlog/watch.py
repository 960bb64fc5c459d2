"""``polaris_sweeper_watch``: the sensor that reports ``sweeper_is_sweeping``.

A sweeper cannot report that it stopped, so this sensor, which reads only the
Dagster instance, reports it from the sweeper's stored state.
"""

from dagster import (
    DefaultSensorStatus,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from polaris_pipeline.dagster.backlog.checks import FRESHNESS_CHECK, check_evaluation
from polaris_pipeline.dagster.backlog.freshness import freshness_of
from polaris_pipeline.dagster.backlog.report import ASSET_NAME
from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.sweeper_state import SENSOR_NAME

WATCH_NAME = "polaris_sweeper_watch"
# The watch reads one instigator state per evaluation: cheap, and a stopped
# sweeper shows within a minute.
WATCH_INTERVAL_SECONDS = 30


@sensor(
    name=WATCH_NAME,
    minimum_interval_seconds=WATCH_INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        f"Reports the {FRESHNESS_CHECK} check of {ASSET_NAME} from the stored state of "
        f"{SENSOR_NAME}: a sweeper that is stopped or failing cannot report it itself. "
        "Reads the Dagster instance only."
    ),
)
def polaris_sweeper_watch(
    context: SensorEvaluationContext, sweeper: SweeperSettings, backlog: BacklogSettings
) -> SensorResult:
    """Reports ``sweeper_is_sweeping`` (never the metastore: the instance only)."""
    result = freshness_of(context.instance, sweeper, backlog)
    verdict = "passed" if result.passed else f"failed: {result.description}"
    return SensorResult(
        asset_events=[check_evaluation(FRESHNESS_CHECK, result)],
        skip_reason=f"{FRESHNESS_CHECK} {verdict}",
    )
