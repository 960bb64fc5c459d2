"""``PolarisSweeper``: the integration as a ``dg`` Component.

A few lines of ``defs.yaml`` give the sweeper sensor, the task and backfill jobs, the
backlog asset and checks. Each block resolves into its resource (as dagster-sling's
``sling:``), spelt as the resource spells it::

    type: polaris_pipeline.dagster.PolarisSweeper
    attributes:
      metastore:
        url: "{{ env.POLARIS_METASTORE_URL }}"
        realms: [POLARIS]
        realm_overrides: {TEST: {lease_timeout_ms: 60000}}
        guard: {bound_s: 30}
      storage: {config_path: /etc/polaris-pipeline/storage.yaml}
      sweeper: {interval_seconds: 60, jitter: 0.2}
      retention: {success_days: 14, failure_days: 90}
      restore:
        rest_uri: https://polaris.example.com/api/catalog
        catalog: lake
        client_id: pp
        client_secret: "{{ env.RESTORE_SECRET }}"
      executor: in_process

What is left out keeps the library's default (``polaris_pipeline.settings``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import Field

from polaris_pipeline.dagster.backlog import BacklogSettings
from polaris_pipeline.dagster.definitions import build_defs
from polaris_pipeline.dagster.leaks import LeakSettings
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.restore import PolarisRestoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings
from polaris_pipeline.dagster.retention import RetentionSettings
from polaris_pipeline.dagster.translator import translator_from_path
from polaris_pipeline.settings import AlertSection
from polaris_pipeline.storage.redact import masked_repr_args


def _as_env_var(value: str) -> str | dg.EnvVar:
    """``value`` as a reference to the variable it came from, when one holds it: ``{{ env.NAME }}``
    resolves to the URL itself, and the variable keeps the password off the UI's resource page.
    """
    for name, env_value in os.environ.items():
        if env_value == value and name.isupper():
            return dg.EnvVar(name)
    return value


def _templated(context: dg.ResolutionContext, value: Any) -> Any:
    """``value`` with its ``{{ ... }}`` strings rendered, and nothing else touched: the
    block was already read by its resource's model (``"1.7"`` must stay text)."""
    if isinstance(value, str):
        return context.resolve_value(value) if "{{" in value else value
    if isinstance(value, dict):
        return {k: _templated(context, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_templated(context, v) for v in value]
    return value


def _block(
    resource_type: type[dg.ConfigurableResource],
    adapt: Callable[[dict[str, Any]], dict[str, Any]] = lambda values: values,
) -> Any:
    """A block resolved into ``resource_type`` itself, its rendered values ``adapt``-ed."""

    def resolve(context: dg.ResolutionContext, block: Any) -> Any:
        if block is None:
            return None
        values = _templated(context, block.model_dump(exclude_unset=True))
        return resource_type(**adapt(values))

    return dg.Resolver(resolve, model_field_type=resource_type | None)


def _url_as_env_var(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "url": _as_env_var(values["url"])}


def _secret_as_env_var(values: dict[str, Any]) -> dict[str, Any]:
    secret = values.get("client_secret")
    return {**values, "client_secret": _as_env_var(secret)} if secret else values


def _alerts(context: dg.ResolutionContext, block: Any) -> AlertSection | None:
    return None if block is None else AlertSection(**_templated(context, block))


class PolarisSweeper(dg.Component, dg.Model, dg.Resolvable):
    """Guaranteed execution of Apache Polaris cleanup tasks: sensor, jobs, backlog, checks."""

    metastore: Annotated[
        PolarisMetastoreResource | None, _block(PolarisMetastoreResource, _url_as_env_var)
    ] = Field(
        default=None,
        description="The metastore, its realms' task policy and its guard checks' bound.",
    )
    storage: Annotated[PolarisStorageResource | None, _block(PolarisStorageResource)] = Field(
        default=None, description="Filesystem options, allowed prefixes, deletion record."
    )
    sweeper: Annotated[SweeperSettings | None, _block(SweeperSettings)] = Field(
        default=None, description="The sweeper's cadence, bounds and autostart."
    )
    backlog: Annotated[BacklogSettings | None, _block(BacklogSettings)] = Field(
        default=None, description="The backlog checks' thresholds."
    )
    retention: Annotated[RetentionSettings | None, _block(RetentionSettings)] = Field(
        default=None, description="Run retention (opt-in: no job without an age)."
    )
    leaks: Annotated[LeakSettings | None, _block(LeakSettings)] = Field(
        default=None, description="The leak report's threshold, catalogs, schedule."
    )
    restore: Annotated[
        PolarisRestoreResource | None, _block(PolarisRestoreResource, _secret_as_env_var)
    ] = Field(
        default=None,
        description=(
            "The restore job's Iceberg REST endpoint and OAuth2 client; write the secret "
            'as a template: client_secret: "{{ env.RESTORE_SECRET }}".'
        ),
    )
    # Read after its templates are rendered: a secret is written as one (its value is
    # not a URL until then). Alerts are no resource: the section itself.
    alerts: Annotated[
        AlertSection | None,
        dg.Resolver(_alerts, model_field_type=dict[str, Any] | None),
    ] = Field(
        default=None,
        description=(
            "Where failed runs and failing checks are sent (none: no alert sensor); write "
            'the secrets as templates: webhook_url: "{{ env.SLACK_WEBHOOK }}".'
        ),
    )
    executor: Literal["multiprocess", "in_process", "celery"] | None = Field(
        default=None, description="How the task job's steps run; null: in the run's process."
    )
    translator: str | None = Field(
        default=None,
        description=(
            "A PolarisTranslator subclass deciding run tags, metadata and asset keys: "
            "my_pkg.module.MyTranslator; null: the library's."
        ),
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A block's URL may be the URL itself, its password in it.
        return masked_repr_args(super().__repr_args__())

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return build_defs(
            metastore=self._metastore(),
            storage=self.storage,
            sweeper=self.sweeper,
            backlog=self.backlog,
            retention=self.retention,
            leaks=self.leaks,
            restore=self.restore,
            executor=self.executor,
            alerts=self.alerts,
            translator=translator_from_path(self.translator) if self.translator else None,
        )

    def _metastore(self) -> PolarisMetastoreResource:
        if self.metastore is None:
            raise ValueError("PolarisSweeper: set metastore.url")
        return self.metastore
