"""The ``sweeper`` resource: cadence and bounds of the task sweeper sensor."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

# Environment variables read by ``SweeperSettings.from_env`` (definitions.py uses it).
INTERVAL_ENV = "POLARIS_PIPELINE_SWEEP_INTERVAL_S"
JITTER_ENV = "POLARIS_PIPELINE_SWEEP_JITTER"
MAX_RUNS_ENV = "POLARIS_PIPELINE_SWEEP_MAX_RUNS"
MAX_PENDING_ENV = "POLARIS_PIPELINE_SWEEP_MAX_PENDING_RUNS"


class SweeperSettings(ConfigurableResource):
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
            "starting). A run must start within the lease timeout or its lease lapses, "
            "so the sweeper stops leasing while this many are waiting."
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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SweeperSettings:
        """Defaults, overridden by the POLARIS_PIPELINE_SWEEP_* variables that are set."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, field, kind in (
            (INTERVAL_ENV, "interval_seconds", float),
            (JITTER_ENV, "jitter", float),
            (MAX_RUNS_ENV, "max_runs_per_tick", int),
            (MAX_PENDING_ENV, "max_pending_runs", int),
        ):
            raw = env.get(name)
            if raw:
                try:
                    values[field] = kind(raw)
                except ValueError:
                    raise ValueError(f"{name}={raw!r} is not a {kind.__name__}") from None
        return cls(**values).validated()
