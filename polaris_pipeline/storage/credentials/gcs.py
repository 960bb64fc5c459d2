"""GCS credentials for a task's locations: downscoped tokens, as Polaris vends them.

Application Default Credentials (impersonating the catalog's ``gcpServiceAccount`` when
named, as Polaris does) are exchanged for a token whose Credential Access Boundary allows
read, list and delete only under the task's prefixes; google-auth refreshes it itself.
With ``STORAGE_EMULATOR_HOST`` there is no IAM: gcsfs goes anonymously and the path guard
is the only fence (docs/operator-guide.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.catalog_config import GcsStorage
from polaris_pipeline.storage.credentials.cache import RefreshingCache, made_or_explained
from polaris_pipeline.storage.uri import bucket_and_path

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
# Google's limit on the rules of one Credential Access Boundary.
MAX_BOUNDARY_RULES = 10


def _cel(value: str) -> str:
    """``value`` as the inside of a single-quoted CEL string literal."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def boundary_rules(locations: Sequence[str]) -> list[dict[str, Any]]:
    """The access boundary for ``locations``, per bucket: read and list under the
    prefixes (``objectViewer``), and delete under them (``legacyBucketWriter``,
    the role Polaris grants for writes: GCS has no delete-only role)."""
    prefixes: dict[str, list[str]] = {}
    for location in locations:
        bucket, path = bucket_and_path(location, "gs", "GCS")
        # A trailing slash, so that "t/" does not also admit a sibling "t2/...".
        prefixes.setdefault(bucket, []).append(f"{path}/" if path else "")
    rules: list[dict[str, Any]] = []
    for bucket, paths in prefixes.items():
        objects = [
            f"resource.name.startsWith('projects/_/buckets/{_cel(bucket)}/objects/{_cel(p)}')"
            for p in paths
        ]
        listing = [
            "api.getAttribute('storage.googleapis.com/objectListPrefix', '')"
            f".startsWith('{_cel(p)}')"
            for p in paths
        ]
        resource = f"//storage.googleapis.com/projects/_/buckets/{bucket}"
        rules.append(
            {
                "available_resource": resource,
                "available_permissions": ["inRole:roles/storage.objectViewer"],
                "expression": " || ".join(objects + listing),
            }
        )
        rules.append(
            {
                "available_resource": resource,
                "available_permissions": ["inRole:roles/storage.legacyBucketWriter"],
                "expression": " || ".join(objects),
            }
        )
    if len(rules) > MAX_BOUNDARY_RULES:
        raise StorageError(
            f"the task's locations span {len(prefixes)} buckets: a GCS access boundary "
            f"holds at most {MAX_BOUNDARY_RULES // 2}"
        )
    return rules


def gcs_emulator() -> str | None:
    """The emulator's URL when ``STORAGE_EMULATOR_HOST`` names one, else None."""
    host = os.environ.get(EMULATOR_ENV, "").strip()
    if not host:
        return None
    return host if "://" in host else f"http://{host}"


class GcsCredentials:
    """Downscoped credentials per (service account, location set), reused across tasks."""

    def __init__(self, source: Any = None) -> None:
        self._source = source  # google.auth.default() unless given
        # The credentials object refreshes its own token, so it never expires here.
        self._cache: RefreshingCache[tuple[str, tuple[str, ...]], Any] = RefreshingCache(
            lambda _: math.inf
        )

    def gcsfs_options(self, storage: GcsStorage, locations: Sequence[str]) -> dict[str, Any]:
        emulator = gcs_emulator()
        if emulator:
            return {"endpoint_url": emulator, "token": "anon"}
        key = (storage.gcp_service_account or "", tuple(sorted(set(locations))))
        what = "cannot get downscoped GCS credentials"
        token = self._cache.get(
            key, lambda: made_or_explained(lambda: self._downscoped(storage, key[1]), what)
        )
        return {"token": token}

    def _downscoped(self, storage: GcsStorage, locations: Sequence[str]) -> Any:
        import google.auth
        from google.auth import downscoped, impersonated_credentials

        source = self._source
        if source is None:
            source, _ = google.auth.default(scopes=_SCOPES)
        if storage.gcp_service_account:
            source = impersonated_credentials.Credentials(
                source_credentials=source,
                target_principal=storage.gcp_service_account,
                target_scopes=_SCOPES,
            )
        rules = [
            downscoped.AccessBoundaryRule(
                available_resource=r["available_resource"],
                available_permissions=r["available_permissions"],
                availability_condition=downscoped.AvailabilityCondition(r["expression"]),
            )
            for r in boundary_rules(locations)
        ]
        return downscoped.Credentials(
            source_credentials=source,
            credential_access_boundary=downscoped.CredentialAccessBoundary(rules=rules),
        )
