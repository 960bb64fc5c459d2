"""The storage section: where table files live, which prefixes may be deleted, the record.

Either a storage config file (``config_path``, else no rules: local files and the
default credential chain), or the same content inline (``locations``,
``allowed_prefixes``). Secrets belong in the file or inline as ``{env: NAME}``,
resolved when the config is loaded, so neither the UI nor the run config shows them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from polaris_pipeline.settings.section import Section, blank_is_none, uri_prefix

# Older than the rule that spells a variable from its field: the field names it.
CONFIG_ENV_VAR = "POLARIS_PIPELINE_STORAGE_CONFIG"
DELETION_RECORD_ENV = "POLARIS_PIPELINE_DELETION_RECORD"


class StorageSection(Section):
    """Filesystem options per location prefix, and the prefixes deletion is confined to."""

    config_path: str | None = Field(
        default=None,
        description=(
            "Storage config file (YAML or JSON); with none set, no rules apply (local files "
            "and the default credential chain)."
        ),
        json_schema_extra={"env": CONFIG_ENV_VAR},
    )
    locations: list[dict[str, Any]] | None = Field(
        default=None,
        description=(
            "Inline instead of a file: [{prefix: s3://bucket/wh, options: {...}}]. "
            "Write secrets as {env: NAME}."
        ),
        json_schema_extra={"env": None},
    )
    allowed_prefixes: list[str] | None = Field(
        default=None,
        description="Inline instead of a file: prefixes outside which nothing is deleted.",
        json_schema_extra={"env": None},
    )
    deletion_record: str | None = Field(
        default=None,
        description=(
            "fsspec URI prefix (s3://audit/polaris-pipeline/, file:///var/log/pp/) under which "
            "every attempt that deletes anything writes the paths it deleted, one JSON Lines "
            "file per attempt, reached through this storage config; null: no record."
        ),
        json_schema_extra={"env": DELETION_RECORD_ENV},
    )

    _path = field_validator("config_path")(blank_is_none)

    @field_validator("deletion_record")
    @classmethod
    def _record(cls, value: str | None) -> str | None:
        # Checked when read, not at the first delete: a typo would otherwise fail
        # every attempt of a sweep, one by one.
        return None if value is None else uri_prefix(value, "the deletion record prefix")

    @model_validator(mode="after")
    def _one_source(self) -> StorageSection:
        if self.inline() is not None and self.config_path is not None:
            raise ValueError("set either config_path or locations/allowed_prefixes, not both")
        return self

    def inline(self) -> dict[str, Any] | None:
        """The rules given inline, as a storage config file holds them; None: none are
        (the file's apply, if one is named)."""
        if self.locations is None and self.allowed_prefixes is None:
            return None
        return {
            "locations": list(self.locations or []),
            "allowed_prefixes": list(self.allowed_prefixes or []),
        }
