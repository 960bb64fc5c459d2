"""The ``sweeper`` resource: cadence and bounds of the task sweeper sensor."""

from __future__ import annotations

from dagster import ConfigurableResource

from polaris_pipeline.settings import SweeperSection


class SweeperSettings(ConfigurableResource, SweeperSection):
    """How often the sweeper leases, and how much per tick: ``SweeperSection``'s fields."""
