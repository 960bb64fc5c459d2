"""The ``restore`` resource: where and as whom the restore job registers a table.

``RestoreSection``'s fields with Dagster's base. Give the client secret as
``EnvVar("...")`` (the component and ``deployment_from_env`` do when a variable holds it):
the UI's resource page then shows the variable's name, and the value is read in the op's
process only. The section's ``repr`` never shows the secret.
"""

from __future__ import annotations

from dagster import ConfigurableResource, EnvVar

from polaris_pipeline.restore.register import RestTarget
from polaris_pipeline.settings import RestoreSection


class PolarisRestoreResource(ConfigurableResource, RestoreSection):
    """The catalog's Iceberg REST endpoint and OAuth2 client: ``RestoreSection``'s fields."""

    @classmethod
    def from_section(
        cls, section: RestoreSection, client_secret: str | EnvVar | None
    ) -> PolarisRestoreResource:
        """The resource of ``section``, its secret given as the UI should show it."""
        return cls(**section.model_dump(exclude={"client_secret"}), client_secret=client_secret)

    def target(self, rest_uri: str | None, catalog: str | None) -> RestTarget:
        """Where a run registers: the run's config (``rest_uri``, ``catalog``) over this
        resource's."""
        given = {"rest_uri": rest_uri, "catalog": catalog}
        section = RestoreSection(
            **{field: getattr(self, field) for field in RestoreSection.model_fields}
            | {k: v for k, v in given.items() if v}
        )
        return RestTarget.from_section(section)
