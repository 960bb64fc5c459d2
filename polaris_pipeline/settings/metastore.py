"""The metastore section: where the tasks are, which realms, and each realm's task policy.

Each default of the task policy is declared here; ``TaskPolicy.from_section``
(tasks/model.py) resolves the section into the policy every ``Metastore`` and
``Runner`` is built with, so no caller can leave a setting out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from polaris_pipeline.settings.realm import (
    DEFAULT_METADATA_BATCH_SIZE,
    RealmOverride,
    check_hold_days,
    check_policy_number,
)
from polaris_pipeline.settings.section import Section, names
from polaris_pipeline.tasks.release import ALWAYS, PolarisRelease, TaskEvents, parse_task_events
from polaris_pipeline.unreferenced.mode import DEFAULT_UNREFERENCED_MODE, UnreferencedMode

# The first part of every executor id this package writes (lastAttemptExecutorId).
DEFAULT_EXECUTOR_PREFIX = "polaris-pipeline"


class MetastoreSection(Section):
    """The Polaris metastore that holds the TASK entities, and how tasks are leased."""

    url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL of the Polaris metastore, e.g. "
            "postgresql+psycopg://user:pass@host/polaris or sqlite:///polaris.db. "
            "In Dagster pass it as EnvVar('POLARIS_METASTORE_URL') so the password stays out "
            "of the UI."
        ),
        json_schema_extra={"env": "POLARIS_METASTORE_URL"},
    )
    realms: list[str] | None = Field(
        default=None, description="Realms to sweep; null sweeps every realm that has tasks."
    )
    lease_timeout_ms: int = Field(
        default=300_000,  # Polaris's POLARIS_TASK_TIMEOUT_MILLIS
        description="Lease period; must equal Polaris's POLARIS_TASK_TIMEOUT_MILLIS.",
    )
    grace_ms: int | None = Field(
        default=None,
        description=(
            "How old a never-leased task must be before the sweeper takes it (a Polaris "
            "server may be running it in-process); null means the lease timeout."
        ),
    )
    max_attempts: int = Field(
        default=8,
        description="Attempts before a task is dead-lettered (then only requeue).",
    )
    metadata_batch_size: int = Field(
        default=DEFAULT_METADATA_BATCH_SIZE,
        description="Paths per metadata batch child; Polaris's TABLE_METADATA_CLEANUP_BATCH_SIZE.",
    )
    polaris_version: str | None = Field(
        default=None,
        description=(
            "The Polaris release serving the metastore (1.7, 1.4.1): the shape of the rows "
            "we write (BATCH payload type, task events). Null: inferred per realm from the "
            "rows Polaris wrote and the schema version (docs/polaris-releases.md)."
        ),
    )
    unreferenced: Literal["off", "report", "delete"] = Field(
        default=DEFAULT_UNREFERENCED_MODE.value,
        description=(
            "What a dropped table's run does, last, with the files under its location that "
            "its metadata no longer names: off, report (list, delete nothing) or delete."
        ),
    )
    realm_overrides: dict[str, RealmOverride] = Field(
        default_factory=dict,
        description=(
            "Realm -> its own lease_timeout_ms, grace_ms, metadata_batch_size, unreferenced, "
            "hold_days, polaris_version (Polaris lets a realm override its task timeout and "
            "batch size)."
        ),
    )
    hold_days: float = Field(
        default=0,
        description=(
            "Days a dropped table's or view's purge is held after the drop, so that it can "
            "be restored (tasks restore); 0: off. A realm's own in realm_overrides."
        ),
    )
    catalog_hold_days: dict[str, float] = Field(
        default_factory=dict,
        description="Catalog name -> its own hold in days (in every realm); beats the realm's.",
    )
    task_events: Literal["false", "true", "always"] = Field(
        default="false",
        description=(
            "Write Polaris's BEFORE/AFTER_ATTEMPT_TASK rows to its events table: true where "
            "the realm's release writes them (1.6 and later), always for every release, "
            "false (as Polaris's own listener) for none."
        ),
    )
    executor_prefix: str = Field(
        default=DEFAULT_EXECUTOR_PREFIX,
        description="First part of the executor ids written to lastAttemptExecutorId.",
    )

    @field_validator("realms")
    @classmethod
    def _realms(cls, value: list[str] | None) -> list[str] | None:
        return names(value, "realm")

    @field_validator("lease_timeout_ms", "grace_ms", "max_attempts", "metadata_batch_size")
    @classmethod
    def _policy_number(cls, value: int | None, info: ValidationInfo) -> int | None:
        # One field at a time, so an error names its variable; the rules are the policy's.
        if value is not None:
            check_policy_number(str(info.field_name), value)
        return value

    _hold = field_validator("hold_days", mode="before")(check_hold_days)

    @field_validator("catalog_hold_days", mode="before")
    @classmethod
    def _catalog_holds(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        for catalog, days in value.items():
            if not str(catalog).strip():
                raise ValueError("a catalog name must not be empty")
            try:
                check_hold_days(days)
            except ValueError as exc:
                raise ValueError(f"catalog {catalog!r}: {exc}") from None
        return value

    @field_validator("polaris_version")
    @classmethod
    def _release(cls, value: str | None) -> str | None:
        return None if value is None else PolarisRelease.normalise(value)

    @field_validator("unreferenced", mode="before")
    @classmethod
    def _mode(cls, value: object) -> str:
        return UnreferencedMode.parse(value).value

    @field_validator("task_events", mode="before")
    @classmethod
    def _events(cls, value: object) -> str:
        parsed = parse_task_events(value)
        return ALWAYS if parsed == ALWAYS else str(bool(parsed)).lower()

    @field_validator("realm_overrides", mode="before")
    @classmethod
    def _overrides(cls, value: object) -> object:
        # Integers strictly (a quoted "60000" is a typo, not a number), errors naming
        # the realm: RealmOverride's own reading. Plain mappings go on, so that a
        # subclass's own override type (the Dagster resource's) is built from them.
        if not isinstance(value, dict):
            return value
        if not all(str(realm).strip() for realm in value):
            raise ValueError("a realm name must not be empty")
        return {
            str(realm): RealmOverride.from_json_obj(o, realm=str(realm)).model_dump(
                exclude_none=True
            )
            for realm, o in value.items()
        }

    @field_validator("executor_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the executor prefix must not be empty")
        if any(c.isspace() for c in value):
            raise ValueError("the executor prefix must not contain white space")
        return value

    def events(self) -> TaskEvents:
        """The task-events setting as the Runner takes it (False, True or "always")."""
        return parse_task_events(self.task_events)

    def realm_list(self) -> list[str] | None:
        """``realms`` as the metastore's calls take it."""
        return list(self.realms) if self.realms is not None else None
