"""The restore section: the catalog's Iceberg REST endpoint a held table is registered with.

The CLI has it as a block of ``PipelineSettings`` (``--rest-uri``, ``--catalog``); a
Dagster deployment as its ``restore`` resource, under the restore op's config.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.section import Section, blank_is_none

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

    _text = field_validator("rest_uri", "catalog", "client_id")(blank_is_none)

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        return value.strip() or DEFAULT_SCOPE
