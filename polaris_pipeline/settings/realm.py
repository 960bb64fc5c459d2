"""A realm's own task policy (``RealmOverride``) and the rules of the policy's numbers.

The metastore section nests it (``realm_overrides``), the Dagster resource and the
component too; ``TaskPolicy`` (tasks/model.py) resolves it per realm.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from polaris_pipeline.errors import first_error
from polaris_pipeline.settings.bounds import JAVA_LONG_MAX, JAVA_LONG_MAX_DAYS, at_most
from polaris_pipeline.settings.section import Section, nearest
from polaris_pipeline.tasks.release import PolarisRelease
from polaris_pipeline.unreferenced.mode import UnreferencedMode

# Polaris's TABLE_METADATA_CLEANUP_BATCH_SIZE default.
DEFAULT_METADATA_BATCH_SIZE = 10


def check_hold_days(days: object) -> object:
    """``days``: a finite number of days, 0 (off) or more, at most a Java long's worth of
    milliseconds, or None; a bool is not a number."""
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, int | float):
        raise ValueError("a hold must be a number of days")
    if not math.isfinite(days) or days < 0:
        raise ValueError("a hold must be 0 (off) or a positive number of days")
    # In milliseconds it is a Java long, as every time Polaris stores.
    at_most(days, JAVA_LONG_MAX_DAYS, "a hold in days")
    return days


def hold_days_ms(days: float) -> int:
    """``days`` of hold in milliseconds (the rule's unit)."""
    return round(days * 86_400_000)


def check_lease_timing(lease_timeout_ms: int | None, grace_ms: int | None) -> None:
    if lease_timeout_ms is not None and lease_timeout_ms <= 0:
        raise ValueError("lease timeout must be positive")
    if grace_ms is not None and grace_ms < 0:
        raise ValueError("grace period must not be negative")


def check_max_attempts(attempts: int) -> None:
    if attempts < 1:
        raise ValueError("max attempts must be at least 1")


def check_batch_size(size: int | None) -> None:
    if size is not None and size < 1:
        raise ValueError("metadata batch size must be at least 1")


def check_policy_number(field: str, value: int) -> None:
    """The rule of the task policy's number ``field`` (``lease_timeout_ms``, ``grace_ms``,
    ``max_attempts``, ``metadata_batch_size``): the section's and a realm's own alike."""
    at_most(value, JAVA_LONG_MAX, field.replace("_", " "))
    if field == "max_attempts":
        check_max_attempts(value)
    elif field == "metadata_batch_size":
        check_batch_size(value)
    elif field == "grace_ms":
        check_lease_timing(None, value)
    else:
        check_lease_timing(value, None)


def release_text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("polaris_version must be a release such as 1.7 or 1.4.1")
    return PolarisRelease.normalise(value)


# Overrides whose values are text, not integers.
_TEXT_OVERRIDES = frozenset({"unreferenced", "polaris_version"})
# Overrides that are any number, not only an integer.
_NUMBER_OVERRIDES = frozenset({"hold_days"})


class RealmOverride(Section):
    """One realm's own values; a field left None takes the global one.

    Polaris lets a realm override ``POLARIS_TASK_TIMEOUT_MILLIS`` and
    ``TABLE_METADATA_CLEANUP_BATCH_SIZE``; the grace period follows the realm's lease
    timeout unless set, here or globally. A section of its own (frozen, an unknown key
    named with the nearest field): the settings, the ``metastore`` resource and the
    component all nest this one (``realm_overrides``), each rule checked here.
    """

    lease_timeout_ms: int | None = Field(
        default=None, description="The realm's POLARIS_TASK_TIMEOUT_MILLIS."
    )
    grace_ms: int | None = Field(
        default=None,
        description="The realm's grace period; null: the global grace_ms, else its lease timeout.",
    )
    metadata_batch_size: int | None = Field(
        default=None, description="The realm's TABLE_METADATA_CLEANUP_BATCH_SIZE."
    )
    unreferenced: str | None = Field(
        default=None, description="The realm's own unreferenced mode: off, report or delete."
    )
    # Realms of one metastore may be served by different deployments.
    polaris_version: str | None = Field(
        default=None, description="The Polaris release serving the realm (1.7, 1.4.1)."
    )
    hold_days: float | None = Field(
        default=None,
        description="Days a dropped table's purge is held in this realm's catalogs (0: off).",
    )

    _hold = field_validator("hold_days", mode="before")(check_hold_days)

    @field_validator("unreferenced")
    @classmethod
    def _mode(cls, value: str | None) -> str | None:
        return None if value is None else UnreferencedMode.parse(value).value

    @field_validator("polaris_version", mode="before")
    @classmethod
    def _release(cls, value: object) -> str | None:
        return None if value is None else release_text(value)

    @field_validator("lease_timeout_ms", "grace_ms", "metadata_batch_size")
    @classmethod
    def _number(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None:
            check_policy_number(str(info.field_name), value)
        return value

    @classmethod
    def from_json_obj(cls, value: object, *, realm: str = "?") -> RealmOverride:
        """From ``{"lease_timeout_ms": .., "grace_ms": .., "metadata_batch_size": ..}``.

        Unknown keys (with the nearest override's name) and non-integer values are a
        ValueError naming the realm, so a typo in a setting is not silently the default.
        """
        if isinstance(value, RealmOverride):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"realm {realm!r}: overrides must be a JSON object")
        unknown = sorted(str(k) for k in value if k not in cls.model_fields)
        if unknown:
            hint = nearest(unknown[0], cls.model_fields)
            raise ValueError(f"realm {realm!r}: unknown override(s) {', '.join(unknown)}{hint}")
        for key, item in value.items():
            if key in _TEXT_OVERRIDES:
                continue  # text, checked by the validators
            if key in _NUMBER_OVERRIDES:
                try:
                    check_hold_days(item)
                except ValueError as exc:
                    raise ValueError(f"realm {realm!r}: {key}: {exc}") from None
                continue
            if item is not None and (isinstance(item, bool) or not isinstance(item, int)):
                raise ValueError(f"realm {realm!r}: {key} must be an integer")
        try:
            return cls(**{str(k): v for k, v in value.items()})
        except ValidationError as exc:
            raise ValueError(f"realm {realm!r}: {first_error(exc)}") from None
