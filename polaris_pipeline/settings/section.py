"""What every section of the configuration shares: its model base and its checks.

A section is a typed, frozen pydantic model (pyiceberg's models are the example).
The Dagster resources are these sections with Dagster's base added, so each
field, default and rule is declared once, here, and checked by pydantic wherever
a section is built: from the environment, from flags, by ``build_defs`` or by the
component's YAML.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.storage.redact import masked_repr_args
from polaris_pipeline.storage.uri import split_uri


class SettingsError(PolarisPipelineError, ValueError):
    """A setting has a bad value; the message names its variable, flag or field."""


class Section(BaseModel):
    """One section of the configuration: frozen, and no key it does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, values: Any) -> Any:
        # pydantic's own refusal says only "Extra inputs are not permitted": name the
        # nearest field, as a typo in a YAML block usually is one.
        if isinstance(values, dict):
            fields = set(cls.model_fields) | {
                f.alias for f in cls.model_fields.values() if f.alias is not None
            }
            for key in values:
                if isinstance(key, str) and key not in fields:
                    hint = nearest(key, fields)
                    raise ValueError(f"unknown setting {key!r} of {cls.__name__}{hint}")
        return values

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A URL's password, an inline storage option's key: masked in every repr.
        return masked_repr_args(super().__repr_args__())


def nearest(name: str, names: Iterable[str]) -> str:
    """ " (did you mean X?)" for the name of ``names`` nearest ``name``; "" for none."""
    close = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def first_problem(exc: ValidationError) -> str:
    """The first problem of ``exc``, one line, without the field its caller names."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    inner = ".".join(str(part) for part in first["loc"][1:])
    return f"{inner}: {message}" if inner else message


def blank_is_none(value: str | None) -> str | None:
    """A field's validator: the text stripped; None when it is unset or blank."""
    return value.strip() or None if value is not None else None


def names(value: list[str] | None, what: str, *, may_be_empty: bool = False) -> list[str] | None:
    """A list of names given whole (a YAML block, ``build_defs``): stripped, each once, as a
    variable's comma-separated list is read; a blank name (or none, unless
    ``may_be_empty``) is refused. None (unset) passes."""
    if value is None:
        return None
    given = list(dict.fromkeys(name.strip() for name in value))
    if not all(given) or not (given or may_be_empty):
        raise ValueError(f"each {what} must be a non-empty name")
    return given


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
