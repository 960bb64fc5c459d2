"""The retention section: how long finished runs of the task job are kept (opt-in)."""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.bounds import at_most, minimum
from polaris_pipeline.settings.section import Section, nonblank_cron

# A century. The job reads a run's age as a date (now minus the days): a million days
# went before year 1 and failed every tick. Longer than this is for ever: leave it unset.
MOST_DAYS_KEPT = 36_500


def _days_kept(days: int | None) -> int | None:
    minimum(1, "the days a run is kept")(days)
    if days is not None:
        at_most(days, MOST_DAYS_KEPT, "the days a run is kept (unset: for ever)")
    return days


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

    _days = field_validator("success_days", "failure_days")(_days_kept)
    _batch = field_validator("batch_size")(minimum(1, "the runs deleted per tick"))
    _cron = field_validator("cron")(nonblank_cron)

    @property
    def enabled(self) -> bool:
        """Whether an age is configured: without one, nothing is ever deleted."""
        return self.success_days is not None or self.failure_days is not None
