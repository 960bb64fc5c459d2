"""A live table's row as Polaris writes it, for the demo (its catalog:
``builders/catalogs.py``).

A live table (type code 7) records its ``location`` property and, on schema v2 and
later, the ``location_without_scheme`` column Polaris fills. ``leaks`` walks the
catalog's location and judges every root by these rows.
"""

from __future__ import annotations

import time
from typing import Any

from builders.tasks import insert_row
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.model import TABLE_LIKE_TYPE_CODE

ICEBERG_TABLE_SUB_TYPE = 2


def _without_scheme(location: str) -> str:
    # Polaris's StorageLocation.withoutScheme: everything after the first ':'.
    return location.split(":", 1)[1] if ":" in location.split("/", 1)[0] else location


def _insert(store: Metastore, row: dict[str, Any]) -> None:
    now = int(time.time() * 1000)
    full = {
        "entity_version": 1,
        "sub_type_code": 0,
        "create_timestamp": now,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": now,
        "internal_properties": {},
        "grant_records_version": 1,
        **row,
    }
    insert_row(store, full)


def insert_live_table(
    store: Metastore, realm_id: str, catalog_id: int, name: str, location: str
) -> int:
    """A live Iceberg table of ``catalog_id`` at ``location``; returns its id."""
    table_id = new_entity_id()
    _insert(
        store,
        {
            "realm_id": realm_id,
            "catalog_id": catalog_id,
            "id": table_id,
            "parent_id": catalog_id,
            "name": name,
            "type_code": TABLE_LIKE_TYPE_CODE,
            "sub_type_code": ICEBERG_TABLE_SUB_TYPE,
            "properties": {"location": location},
            "location_without_scheme": _without_scheme(location),
        },
    )
    return table_id
