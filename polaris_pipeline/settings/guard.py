"""The guard section: how long one shared-location guard check may take.

A bound for this host's metastore: a Dagster deployment has it as the metastore
resource's ``guard`` block (every step's Metastore is built with it); the CLI has it as a
block of ``PipelineSettings`` (``--guard-bound-s``).
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from polaris_pipeline.settings.bounds import at_most, finite
from polaris_pipeline.settings.section import Section

# PostgreSQL's statement_timeout, which bounds a check, is at most 2^31-1 ms.
MAX_BOUND_S = (2**31 - 1) // 1000


class GuardSection(Section):
    """The bound of each guard check: past it the attempt fails and is retried."""

    # Checked by the validator, not ``gt=``: a constraint in the annotation is a type the
    # component's YAML schema (the metastore block's ``guard:``) cannot read.
    bound_s: float = Field(
        default=60.0,
        description=(
            "Seconds one guard check may take before the attempt fails (retried later; "
            "nothing is deleted on a guess)."
        ),
    )

    @field_validator("bound_s")
    @classmethod
    def _bound(cls, value: float) -> float:
        if not value > 0:  # pydantic's own message, as ``gt=0`` gave
            raise PydanticCustomError("greater_than", "Input should be greater than 0")
        finite(value, "the guard bound")
        at_most(value, MAX_BOUND_S, "the guard bound")
        return value
