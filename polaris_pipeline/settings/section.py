"""What every section of the configuration shares: its model base and its checks.

A section is a typed, frozen pydantic model (pyiceberg's models are the example).
The Dagster resources are these sections with Dagster's base added, so each
field, default and rule is declared once, here, and checked by pydantic wherever
a section is built: from the environment, from flags, by ``build_defs`` or by the
component's YAML.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.storage.redact import masked_repr_args
from polaris_pipeline.storage.uri import split_uri

# The prefix of every variable the package reads (but the metastore URL's).
ENV_PREFIX = "POLARIS_PIPELINE_"


class SettingsError(PolarisPipelineError, ValueError):
    """A setting has a bad value; the message names its variable, flag or field."""


class Section(BaseModel):
    """One section of the configuration: frozen, and no key it does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A URL's password, an inline storage option's key: masked in every repr.
        return masked_repr_args(super().__repr_args__())


def nonblank_cron(value: str) -> str:
    # Dagster checks the expression itself when it builds the schedule.
    if not value.strip():
        raise ValueError("a schedule must be a cron expression")
    return value.strip()


def uri_prefix(value: str, what: str) -> str:
    """``value`` as an fsspec URI prefix or absolute path, stripped; ValueError otherwise."""
    text = value.strip()
    scheme, rest = split_uri(text)
    if not text or not scheme or not rest.strip("/"):
        raise ValueError(
            f"{what} is not an fsspec URI prefix or absolute path "
            "(e.g. s3://audit/polaris-pipeline/ or file:///var/log/pp/)"
        )
    return text
