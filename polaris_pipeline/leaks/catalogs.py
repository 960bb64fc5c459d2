"""The catalogs to walk: catalog entities (type code 4) and their locations.

A catalog's tables live under ``default-base-location`` and its storage configuration's
``allowedLocations`` (a FILE catalog's ``*`` names no place and is left out). They are
reached as its tasks reach them (``catalog_resolver``): the catalog's own configuration,
credentials for those locations only, unless the deployment's storage config has a rule
for a location; with no configuration, through the deployment's alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Engine, select

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.leaks.model import CatalogRef
from polaris_pipeline.metastore.overlap import (
    CATALOG_BASE_LOCATION_KEY,
    CATALOG_ROWS_CATALOG_ID,
    CATALOG_TYPE_CODE,
)
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.storage.catalog_config import (
    STORAGE_CONFIG_KEY,
    CatalogStorage,
    decode_storage_config,
)
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.scope import within_allowed
from polaris_pipeline.storage.uri import normalize_uri
from polaris_pipeline.tasks.model import parse_properties


def catalog_ref(
    realm_id: str, catalog_id: int, name: str, properties: object, internal: object
) -> CatalogRef:
    """One catalog row as a :class:`CatalogRef`; a part that does not decode is its problem."""
    locations: list[str] = []
    problems: list[str] = []
    storage: CatalogStorage | None = None
    try:
        base = parse_properties(properties, column="properties").get(CATALOG_BASE_LOCATION_KEY)
        if base and base.strip():
            locations.append(base.strip())
    except PayloadError as e:
        problems.append(str(e))
    try:
        internal_props = parse_properties(internal, column="internal_properties")
        if STORAGE_CONFIG_KEY in internal_props:
            storage = decode_storage_config(internal_props[STORAGE_CONFIG_KEY])
            locations += [loc for loc in storage.allowed_locations if loc != "*"]
    except PayloadError as e:
        problems.append(str(e))
    return CatalogRef(
        realm_id,
        catalog_id,
        name,
        tuple(dict.fromkeys(locations)),
        "; ".join(problems) or None,
        storage,
    )


def catalog_resolver(
    resolver: StorageResolver, catalog: CatalogRef, locations: Iterable[str]
) -> StorageResolver:
    """How ``locations`` of ``catalog`` are reached: its storage configuration, credentials scoped
    to those inside its ``allowedLocations``; ``resolver`` itself otherwise. StorageError when
    its ``storageName`` maps to an identity that cannot sign for it.
    """
    storage = catalog.storage
    if storage is None:
        return resolver
    scope = tuple(dict.fromkeys(normalize_uri(u) for u in locations if within_allowed(storage, u)))
    return resolver.for_storage(storage, scope) if scope else resolver


def read_catalogs(
    engine: Engine, realms: Sequence[str] | None = None, names: Sequence[str] | None = None
) -> list[CatalogRef]:
    """The catalogs of ``realms`` (all when None) named ``names`` (all when None),
    in realm and name order."""
    c = entities.c
    # Catalog id 0 (Polaris's, for every catalog): an index finds them among any number
    # of tables (issue 46).
    stmt = select(c.realm_id, c.id, c.name, c.properties, c.internal_properties).where(
        c.catalog_id == CATALOG_ROWS_CATALOG_ID, c.type_code == CATALOG_TYPE_CODE
    )
    if realms:
        stmt = stmt.where(c.realm_id.in_(list(realms)))
    if names:
        stmt = stmt.where(c.name.in_(list(names)))
    with engine.connect() as conn:
        rows = conn.execute(stmt.order_by(c.realm_id, c.name)).all()
    return [
        catalog_ref(r.realm_id, int(r.id), r.name, r.properties, r.internal_properties)
        for r in rows
    ]
