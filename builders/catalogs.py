"""A catalog row as Polaris writes it, for the tests and the benchmarks.

``catalog_entity(store, name, base_location, allowed)``: a catalog row (type code 4)
with ``default-base-location`` and a ``storage_configuration_info`` listing
``allowedLocations``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from builders.tasks import insert_row
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.overlap import CATALOG_TYPE_CODE

_STORAGE_TYPES = {
    "FILE": "FileStorageConfigurationInfo",
    "S3": "AwsStorageConfigurationInfo",
    "AZURE": "AzureStorageConfigurationInfo",
    "GCS": "GcpStorageConfigurationInfo",
}


def catalog_entity(
    store: Metastore,
    name: str,
    base_location: str | None,
    allowed: Sequence[str] = (),
    *,
    storage_type: str = "FILE",
    realm_id: str = "POLARIS",
    storage_info: str | None = None,
) -> int:
    """Insert a catalog row; returns its id. ``storage_info``: its whole
    ``storage_configuration_info`` document, instead of one made of ``allowed``."""
    now = int(time.time() * 1000)
    catalog_id = new_entity_id()
    props = {"default-base-location": base_location} if base_location else {}
    internal: dict[str, Any] = {}
    if storage_info is not None:
        internal["storage_configuration_info"] = storage_info
    elif allowed or storage_type != "FILE":
        internal["storage_configuration_info"] = json.dumps(
            {
                "@type": _STORAGE_TYPES[storage_type],
                "storageType": storage_type,
                "allowedLocations": list(allowed),
            }
        )
    insert_row(
        store,
        {
            "realm_id": realm_id,
            "catalog_id": 0,
            "id": catalog_id,
            "parent_id": 0,
            "name": name,
            "entity_version": 1,
            "type_code": CATALOG_TYPE_CODE,
            "sub_type_code": 0,
            "create_timestamp": now,
            "drop_timestamp": 0,
            "purge_timestamp": 0,
            "to_purge_timestamp": 0,
            "last_update_timestamp": now,
            "properties": props,
            "internal_properties": internal,
            "grant_records_version": 1,
        },
    )
    return catalog_id
