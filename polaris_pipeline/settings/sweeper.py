"""The sweeper section: the sensor's cadence and bounds, and whether it starts by itself."""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.bounds import finite, minimum
from polaris_pipeline.settings.section import Section


class SweeperSection(Section):
    """How often the sweeper leases, and how much per tick."""

    interval_seconds: float = Field(
        default=60.0, description="Base time between two sweeps of the metastore."
    )
    jitter: float = Field(
        default=0.2,
        description=(
            "Up to this fraction of the interval is added at random to each wait, so "
            "several deployments sweeping one metastore do not fall into step."
        ),
    )
    max_runs_per_tick: int = Field(
        default=200,
        description=(
            "Most tasks leased (runs requested) by one tick; keeps a tick far from "
            "Dagster's 60 s sensor limit whatever the backlog."
        ),
    )
    max_pending_runs: int = Field(
        default=400,
        description=(
            "Most runs of the task job that may wait to start (queued, not started, "
            "starting): the sweeper requests no more while this many wait. A waiting run "
            "holds no lease; the cap keeps the queue to what drains in reasonable time."
        ),
    )
    autostart: bool | None = Field(
        default=None,
        description=(
            "Whether the sweeper sensor starts by itself. Null: yes, except under `dagster "
            "dev` / `dg dev` (a development start pointed at a production metastore must not "
            "purge by surprise). A status set in the UI beats it."
        ),
    )

    _interval = field_validator("interval_seconds")(minimum(0, "the sweep interval"))

    @field_validator("jitter")
    @classmethod
    def _jitter(cls, value: float) -> float:
        if not 0 <= finite(value, "the jitter") <= 10:
            raise ValueError("the jitter is a fraction of the interval between 0 and 10")
        return value

    _runs = field_validator("max_runs_per_tick", "max_pending_runs")(
        minimum(1, "the runs per tick and the pending runs")
    )
