"""The locations a task's credentials are scoped to, as Polaris scopes them.

Polaris's ``TaskFileIOSupplier`` asks for credentials on the task's
``storageLocation`` alone. The sweeper also reads and deletes under a recorded
``write.data.path``/``write.metadata.path`` (the guard admits them), so those
join the scope when they lie inside the catalog's ``allowedLocations``; outside
them the catalog never vouched for them, and they stay out.
"""

from __future__ import annotations

from collections.abc import Mapping

from polaris_pipeline.errors import OutsideCatalogLocations, StorageError
from polaris_pipeline.storage.catalog_config import CatalogStorage, FileStorage
from polaris_pipeline.storage.uri import location_within, normalize_uri
from polaris_pipeline.tasks.roots import ROOT_PROPERTIES, STORAGE_LOCATION_KEY


def within_allowed(storage: CatalogStorage, uri: str) -> bool:
    """Whether ``uri`` lies in (or is) one of the catalog's allowed locations."""
    return any(
        location_within(uri, allowed) or (allowed == "*" and isinstance(storage, FileStorage))
        for allowed in storage.allowed_locations
    )


def outside_allowed(storage: CatalogStorage, location: str) -> OutsideCatalogLocations | None:
    """The refusal of a table ``location`` outside every one of the catalog's
    allowedLocations, or None (also when the catalog states none: it bounds nothing)."""
    if not storage.allowed_locations or within_allowed(storage, location):
        return None
    return OutsideCatalogLocations(
        f"the task's storageLocation {location!r} is outside the catalog's allowedLocations "
        f"({', '.join(storage.allowed_locations)}): Polaris never creates such a table; "
        "nothing of it is deleted"
    )


def task_scope(storage: CatalogStorage, internal_properties: Mapping[str, str]) -> tuple[str, ...]:
    """The task's location first, then the recorded root paths inside allowedLocations.

    Raises StorageError when the task has no ``storageLocation`` or it lies outside
    ``allowedLocations``: credentials for such a task cannot be asked for.
    """
    location = internal_properties.get(STORAGE_LOCATION_KEY, "")
    if not location.strip():
        raise StorageError(
            "the task carries storage_configuration_info but no storageLocation to scope "
            "credentials to"
        )
    location = normalize_uri(location.strip())
    if not storage.allowed_locations:
        raise StorageError(
            f"the task's storageLocation {location!r} is outside the catalog's "
            "allowedLocations (none): no credentials can be asked for it"
        )
    refusal = outside_allowed(storage, location)
    if refusal is not None:
        raise refusal
    scope = [location]
    for key in ROOT_PROPERTIES:
        value = internal_properties.get(key, "")
        if not value.strip():
            continue
        root = normalize_uri(value.strip())
        if within_allowed(storage, root) and not any(location_within(root, s) for s in scope):
            scope.append(root)
    return tuple(scope)
