"""Live entities for ``bench/guards_scale.py``: a metastore shaped as a large Polaris
deployment's, written in bulk (COPY on PostgreSQL, one executemany on SQLite).

Three realms of three catalogs each (an S3, a local-file and a GCS warehouse);
a namespace for every 100 tables, tables and views (one in ten) spread over
them, each at ``<warehouse>/ns-k/table-j`` with ``location_without_scheme`` as
Polaris writes it and a ``metadata-location`` internal property under its own
location. 100 more live tables sit beside the dropped table's directory in the
local warehouse (its siblings), so that the overlap lookups have neighbours.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import insert

from bench.common import ENTITY_COLUMNS, copy_entities
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import NAMESPACE_TYPE_CODE
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.tasks.model import CATALOG_TYPE_CODE, TABLE_LIKE_TYPE_CODE

REALMS = ("POLARIS", "acme", "globex")
CATALOGS_PER_REALM = 3
TABLES_PER_NAMESPACE = 100
SIBLINGS = 100
ICEBERG_TABLE, ICEBERG_VIEW = 2, 3
_TABLE_ID0 = 1_000_000_000
_NAMESPACE_ID0 = 2_000_000_000
_CATALOG_ID0 = 100


def _j(obj: dict[str, str]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _without_scheme(location: str) -> str:
    # Polaris's StorageLocation.withoutScheme: everything after the first ':'.
    return location.split(":", 1)[1]


def _row(
    realm: str,
    catalog_id: int,
    entity_id: int,
    parent_id: int,
    name: str,
    type_code: int,
    sub_type: int,
    props: dict[str, str],
    internal: dict[str, str],
    location: str | None,
) -> tuple[Any, ...]:
    now = int(time.time() * 1000)
    return (
        realm, catalog_id, entity_id, parent_id, name, 1, type_code, sub_type,
        now, 0, 0, 0, now, _j(props), _j(internal), 1,
        _without_scheme(location) if location else None,
    )  # fmt: skip


def _warehouse(catalog: int, local_root: str) -> str:
    kind = catalog % 3
    if kind == 0:
        return f"s3://wh-{catalog}"
    if kind == 1:
        return f"file://{local_root}/wh-{catalog}"
    return f"gs://wh-{catalog}"


def rows(
    n: int, local_root: str, dropped_dir: str, start: int = 0, *, fixed: bool = True
) -> Iterator[tuple[Any, ...]]:
    """Live tables and views ``start`` .. ``n - 1`` and their namespaces; with ``fixed``
    also the catalogs and the dropped table's siblings (``dropped_dir``: a
    ``file:///`` directory URI)."""
    catalogs = [(r, c) for r in REALMS for c in range(CATALOGS_PER_REALM)]
    if fixed:
        for i, (realm, c) in enumerate(catalogs):
            base = _warehouse(i, local_root)
            yield _row(
                realm, 0, _CATALOG_ID0 + i, 0, f"catalog-{c}", CATALOG_TYPE_CODE, 0,
                {"default-base-location": base}, {}, None,
            )  # fmt: skip
        for j in range(SIBLINGS):
            loc = f"{dropped_dir}/live_{j}"
            yield _row(
                "POLARIS", _CATALOG_ID0, _TABLE_ID0 - 1 - j, _NAMESPACE_ID0 - 1, f"live_{j}",
                TABLE_LIKE_TYPE_CODE, ICEBERG_TABLE, {"location": loc},
                {"metadata-location": f"{loc}/metadata/00001-{j:08x}.metadata.json"}, loc,
            )  # fmt: skip
    for g in range(start, n):
        ns = g // TABLES_PER_NAMESPACE
        i = ns % len(catalogs)
        realm, _ = catalogs[i]
        base = _warehouse(i, local_root)
        ns_loc = f"{base}/ns-{ns}"
        if g % TABLES_PER_NAMESPACE == 0:
            yield _row(
                realm, _CATALOG_ID0 + i, _NAMESPACE_ID0 + ns, _CATALOG_ID0 + i, f"ns-{ns}",
                NAMESPACE_TYPE_CODE, 0, {"location": ns_loc}, {}, ns_loc,
            )  # fmt: skip
        view = g % 10 == 9
        loc = f"{ns_loc}/{'view' if view else 'table'}-{g}"
        yield _row(
            realm, _CATALOG_ID0 + i, _TABLE_ID0 + g, _NAMESPACE_ID0 + ns, f"t{g}",
            TABLE_LIKE_TYPE_CODE, ICEBERG_VIEW if view else ICEBERG_TABLE, {"location": loc},
            {"metadata-location": f"{loc}/metadata/00003-{g:08x}.metadata.json"}, loc,
        )  # fmt: skip


def seed(
    store: Metastore,
    n: int,
    local_root: str,
    dropped_dir: str,
    start: int = 0,
    *,
    fixed: bool = True,
) -> None:
    """Add live entities ``start`` .. ``n - 1`` (see ``rows``) to ``store``."""
    generated = rows(n, local_root, dropped_dir, start, fixed=fixed)
    if store.engine.dialect.name == "postgresql":
        url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        copy_entities(url, generated)
        return
    batch: list[dict[str, Any]] = []
    with store.engine.begin() as conn:
        for row in generated:
            batch.append(dict(zip(ENTITY_COLUMNS, row, strict=True)))
            if len(batch) >= 10_000:
                conn.execute(insert(entities), batch)
                batch = []
        if batch:
            conn.execute(insert(entities), batch)
