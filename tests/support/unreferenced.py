"""Unreferenced files under a table's location, and live entities that may own them.

- ``add_unreferenced(table, resolver)``: what a dropped table leaves that its
  last metadata does not name: a failed commit's data files (one in a partition
  directory of its own, so an empty directory is left behind), an old metadata
  file beyond the log, and, on local files, stray Hadoop ``.crc`` sidecars.
  Returns their URIs, in the table location's spelling.
- ``live_entity(store, ...)``: a live table, view, namespace or catalog row in
  ``entities`` at a location, as Polaris writes it (``properties["location"]``,
  or ``default-base-location`` for a catalog, and ``location_without_scheme``
  where the schema has it).
- ``settle(resolver, location)``: wait until the clock is past the last-modified time
  storage gives each object under a location, so a task created now (the drop) is
  newer than every one of them; ``write_after(resolver, uri, data, ms)``: write an
  object whose last-modified time storage gives as later than ``ms`` (a file made
  after the drop). Both read the times as the phase does (``list_prefix``), so
  they wait only as long as that store's clock needs (S3 keeps whole seconds).
- ``unlistable_directory(parent)``: a directory whose listing fails, even as root.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from pyiceberg.table import Table

from builders.tasks import insert_row
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.overlap import CATALOG_TYPE_CODE, NAMESPACE_TYPE_CODE
from polaris_pipeline.storage.listing import list_prefix
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.model import TABLE_LIKE_TYPE_CODE

__all__ = [
    "CATALOG_TYPE_CODE",
    "NAMESPACE_TYPE_CODE",
    "TABLE_LIKE_TYPE_CODE",
    "add_unreferenced",
    "live_entity",
    "settle",
    "write_after",
    "write_object",
]


def write_object(resolver: StorageResolver, uri: str, data: bytes) -> str:
    fs, path = resolver.filesystem(uri)
    if split_uri(uri)[0] == "file":
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as f:
        f.write(data)
    return uri


def add_unreferenced(table: Table, resolver: StorageResolver) -> set[str]:
    """Write the unreferenced files of ``table`` (see the module docstring)."""
    location = table.location().rstrip("/")
    tag = uuid.uuid4().hex[:8]
    written = {
        write_object(resolver, f"{location}/data/00000-9-{tag}-failed.parquet", b"PAR1failed"),
        write_object(
            resolver, f"{location}/data/category=zz/00001-9-{tag}-attempt.parquet", b"PAR1spec"
        ),
        write_object(resolver, f"{location}/metadata/00000-{tag}-beyond-log.metadata.json", b"{}"),
    }
    if split_uri(location)[0] == "file":
        written.add(
            write_object(resolver, f"{location}/data/.00000-9-{tag}-failed.parquet.crc", b"crc")
        )
        written.add(write_object(resolver, f"{location}/metadata/.stray-{tag}.crc", b"crc"))
    return written


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _newest_mtime_ms(resolver: StorageResolver, location: str) -> int | None:
    times = [o.mtime_ms for page in list_prefix(resolver, location) for o in page]
    assert None not in times, f"storage gave no last-modified time under {location}"
    return max((t for t in times if t is not None), default=None)


def settle(resolver: StorageResolver, location: str) -> None:
    """Wait until a task created now is newer than every object under ``location``.

    The metastore's clock (PostgreSQL's rounds to the nearest millisecond, SQLite's may
    read one below) is this host's: past the newest time by two milliseconds is enough.
    """
    newest = _newest_mtime_ms(resolver, location)
    if newest is None:
        return
    while _now_ms() <= newest + 2:
        time.sleep(0.002)


def write_after(resolver: StorageResolver, uri: str, data: bytes, after_ms: int) -> str:
    """Write ``uri`` until storage gives its last-modified time as later than ``after_ms``."""
    deadline = time.monotonic() + 10
    parent = uri.rsplit("/", 1)[0]
    while True:
        write_object(resolver, uri, data)
        [mtime] = [
            o.mtime_ms for page in list_prefix(resolver, parent) for o in page if o.uri == uri
        ]
        assert mtime is not None, f"storage gave no last-modified time for {uri}"
        if mtime > after_ms:
            return uri
        assert time.monotonic() < deadline, f"{uri} never became newer than {after_ms}"
        time.sleep(0.02)


def _without_scheme(location: str) -> str:
    # Polaris's StorageLocation.withoutScheme: everything after the first ':'.
    return location.split(":", 1)[1] if ":" in location.split("/", 1)[0] else location


def live_entity(
    store: Metastore,
    location: str,
    *,
    type_code: int = TABLE_LIKE_TYPE_CODE,
    name: str = "live",
    realm_id: str = "POLARIS",
    catalog_id: int = 1,
    with_location_column: bool = True,
    properties: dict[str, Any] | str | None = None,
    internal_properties: dict[str, Any] | None = None,
) -> int:
    """Insert a live entity at ``location``; returns its id. ``internal_properties``:
    e.g. the ``metadata-location`` of a table registered over a metadata file."""
    key = "default-base-location" if type_code == CATALOG_TYPE_CODE else "location"
    props = properties if properties is not None else {key: location}
    now = int(time.time() * 1000)
    entity_id = new_entity_id()
    row: dict[str, Any] = {
        "realm_id": realm_id,
        "catalog_id": 0 if type_code == CATALOG_TYPE_CODE else catalog_id,
        "id": entity_id,
        "parent_id": catalog_id,
        "name": name,
        "entity_version": 1,
        "type_code": type_code,
        "sub_type_code": 2 if type_code == TABLE_LIKE_TYPE_CODE else 0,
        "create_timestamp": now,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": now,
        "properties": props,
        "internal_properties": dict(internal_properties or {}),
        "grant_records_version": 1,
    }
    if with_location_column and type_code != CATALOG_TYPE_CODE:
        row["location_without_scheme"] = _without_scheme(location)
    insert_row(store, row)
    return entity_id


def unlistable_directory(parent: Path) -> Path:
    """A directory under ``parent`` whose path is longer than PATH_MAX: listing it fails
    (ENAMETOOLONG) even as root. Made one level at a time, relative to its parent."""
    fd = os.open(parent, os.O_RDONLY)
    try:
        for _ in range(20):
            name = "d" * 250
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("kept.parquet", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return parent / ("d" * 250)
