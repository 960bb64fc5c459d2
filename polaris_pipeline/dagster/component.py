"""``PolarisSweeper``: the integration as a ``dg`` Component.

A ``defs.yaml`` of a few lines gives a Dagster project the sweeper sensor, the
task and backfill jobs, the backlog asset and its checks::

    type: polaris_pipeline.dagster.PolarisSweeper
    attributes:
      metastore_url: "{{ env.POLARIS_METASTORE_URL }}"
      realms: [POLARIS]
      storage: {config_path: /etc/polaris-pipeline/storage.yaml}
      sweep: {interval_seconds: 60, jitter: 0.2}
      executor: in_process
      retention: {success_days: 14, failure_days: 90}

Every attribute left out keeps the library's default (``build_defs``).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from polaris_pipeline.dagster.definitions import build_defs
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.retention import RetentionSettings
from polaris_pipeline.dagster.translator import translator_from_path
from polaris_pipeline.tasks.model import RealmOverride
from polaris_pipeline.tasks.unreferenced_mode import DEFAULT_UNREFERENCED_MODE


class StorageModel(dg.Model):
    """Where the sweeper finds filesystem options and allowed prefixes."""

    config_path: str | None = Field(
        default=None,
        description="Storage config file; null reads $POLARIS_PIPELINE_STORAGE_CONFIG.",
    )
    locations: list[dict[str, Any]] | None = Field(
        default=None, description="Inline: [{prefix: s3://bucket/wh, options: {...}}]."
    )
    allowed_prefixes: list[str] | None = Field(
        default=None, description="Inline: prefixes outside which nothing is deleted."
    )
    deletion_record: str | None = Field(
        default=None,
        description=(
            "URI prefix of the deletion record (s3://audit/pp/): every attempt that deletes "
            "writes its paths there, one JSON Lines file each; null: none."
        ),
    )


class SweepModel(dg.Model):
    """The sweeper's cadence and bounds; unset fields keep the defaults."""

    interval_seconds: float | None = None
    jitter: float | None = None
    max_runs_per_tick: int | None = None
    max_pending_runs: int | None = None


class RetentionModel(dg.Model):
    """Run retention; unset fields keep the defaults, no age set keeps every run."""

    success_days: int | None = Field(default=None, description="Days a success is kept.")
    failure_days: int | None = Field(default=None, description="Days a failure is kept.")
    batch_size: int | None = Field(default=None, description="Most runs deleted per tick.")
    dry_run: bool | None = Field(default=None, description="List what would go, delete none.")
    cron: str | None = Field(default=None, description="When the retention schedule ticks.")


def _as_env_var(value: str) -> str | dg.EnvVar:
    """``value`` as a reference to the variable it came from, when one holds it.

    ``{{ env.NAME }}`` in a defs.yaml resolves to the URL itself; passing the
    variable instead keeps the password out of the UI's resource page.
    """
    for name, env_value in os.environ.items():
        if env_value == value and name.isupper():
            return dg.EnvVar(name)
    return value


def _set_fields(model: dg.Model | None) -> dict[str, Any]:
    """The fields ``model`` sets: the others keep the library's defaults."""
    return {k: v for k, v in (model.model_dump() if model else {}).items() if v is not None}


class PolarisSweeper(dg.Component, dg.Model, dg.Resolvable):
    """Guaranteed execution of Apache Polaris cleanup tasks: sensor, jobs, backlog, checks."""

    metastore_url: str = Field(
        description='SQLAlchemy URL of the Polaris metastore: "{{ env.POLARIS_METASTORE_URL }}".'
    )
    realms: list[str] | None = Field(default=None, description="Realms to sweep; null: all.")
    lease_timeout_ms: int | None = Field(
        default=None, description="Must equal Polaris's POLARIS_TASK_TIMEOUT_MILLIS."
    )
    grace_ms: int | None = None
    max_attempts: int | None = None
    polaris_version: str | None = Field(
        default=None,
        description=(
            "The Polaris release serving the metastore, e.g. '1.7' (quote it: YAML reads "
            "1.7 as a number); null: inferred per realm (docs/polaris-releases.md)."
        ),
    )
    realm_polaris_versions: dict[str, str] | None = Field(
        default=None, description="Realm -> the Polaris release serving it."
    )
    unreferenced: Literal["off", "report", "delete"] | None = Field(
        default=None,
        description=(
            "A dropped table's files its metadata no longer names: off, report (list, "
            "delete nothing; null: this) or delete."
        ),
    )
    storage: StorageModel | None = None
    sweep: SweepModel | None = None
    retention: RetentionModel | None = None
    executor: Literal["multiprocess", "in_process", "celery"] | None = Field(
        default=None, description="How the task job's steps run; null: one process per step."
    )
    translator: str | None = Field(
        default=None,
        description=(
            "A PolarisTranslator subclass deciding run tags, metadata and asset keys: "
            "my_pkg.module.MyTranslator; null: the library's."
        ),
    )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        storage = PolarisStorageResource(**(self.storage.model_dump() if self.storage else {}))
        return build_defs(
            metastore_url=_as_env_var(self.metastore_url),
            realms=self.realms,
            lease_timeout_ms=self.lease_timeout_ms,
            grace_ms=self.grace_ms,
            max_attempts=self.max_attempts,
            polaris_version=self.polaris_version,
            realm_overrides={
                realm: RealmOverride(polaris_version=version)
                for realm, version in (self.realm_polaris_versions or {}).items()
            }
            or None,
            unreferenced=self.unreferenced or DEFAULT_UNREFERENCED_MODE,
            storage=storage,
            sweeper=SweeperSettings(**_set_fields(self.sweep)).validated(),
            executor=self.executor,
            retention=RetentionSettings(**_set_fields(self.retention)),
            translator=translator_from_path(self.translator) if self.translator else None,
        )
