"""The backlog section: the thresholds of the backlog checks and how often they report."""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.bounds import finite
from polaris_pipeline.settings.section import Section


class BacklogSection(Section):
    """Thresholds of the backlog checks, and how often the sweeper reports them."""

    max_orphan_age_seconds: float = Field(
        default=3600.0,
        description=(
            "An orphan (a task available to the sweepers) waiting longer than this fails the "
            "no_stale_orphans check: the sweepers are not keeping up, or not running."
        ),
    )
    many_attempts: int = Field(
        default=3,
        description=(
            "A task backing off after this many attempts or more fails the no_failing_tasks "
            "check (WARN): it keeps failing for a reason an operator should look at."
        ),
    )
    freshness_intervals: float = Field(
        default=3,
        description=(
            "The sweeper_is_sweeping check fails when the sweeper has not swept for this many "
            "of its longest intervals (interval_seconds x (1 + jitter))."
        ),
    )
    sample_size: int = Field(
        default=5, description="How many tasks a failed check lists in its metadata."
    )
    report_interval_seconds: float = Field(
        default=60,
        description=(
            "The sweeper reports the backlog (the asset's numbers and its checks) with a sweep "
            "at most this often: a backlog sweeps at every evaluation, the report need not."
        ),
    )

    @field_validator("max_orphan_age_seconds", "freshness_intervals")
    @classmethod
    def _positive(cls, value: float) -> float:
        if finite(value, "a backlog threshold") <= 0:
            raise ValueError("must be positive")
        return value

    @field_validator("many_attempts", "sample_size")
    @classmethod
    def _count(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("report_interval_seconds")
    @classmethod
    def _report(cls, value: float) -> float:
        if finite(value, "the report interval") < 0:
            raise ValueError("must not be negative")
        return value
