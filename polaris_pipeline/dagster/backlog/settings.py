"""The backlog resource: thresholds of the backlog checks, and how often the sweeper
reports them."""

from __future__ import annotations

from dagster import ConfigurableResource

from polaris_pipeline.settings import BacklogSection


class BacklogSettings(ConfigurableResource, BacklogSection):
    """Thresholds of the backlog checks, and how often the sweeper reports them:
    ``BacklogSection``'s fields."""
