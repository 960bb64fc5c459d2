"""Decode the storage configuration Polaris copies onto each task.

Polaris writes ``PolarisStorageConfigurationInfo`` as Jackson JSON into the internal
property ``storage_configuration_info`` (type id under ``@type``). The four types it knows
(S3, Azure, GCS, FILE) decode to frozen dataclasses; anything else is a
:class:`PayloadError`, so nothing is read or deleted. Unknown fields are ignored, as
Polaris's reader does, so a newer Polaris does not stop the sweep.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.storage.uri import storage_type_of, type_prefixes

STORAGE_CONFIG_KEY = "storage_configuration_info"

# Polaris's AwsStorageConfigurationInfo.ROLE_ARN_PATTERN: partition is group 1,
# account id group 2.
_ROLE_ARN_RE = re.compile(r"^.+:(.*):.+:.*:(.*):.+$")


@dataclass(frozen=True)
class AwsStorage:
    """``AwsStorageConfigurationInfo``: an IAM role to assume, per catalog."""

    allowed_locations: tuple[str, ...]
    role_arn: str | None = None
    external_id: str | None = None
    user_arn: str | None = None
    region: str | None = None
    endpoint: str | None = None
    endpoint_internal: str | None = None
    sts_endpoint: str | None = None
    path_style_access: bool = False
    sts_unavailable: bool = False
    kms_unavailable: bool = False
    current_kms_key: str | None = None
    allowed_kms_keys: tuple[str, ...] = ()
    storage_name: str | None = None

    storage_type = "S3"

    @property
    def partition(self) -> str:
        m = _ROLE_ARN_RE.match(self.role_arn or "")
        return (m.group(1) if m else "") or "aws"

    @property
    def s3_endpoint(self) -> str | None:
        """Where the sweeper reaches S3: the internal endpoint when the catalog names one
        (Polaris's server uses it too), else the client-facing one."""
        return self.endpoint_internal or self.endpoint

    @property
    def sts_url(self) -> str | None:
        """STS endpoint as Polaris picks it: ``stsEndpoint``, else the S3 endpoint."""
        return self.sts_endpoint or self.s3_endpoint


@dataclass(frozen=True)
class AzureStorage:
    """``AzureStorageConfigurationInfo``: the tenant of the storage accounts."""

    allowed_locations: tuple[str, ...]
    tenant_id: str | None = None
    multi_tenant_app_name: str | None = None
    consent_url: str | None = None
    hierarchical: bool = False
    storage_name: str | None = None

    storage_type = "AZURE"


@dataclass(frozen=True)
class GcsStorage:
    """``GcpStorageConfigurationInfo``: optionally a service account to impersonate."""

    allowed_locations: tuple[str, ...]
    gcp_service_account: str | None = None
    storage_name: str | None = None

    storage_type = "GCS"


@dataclass(frozen=True)
class FileStorage:
    """``FileStorageConfigurationInfo``: local files, no credentials."""

    allowed_locations: tuple[str, ...]
    storage_name: str | None = None

    storage_type = "FILE"


CatalogStorage = AwsStorage | AzureStorage | GcsStorage | FileStorage

_TYPES: dict[str, str] = {
    "AwsStorageConfigurationInfo": "S3",
    "AzureStorageConfigurationInfo": "AZURE",
    "GcpStorageConfigurationInfo": "GCS",
    "FileStorageConfigurationInfo": "FILE",
}


def catalog_storage(internal_properties: Mapping[str, str]) -> CatalogStorage | None:
    """The task's storage configuration, or None when it carries none. A present but blank value
    is malformed, not absent: guessing the static config instead could reach other storage.
    """
    if STORAGE_CONFIG_KEY not in internal_properties:
        return None
    return decode_storage_config(internal_properties[STORAGE_CONFIG_KEY])


def decode_storage_config(text: object) -> CatalogStorage:
    """Decode one ``storage_configuration_info`` document; PayloadError if malformed, naming
    fields and types, never values (an external id is a shared secret of sorts).
    """
    where = STORAGE_CONFIG_KEY
    if not isinstance(text, str) or not text.strip():
        raise PayloadError(f"{where} is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PayloadError(f"{where} is not JSON (line {e.lineno}, column {e.colno})") from None
    if not isinstance(doc, dict):
        raise PayloadError(f"{where} is a JSON {type(doc).__name__}, not an object")
    type_id = doc.get("@type")
    if not isinstance(type_id, str) or not type_id:
        raise PayloadError(f"{where} has no '@type' (expected one of {', '.join(_TYPES)})")
    storage_type = _TYPES.get(type_id)
    if storage_type is None:
        raise PayloadError(
            f"{where} has unknown '@type' {type_id[:80]!r} (expected one of {', '.join(_TYPES)})"
        )
    declared = doc.get("storageType")
    if declared is not None and declared != storage_type:
        raise PayloadError(
            f"{where}: '@type' {type_id} is storage type {storage_type}, "
            f"but 'storageType' says {str(declared)[:20]!r}"
        )
    fields = _Fields(doc, where)
    allowed = fields.strings("allowedLocations")
    name = fields.string("storageName")
    _check_prefixes(allowed, storage_type, where)
    if storage_type == "S3":
        role_arn = fields.string("roleARN")
        if role_arn is not None and not _ROLE_ARN_RE.match(role_arn):
            raise PayloadError(f"{where}: 'roleARN' is not a role ARN")
        return AwsStorage(
            allowed_locations=allowed,
            role_arn=role_arn,
            external_id=fields.string("externalId"),
            user_arn=fields.string("userARN"),
            region=fields.string("region"),
            endpoint=fields.string("endpoint"),
            endpoint_internal=fields.string("endpointInternal"),
            sts_endpoint=fields.string("stsEndpoint"),
            path_style_access=fields.flag("pathStyleAccess"),
            sts_unavailable=fields.flag("stsUnavailable"),
            kms_unavailable=fields.flag("kmsUnavailable"),
            current_kms_key=fields.string("currentKmsKey"),
            allowed_kms_keys=fields.strings("allowedKmsKeys"),
            storage_name=name,
        )
    if storage_type == "AZURE":
        # Immutables names the Boolean isHierarchical() property "hierarchical";
        # accept the getter's spelling too.
        hierarchical = fields.flag("hierarchical") or fields.flag("isHierarchical")
        return AzureStorage(
            allowed_locations=allowed,
            tenant_id=fields.string("tenantId"),
            multi_tenant_app_name=fields.string("multiTenantAppName"),
            consent_url=fields.string("consentUrl"),
            hierarchical=hierarchical,
            storage_name=name,
        )
    if storage_type == "GCS":
        return GcsStorage(
            allowed_locations=allowed,
            gcp_service_account=fields.string("gcpServiceAccount"),
            storage_name=name,
        )
    return FileStorage(allowed_locations=allowed, storage_name=name)


def _check_prefixes(locations: tuple[str, ...], kind: str, where: str) -> None:
    for loc in locations:
        # Polaris's FILE storage also admits "*": anywhere local.
        if storage_type_of(loc) == kind or (kind == "FILE" and loc == "*"):
            continue
        if kind == "FILE":
            raise PayloadError(f"{where}: allowed location {loc!r} is not a local path")
        prefixes = " or ".join(type_prefixes(kind))
        raise PayloadError(f"{where}: allowed location {loc!r} does not start with {prefixes}")


class _Fields:
    """Typed reads of a decoded document; a wrong type names the field."""

    def __init__(self, doc: Mapping[str, Any], where: str) -> None:
        self._doc = doc
        self._where = where

    def _wrong(self, key: str, want: str) -> PayloadError:
        got = type(self._doc[key]).__name__
        return PayloadError(f"{self._where}: {key!r} must be {want}, not a JSON {got}")

    def string(self, key: str) -> str | None:
        value = self._doc.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        # Jackson writes absent values as absent (NON_NULL); a blank one is as good as none.
        return value if value.strip() else None

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._doc.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise PayloadError(f"{self._where}: {key!r} must be a list of non-empty strings")
        return tuple(value)

    def flag(self, key: str) -> bool:
        value = self._doc.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value
