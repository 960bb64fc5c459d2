"""Registering a dropped table's last metadata file with the catalog's Iceberg REST API.

``RestTarget``: the endpoint, the catalog (the REST prefix, Polaris's catalog name)
and OAuth2 client credentials, from the restore section (``from_section``); the
secret never appears in a repr, a log line or an error. Without an endpoint nothing
is called: ``register_forms`` gives the exact ``registerTable`` request, Spark's
``register_table`` procedure call and pyiceberg's call, for an operator to run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from polaris_pipeline.errors import PolarisPipelineError, one_line
from polaris_pipeline.settings import ENV_VARIABLES
from polaris_pipeline.settings.restore import DEFAULT_SCOPE, RestoreSection
from polaris_pipeline.tasks.payloads import TableIdentifier

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog

URI_ENV = ENV_VARIABLES[("restore", "rest_uri")]
CATALOG_ENV = ENV_VARIABLES[("restore", "catalog")]
# The REST spec joins namespace levels with the unit separator in a path.
_LEVEL_SEPARATOR = "\x1f"


class RegisterError(PolarisPipelineError):
    """The register call failed; nothing was registered."""


@dataclass(frozen=True)
class RestTarget:
    """Where and as whom a table is registered; ``uri`` None: print, call nothing."""

    uri: str | None
    catalog: str
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scope: str = DEFAULT_SCOPE

    @classmethod
    def from_section(cls, section: RestoreSection) -> RestTarget:
        """The restore section's target; the catalog is required (the REST prefix)."""
        if not section.catalog:
            raise PolarisPipelineError(f"name the catalog: --catalog or ${CATALOG_ENV}")
        return cls(
            uri=section.rest_uri,
            catalog=section.catalog,
            client_id=section.client_id,
            client_secret=section.client_secret,
            scope=section.scope,
        )

    def redact(self, text: str) -> str:
        return text.replace(self.client_secret, "***") if self.client_secret else text


def register_forms(target: RestTarget, table: TableIdentifier, metadata_file: str) -> list[str]:
    """The request and the two calls that register ``table`` from ``metadata_file``."""
    namespace = quote(_LEVEL_SEPARATOR.join(table.namespace), safe="")
    base = (target.uri or "https://<polaris>/api/catalog").rstrip("/")
    body = json.dumps({"name": table.name, "metadata-location": metadata_file})
    spark_name = str(table).replace("'", "''")
    spark_file = metadata_file.replace("'", "''")
    return [
        f"POST {base}/v1/{quote(target.catalog, safe='')}/namespaces/{namespace}/register",
        f"  {body}",
        f"CALL {target.catalog}.system.register_table(table => '{spark_name}', "
        f"metadata_file => '{spark_file}')",
        f"catalog.register_table({(*table.namespace, table.name)!r}, {metadata_file!r})",
    ]


def registered_metadata(target: RestTarget, table: TableIdentifier) -> str | None:
    """The metadata file the catalog's live ``table`` points at; None when there is none."""
    from pyiceberg.exceptions import NoSuchTableError

    catalog = _catalog(target)
    try:
        return str(catalog.load_table((*table.namespace, table.name)).metadata_location)
    except NoSuchTableError:
        return None
    except Exception as e:
        raise RegisterError(_failed(target, "load", e)) from None


def register(target: RestTarget, table: TableIdentifier, metadata_file: str) -> None:
    """``registerTable``; RegisterError (one line, no secret) when it fails."""
    catalog = _catalog(target)
    try:
        catalog.register_table((*table.namespace, table.name), metadata_file)
    except Exception as e:
        raise RegisterError(_failed(target, "register", e)) from None


def _catalog(target: RestTarget) -> RestCatalog:
    from pyiceberg.catalog.rest import RestCatalog

    props = {"uri": str(target.uri), "warehouse": target.catalog, "scope": target.scope}
    if target.client_id and target.client_secret:
        props["credential"] = f"{target.client_id}:{target.client_secret}"
    try:
        return RestCatalog(target.catalog, **props)
    except Exception as e:
        raise RegisterError(_failed(target, "connect", e)) from None


def _failed(target: RestTarget, what: str, exc: BaseException) -> str:
    return target.redact(
        f"cannot {what} at {target.uri} (catalog {target.catalog!r}): "
        f"{type(exc).__name__}: {one_line(exc)[:300]}"
    )
