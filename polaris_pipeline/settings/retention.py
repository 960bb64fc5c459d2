"""The retention section: how long finished runs of the task job are kept (opt-in)."""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.bounds import minimum
from polaris_pipeline.settings.section import Section, nonblank_cron


class RetentionSection(Section):
    """How long finished runs of the task job are kept, and how much goes per tick."""

    success_days: int | None = Field(
        default=None,
        description="Days a successful run is kept after its last update; null: for ever.",
    )
    failure_days: int | None = Field(
        default=None,
        description=(
            "Days a failed or canceled run is kept after its last update; null: for ever. "
            "Keep it longer than success_days: failures are the runs one reads again."
        ),
    )
    batch_size: int = Field(
        default=1000, description="Most runs deleted by one run of the retention job (one tick)."
    )
    dry_run: bool = Field(
        default=False, description="Record what would be deleted; delete nothing."
    )
    cron: str = Field(default="0 * * * *", description="When the retention schedule ticks.")

    _days = field_validator("success_days", "failure_days")(minimum(1, "the days a run is kept"))
    _batch = field_validator("batch_size")(minimum(1, "the runs deleted per tick"))
    _cron = field_validator("cron")(nonblank_cron)

    @property
    def enabled(self) -> bool:
        """Whether an age is configured: without one, nothing is ever deleted."""
        return self.success_days is not None or self.failure_days is not None
