"""The guard section: how long one shared-location guard check may take.

Read by the process that runs the check, from its own environment (a bound for
this host's metastore), so it is not a block of ``PipelineSettings``.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.bounds import finite
from polaris_pipeline.settings.section import Section


class GuardSection(Section):
    """The bound of each guard check: past it the attempt fails and is retried."""

    bound_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Seconds one guard check may take before the attempt fails (retried later; "
            "nothing is deleted on a guess)."
        ),
    )

    @field_validator("bound_s")
    @classmethod
    def _bound(cls, value: float) -> float:
        return finite(value, "the guard bound")
