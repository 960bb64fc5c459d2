"""This repository's code location: what ``workspace.yaml`` loads.

Composed from this location's own modules, one per kind: ``resources.location``
(read from the environment: ``POLARIS_METASTORE_URL``, ``POLARIS_PIPELINE_*``,
docs/dagster.md), ``jobs.location``, ``sensors.location`` and
``assets.location``, each built from the library's pieces
(tests/test_code_location.py names what it holds).
"""

from assets.location import asset_checks, assets
from jobs.location import jobs, schedules
from polaris_pipeline.dagster.definitions import compose_defs
from resources.location import resources
from sensors.location import sensors

# The only Definitions object at module scope: the code location.
defs = compose_defs(
    resources,
    assets=assets,
    asset_checks=asset_checks,
    jobs=jobs,
    schedules=schedules,
    sensors=sensors,
)
