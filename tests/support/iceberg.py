"""Iceberg fixtures: real tables written by pyiceberg, locally or on the moto S3 server.

The builders themselves live in the top-level ``builders`` package (``tables``: tables,
``tasks``: the tasks that drop them; the demo uses them too); this module wraps them
for tests.

- ``local_warehouse`` / ``s3_warehouse``: a :class:`Warehouse` (a SqlCatalog over a
  sqlite file in ``tmp_path``, tables under an emptied local directory or under
  ``s3://<s3_bucket>/wh``), with a StorageConfig and StorageResolver for it. Its
  location is the same for every test of a process, so that ``build`` copies back a
  table this process built before (``tests/support/table_recipes.py``).
- ``warehouse``: parametrized over both (ids ``local`` and ``s3``).
- ``built_local_warehouse`` / ``built_s3_warehouse`` / ``built_warehouse``: the same,
  already holding ``ns.t`` (two appends) and its neighbour ``ns.t_2`` (one append),
  built once per test process and put back to that state for each test: building
  them is most of the CPU of a test that drops one (0.45 s locally, 3.3 s on moto),
  putting them back 0.05 s and 0.7 s. Their location is the same for every test of a
  process; ``BUILT_TABLE`` and ``BUILT_NEIGHBOUR`` name them, and
  ``Warehouse.built_files`` gives each one's ``table_files`` as built (reading its
  manifests again costs 0.2 s a table locally, more on moto).
- ``table_files(table)``: the oracle, every file of a table: what its metadata
  names (pyiceberg's own readers and inspection tables) UNION a listing of its
  location.
- ``drop_task_row(table, ...)``: the ENTITY_CLEANUP_SCHEDULER TaskRow Polaris
  writes when the table is dropped with purge.
- ``recorded_drop_task(...)``: the same task with every catalog record chosen
  (entity properties, internal properties, metadata-location), for hostile rows.
- ``write_sidecars(uris)``: Hadoop's ``.NAME.crc`` beside each local file.
- ``write_view_metadata(location, io)``: a minimal Iceberg view metadata file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.table import Table

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.tables import S3Options, build_table
from polaris_pipeline.metastore import new_entity_id
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.delete import crc_sidecar
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.model import NewTask, Prop, TaskRow, TaskType
from polaris_pipeline.tasks.payloads import encode_dropped_entity, entity_cleanup_task_name
from tests.support.table_metadata import referenced_files
from tests.support.table_recipes import LocalTableFiles, Recipe, RecipeCache, S3TableFiles

__all__ = [
    "BUILT_NEIGHBOUR",
    "BUILT_TABLE",
    "Warehouse",
    "build_table",
    "drop_task_row",
    "recorded_drop_task",
    "table_files",
    "write_sidecars",
    "write_view_metadata",
]


@dataclass
class Warehouse:
    """One catalog and the storage objects a handler needs to clean its tables."""

    kind: str  # "local" | "s3"
    uri: str  # file:///... or s3://bucket/wh
    catalog: SqlCatalog
    config: StorageConfig
    resolver: StorageResolver
    s3: S3Options | None = None
    recipes: RecipeCache | None = None
    # A built warehouse's tables -> table_files of each as built (the same every test).
    built: Mapping[tuple[str, ...], frozenset[str]] = dataclasses.field(default_factory=dict)
    # The recipes this warehouse (one test's) built: a second build is a new table.
    built_here: set[Recipe] = dataclasses.field(default_factory=set)

    def build(self, name: str, **kwargs: Any) -> Table:
        """``build_table`` in namespace ``ns`` of this warehouse (copied back when built
        before by this process: ``tests/support/table_recipes.py``)."""
        if self.recipes is None:
            return build_table(self.catalog, ("ns", name), **kwargs)
        return self.recipes.build(self.catalog, ("ns", name), self.built_here, **kwargs)

    def built_files(self, identifier: tuple[str, ...]) -> set[str]:
        """``table_files`` of a table of a built warehouse as built (it is put back so
        for each test): ``BUILT_TABLE`` or ``BUILT_NEIGHBOUR``, before the test changes it."""
        return set(self.built[identifier])

    def files(self) -> set[str]:
        """Every file under the warehouse (the catalog's sqlite file lives elsewhere)."""
        return built_tables.list_files(self.uri, s3=self.s3)

    def exists(self, uri: str) -> bool:
        return self.resolver.exists(uri)


def _s3_options_of(table: Table) -> S3Options | None:
    props = table.io.properties
    endpoint = props.get("s3.endpoint")
    if not endpoint:
        return None
    return S3Options(
        endpoint=endpoint,
        access_key=props.get("s3.access-key-id", ""),
        secret_key=props.get("s3.secret-access-key", ""),
        region=props.get("s3.region", "us-east-1"),
    )


def table_files(table: Table) -> set[str]:
    """Every file of ``table``: named by its metadata, or lying under its location."""
    named = referenced_files(table)
    listed = built_tables.list_files(table.location(), s3=_s3_options_of(table))
    return named | listed


def drop_task_row(table: Table, **kwargs: Any) -> TaskRow:
    """The TaskRow of the cleanup task Polaris writes when ``table`` is dropped with purge.

    Keywords go to :func:`builders.tasks.drop_task`.
    """
    return built_tasks.task_row(built_tasks.drop_table_task(table, **kwargs))


def recorded_drop_task(
    metadata_location: str,
    *,
    namespace: tuple[str, ...] = ("ns",),
    name: str = "t",
    entity_properties: Mapping[str, str] | None = None,
    internal_properties: Mapping[str, str] | None = None,
    is_view: bool = False,
    realm_id: str = "POLARIS",
    parent_namespace: str | None = None,
) -> NewTask:
    """An ENTITY_CLEANUP_SCHEDULER task with exactly the given catalog records.

    ``entity_properties`` are the dropped entity's ``properties`` (where Polaris
    keeps ``location``); ``internal_properties`` the task's own (``storageLocation``
    ...), empty by default, as Polaris writes them when it finds no storage
    configuration. ``parent_namespace`` replaces the entity's encoded namespace
    as written (to write Java's form encoding by hand).
    """
    entity_id = new_entity_id()
    entity = built_tasks.dropped_entity(
        entity_id=entity_id,
        name=name,
        namespace=namespace,
        metadata_location=metadata_location,
        is_view=is_view,
        properties=entity_properties,
    )
    if parent_namespace is not None:
        internal = {**entity.internal_properties, "parent-namespace": parent_namespace}
        entity = dataclasses.replace(entity, internal_properties=internal)
    return NewTask(
        realm_id=realm_id,
        id=new_entity_id(),
        name=entity_cleanup_task_name(entity_id),
        properties={
            Prop.TASK_TYPE: str(int(TaskType.ENTITY_CLEANUP_SCHEDULER)),
            Prop.DATA: encode_dropped_entity(entity),
        },
        internal_properties=dict(internal_properties or {}),
    )


def write_sidecars(uris: Iterable[str]) -> set[str]:
    """Write a Hadoop checksum sidecar beside each local file of ``uris``; returns them."""
    out: set[str] = set()
    for uri in uris:
        sidecar = crc_sidecar(uri)
        assert sidecar is not None, uri
        Path(split_uri(sidecar)[1]).write_bytes(b"crc\x00\x00\x02\x00")
        out.add(sidecar)
    return out


def write_view_metadata(
    location: str, io: FileIO, *, namespace: tuple[str, ...] = ("ns",), name: str = "v"
) -> str:
    """Write a minimal Iceberg view metadata file under ``location``; returns its path."""
    path, body = view_metadata(location, namespace=namespace, name=name)
    with io.new_output(path).create(overwrite=True) as out:
        out.write(body)
    return path


def view_metadata(
    location: str, *, namespace: tuple[str, ...] = ("ns",), name: str = "v"
) -> tuple[str, bytes]:
    """A minimal Iceberg view metadata file for ``location``: its path and its bytes."""
    path = f"{location.rstrip('/')}/metadata/00000-{uuid.uuid4()}.metadata.json"
    now = int(time.time() * 1000)
    doc = {
        "view-uuid": str(uuid.uuid4()),
        "format-version": 1,
        "location": location,
        "current-version-id": 1,
        "properties": {},
        "schemas": [
            {
                "type": "struct",
                "schema-id": 0,
                "fields": [{"id": 1, "name": "id", "required": True, "type": "long"}],
            }
        ],
        "versions": [
            {
                "version-id": 1,
                "timestamp-ms": now,
                "schema-id": 0,
                "summary": {"engine-name": "polaris-pipeline-demo"},
                "default-namespace": list(namespace),
                "representations": [
                    {"type": "sql", "sql": f"SELECT 1 AS id -- {name}", "dialect": "spark"}
                ],
            }
        ],
        "version-log": [{"version-id": 1, "timestamp-ms": now}],
    }
    return path, json.dumps(doc).encode()


@dataclass(frozen=True)
class _LocalRecipes:
    """The directory every ``local_warehouse`` of this process is, and its recipes."""

    live: Path
    recipes: RecipeCache


@pytest.fixture(scope="session")
def _local_recipes(tmp_path_factory: pytest.TempPathFactory) -> _LocalRecipes:
    root = tmp_path_factory.mktemp("local-warehouse")
    (root / "recipes").mkdir()
    return _LocalRecipes(root / "wh", RecipeCache(LocalTableFiles(root / "recipes")))


def _emptied(directory: Path) -> Path:
    # Moved aside first: what a test left (an unlistable directory, a symlink)
    # can never stop the next test from getting an empty directory.
    if directory.exists():
        trash = directory.with_name(f"trash-{uuid.uuid4().hex[:8]}")
        os.rename(directory, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return directory


@pytest.fixture
def local_warehouse(tmp_path: Path, _local_recipes: _LocalRecipes) -> Warehouse:
    uri = built_tables.local_warehouse_uri(_emptied(_local_recipes.live))
    catalog = built_tables.open_catalog(uri, tmp_path / "catalog.db", name="local")
    config = StorageConfig()
    return Warehouse(
        "local", uri, catalog, config, StorageResolver(config), recipes=_local_recipes.recipes
    )


@pytest.fixture(scope="session")
def _s3_recipes(moto_server: Any) -> RecipeCache:
    client = moto_server.client()
    bucket = f"pp-recipes-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return RecipeCache(S3TableFiles(client, bucket), keep_build=2)


@pytest.fixture
def s3_warehouse(
    tmp_path: Path, moto_server: Any, s3_bucket: str, _s3_recipes: RecipeCache
) -> Warehouse:
    s3 = _s3_options(moto_server)
    uri = f"s3://{s3_bucket}/wh"
    catalog = built_tables.open_catalog(uri, tmp_path / "catalog.db", name="s3", s3=s3)
    config = moto_server.storage_config(s3_bucket)
    return Warehouse("s3", uri, catalog, config, StorageResolver(config), s3, _s3_recipes)


@pytest.fixture(params=["local", "s3"])
def warehouse(request: pytest.FixtureRequest) -> Iterator[Warehouse]:
    yield request.getfixturevalue(f"{request.param}_warehouse")


@pytest.fixture
def make_table(warehouse: Warehouse) -> Callable[..., Table]:
    """``make_table(name, **build_table_kwargs)`` in the parametrized warehouse."""
    return warehouse.build


# -- warehouses built once per process ------------------------------------------------

BUILT_TABLE = ("ns", "t")
BUILT_NEIGHBOUR = ("ns", "t_2")


def _build_pair(catalog: SqlCatalog) -> dict[tuple[str, ...], frozenset[str]]:
    """Build the pair; returns ``table_files`` of each, as built."""
    tables = (
        build_table(catalog, BUILT_TABLE, appends=2),
        build_table(catalog, BUILT_NEIGHBOUR, appends=1),
    )
    return {
        BUILT_TABLE: frozenset(table_files(tables[0])),
        BUILT_NEIGHBOUR: frozenset(table_files(tables[1])),
    }


@dataclass(frozen=True)
class _BuiltLocal:
    """``live`` (the warehouse tests use) and ``pristine`` (its built state), each a
    directory holding ``wh/`` and ``catalog.db``."""

    live: Path
    pristine: Path
    files: Mapping[tuple[str, ...], frozenset[str]] = dataclasses.field(default_factory=dict)

    def restore(self) -> None:
        # copy2 keeps the files' times: they stay older than a task made now.
        shutil.copytree(self.pristine, _emptied(self.live), symlinks=True)


@pytest.fixture(scope="session")
def _built_local(tmp_path_factory: pytest.TempPathFactory) -> _BuiltLocal:
    root = tmp_path_factory.mktemp("built-local")
    live = root / "live"
    catalog = built_tables.open_catalog(
        built_tables.local_warehouse_uri(live / "wh"), live / "catalog.db", name="local"
    )
    built = _BuiltLocal(live, root / "pristine", _build_pair(catalog))
    catalog.engine.dispose()
    shutil.copytree(built.live, built.pristine, symlinks=True)
    return built


@pytest.fixture
def built_local_warehouse(_built_local: _BuiltLocal) -> Warehouse:
    """A local warehouse holding ``ns.t`` and ``ns.t_2`` as built (see the module doc)."""
    _built_local.restore()
    uri = built_tables.local_warehouse_uri(_built_local.live / "wh")
    catalog = built_tables.open_catalog(uri, _built_local.live / "catalog.db", name="local")
    config = StorageConfig()
    return Warehouse(
        "local", uri, catalog, config, StorageResolver(config), built=_built_local.files
    )


@dataclass(frozen=True)
class _BuiltS3:
    """The warehouse's bucket ``live`` and its built state in bucket ``pristine``; the
    catalog files as in :class:`_BuiltLocal`."""

    live: str
    pristine: str
    catalogs: _BuiltLocal
    files: Mapping[tuple[str, ...], frozenset[str]]

    def restore(self, client: Any) -> None:
        """Only what differs: an object the test added goes, one it removed or changed
        (another ETag: another content) is copied back; the rest stays as it was."""
        self.catalogs.restore()
        live, pristine = _etags(client, self.live), _etags(client, self.pristine)
        added = [{"Key": key} for key in live if key not in pristine]
        for start in range(0, len(added), 1000):
            chunk = added[start : start + 1000]
            client.delete_objects(Bucket=self.live, Delete={"Objects": chunk, "Quiet": True})
        for key, etag in pristine.items():
            if live.get(key) != etag:
                source = {"Bucket": self.pristine, "Key": key}
                client.copy_object(Bucket=self.live, Key=key, CopySource=source)


def _etags(client: Any, bucket: str) -> dict[str, str]:
    """Each key of ``bucket`` -> its ETag."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {obj["Key"]: obj["ETag"] for page in pages for obj in page.get("Contents", [])}


def _s3_options(moto_server: Any) -> S3Options:
    return S3Options(
        endpoint=moto_server.endpoint_url,
        access_key=moto_server.key,
        secret_key=moto_server.secret,
        region=moto_server.region,
    )


@pytest.fixture(scope="session")
def _built_s3(tmp_path_factory: pytest.TempPathFactory, moto_server: Any) -> _BuiltS3:
    root = tmp_path_factory.mktemp("built-s3")
    tag = uuid.uuid4().hex[:12]
    live, pristine = f"pp-built-{tag}", f"pp-pristine-{tag}"
    catalogs = _BuiltLocal(root / "live", root / "pristine")
    client = moto_server.client()
    for bucket in (live, pristine):
        client.create_bucket(Bucket=bucket)
    catalogs.live.mkdir()
    catalog = built_tables.open_catalog(
        f"s3://{live}/wh", catalogs.live / "catalog.db", name="s3", s3=_s3_options(moto_server)
    )
    built = _BuiltS3(live, pristine, catalogs, _build_pair(catalog))
    catalog.engine.dispose()
    for key in _etags(client, built.live):
        source = {"Bucket": built.live, "Key": key}
        client.copy_object(Bucket=built.pristine, Key=key, CopySource=source)
    shutil.copytree(built.catalogs.live, built.catalogs.pristine)
    return built


@pytest.fixture
def built_s3_warehouse(_built_s3: _BuiltS3, moto_server: Any) -> Warehouse:
    """An S3 warehouse holding ``ns.t`` and ``ns.t_2`` as built (see the module doc)."""
    _built_s3.restore(moto_server.client())
    s3 = _s3_options(moto_server)
    uri = f"s3://{_built_s3.live}/wh"
    catalog = built_tables.open_catalog(
        uri, _built_s3.catalogs.live / "catalog.db", name="s3", s3=s3
    )
    config = moto_server.storage_config(_built_s3.live)
    return Warehouse("s3", uri, catalog, config, StorageResolver(config), s3, built=_built_s3.files)


@pytest.fixture(params=["local", "s3"])
def built_warehouse(request: pytest.FixtureRequest) -> Iterator[Warehouse]:
    yield request.getfixturevalue(f"built_{request.param}_warehouse")
