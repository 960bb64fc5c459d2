"""The ``sweeper`` resource: cadence and bounds of the task sweeper sensor."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from polaris_pipeline.settings import (
    DEFAULT_SWEEP_INTERVAL_S,
    DEFAULT_SWEEP_JITTER,
    DEFAULT_SWEEP_MAX_PENDING_RUNS,
    DEFAULT_SWEEP_MAX_RUNS,
)


class SweeperSettings(ConfigurableResource):
    """How often the sweeper leases, and how much per tick."""

    interval_seconds: float = Field(
        default=DEFAULT_SWEEP_INTERVAL_S,
        description="Base time between two sweeps of the metastore.",
    )
    jitter: float = Field(
        default=DEFAULT_SWEEP_JITTER,
        description=(
            "Up to this fraction of the interval is added at random to each wait, so "
            "several deployments sweeping one metastore do not fall into step."
        ),
    )
    max_runs_per_tick: int = Field(
        default=DEFAULT_SWEEP_MAX_RUNS,
        description=(
            "Most tasks leased (runs requested) by one tick; keeps a tick far from "
            "Dagster's 60 s sensor limit whatever the backlog."
        ),
    )
    max_pending_runs: int = Field(
        default=DEFAULT_SWEEP_MAX_PENDING_RUNS,
        description=(
            "Most runs of the task job that may wait to start (queued, not started, "
            "starting): the sweeper requests no more while this many wait. A waiting run "
            "holds no lease; the cap keeps the queue to what drains in reasonable time."
        ),
    )

    def validated(self) -> SweeperSettings:
        if self.interval_seconds < 0:
            raise ValueError("sweeper interval_seconds must not be negative")
        if not 0 <= self.jitter <= 10:
            raise ValueError("sweeper jitter must be a fraction between 0 and 10")
        if self.max_runs_per_tick < 1 or self.max_pending_runs < 1:
            raise ValueError("sweeper max_runs_per_tick and max_pending_runs must be at least 1")
        return self
