"""The restore section: the catalog's Iceberg REST endpoint a held table is registered with.

Read by the command or the op that restores, from its own environment, under the
flags or the op's config it was given; not a block of ``PipelineSettings``.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.section import Section

# Polaris's: every role the principal holds.
DEFAULT_SCOPE = "PRINCIPAL_ROLE:ALL"


class RestoreSection(Section):
    """Where and as whom a restored table is registered; no endpoint: print the calls."""

    rest_uri: str | None = Field(
        default=None,
        description="The catalog's Iceberg REST endpoint; null: print the calls, change nothing.",
    )
    catalog: str | None = Field(
        default=None, description="The catalog's name, the REST prefix (required to restore)."
    )
    client_id: str | None = Field(default=None, description="OAuth2 client id.")
    client_secret: str | None = Field(
        default=None, repr=False, description="OAuth2 client secret; never shown."
    )
    scope: str = Field(default=DEFAULT_SCOPE, description="OAuth2 scope.")

    @field_validator("rest_uri", "catalog", "client_id")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        return value.strip() or DEFAULT_SCOPE
