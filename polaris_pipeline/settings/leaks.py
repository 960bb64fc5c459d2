"""The leaks section: the leak report's threshold, catalogs, schedule and reclaim age."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from polaris_pipeline.settings.bounds import JAVA_LONG_MAX_DAYS, at_least, at_most, finite, minimum
from polaris_pipeline.settings.section import Section, names, nonblank_cron

# Below a day a reclaim could race a writer (a table being created at the root).
MIN_AGE_FLOOR_DAYS = 1.0


def checked_min_age_days(days: float) -> float:
    """``days``; ValueError unless a finite number of at least ``MIN_AGE_FLOOR_DAYS`` (the
    one rule of a reclaim's minimum age: the section, the flag and the reclaim call this)."""
    what = "a reclaim's minimum age in days"
    try:
        at_least(finite(days, what), MIN_AGE_FLOOR_DAYS, what)
        # In milliseconds it is a Java long, as every time Polaris stores.
        at_most(days, JAVA_LONG_MAX_DAYS, what)
    except ValueError as exc:
        # Given as a number (a flag, a run's config): the message says which.
        raise ValueError(f"{exc}, not {days:g}") from None
    return days


class LeakSection(Section):
    """The leak report's threshold, catalogs and schedule (off by default: it lists whole
    catalogs), and the youngest object a reclaim deletes."""

    max_bytes: int = Field(
        default=0,
        description="The check warns when more bytes than this are leaked (0: any leak).",
    )
    catalogs: list[str] | None = Field(
        default=None,
        description=(
            "Catalogs whose locations are walked (ownership is still judged against every "
            "realm and catalog); null: every catalog."
        ),
    )
    cron: str = Field(default="0 4 * * 0", description="When the report's schedule ticks.")
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

    @field_validator("catalogs", "auto_reclaim_catalogs")
    @classmethod
    def _catalogs(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # Only auto_reclaim_catalogs' own default names none.
        return names(value, "catalog", may_be_empty=info.field_name == "auto_reclaim_catalogs")

    _bytes = field_validator("max_bytes")(minimum(0, "the leaked bytes"))
    _cron = field_validator("cron")(nonblank_cron)
    _age = field_validator("min_age_days")(checked_min_age_days)
