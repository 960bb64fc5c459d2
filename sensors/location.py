"""This deployment's sensors: the sweeper that launches the task job, its watch, the run
report and, when the environment names a webhook or an address, the alerts."""

from dagster import SensorDefinition

from jobs.location import task_job
from polaris_pipeline.dagster.definitions import build_sensors
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from resources.location import DEPLOYMENT, resources

sensors: list[SensorDefinition] = build_sensors(
    task_job,
    resources,
    alerts=DEPLOYMENT.alerts,
    translator=DEFAULT_TRANSLATOR,
)
