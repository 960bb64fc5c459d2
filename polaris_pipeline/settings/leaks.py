"""The leaks section: the leak report's threshold, catalogs, schedule and reclaim age."""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.leaks.reclaim import MIN_AGE_FLOOR_DAYS, check_min_age_days
from polaris_pipeline.settings.bounds import at_least
from polaris_pipeline.settings.section import Section, nonblank_cron


class LeakSection(Section):
    """The leak report's threshold, catalogs and schedule (off by default: it lists whole
    catalogs), and the youngest object a reclaim deletes."""

    max_bytes: int = Field(
        default=0,
        description="The check warns when more bytes than this are leaked (0: any leak).",
    )
    catalogs: list[str] | None = Field(
        default=None, description="Catalogs whose locations are walked; null: every catalog."
    )
    cron: str = Field(default="0 4 * * 0", description="When the report's schedule ticks.")
    # Below a day a reclaim could race a writer (a table being created at the root).
    min_age_days: float = Field(
        default=7.0,
        description=(
            f"A reclaim deletes only objects last modified at least this many days ago "
            f"(at least {MIN_AGE_FLOOR_DAYS:g})."
        ),
    )

    auto_reclaim_catalogs: list[str] = Field(
        default_factory=list,
        description=(
            "Catalogs whose reported roots the scheduled report reclaims (those whose newest "
            "object is older than min_age_days); empty: the report deletes nothing."
        ),
    )

    @field_validator("max_bytes")
    @classmethod
    def _bytes(cls, value: int) -> int:
        at_least(value, 0, "the leaked bytes")
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return nonblank_cron(value)

    @field_validator("min_age_days")
    @classmethod
    def _age(cls, value: float) -> float:
        check_min_age_days(value)
        return value
