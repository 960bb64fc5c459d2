"""A table built again by a later test of the process is copied back
(tests/support/table_recipes.py): the files and metadata of the kept build, dated now,
registered in that test's catalog; and built anew wherever a copy could differ."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from builders import tables as built_tables
from polaris_pipeline.storage.uri import split_uri
from tests.support.iceberg import Warehouse, table_files
from tests.support.s3 import MotoS3, remove_bucket
from tests.support.table_metadata import referenced_files
from tests.support.table_recipes import LocalTableFiles, Recipe, RecipeCache, S3TableFiles


class _Process:
    """One test process's recipes and warehouse location; ``next_test`` is the catalog and
    the per-test record a later test of that process gets."""

    def __init__(self, root: Path, keep_build: int = 1) -> None:
        (root / "kept").mkdir()
        self.root = root
        self.live = root / "wh"
        self.cache = RecipeCache(LocalTableFiles(root / "kept"), keep_build=keep_build)

    def next_test(self, *, emptied: bool = True) -> tuple[SqlCatalog, set[Recipe]]:
        if emptied and self.live.exists():
            self.live.rename(self.root / f"trash-{uuid.uuid4().hex[:8]}")
        uri = built_tables.local_warehouse_uri(self.live)
        db = self.root / f"catalog-{uuid.uuid4().hex[:8]}.db"
        return built_tables.open_catalog(uri, db, name="local"), set()


def _mtimes(files: set[str]) -> list[int]:
    return [Path(split_uri(f)[1]).stat().st_mtime_ns for f in files]


def test_a_later_test_gets_the_kept_build_registered_and_dated_now(tmp_path: Path) -> None:
    process = _Process(tmp_path)
    catalog, here = process.next_test()
    built = process.cache.build(catalog, ("ns", "t"), here, with_statistics=True, appends=2)
    built_files = table_files(built)

    catalog, here = process.next_test()
    started = time.time_ns()
    copied = process.cache.build(catalog, ("ns", "t"), here, with_statistics=True, appends=2)

    # The kept build's own files (a build would name new ones), and nothing else.
    assert copied.metadata_location == built.metadata_location
    assert table_files(copied) == built_files
    assert catalog.load_table(("ns", "t")).metadata_location == built.metadata_location
    assert min(_mtimes(built_files)) >= started - 10_000_000  # dated now, as a build's
    assert copied.scan().to_arrow().num_rows == built.scan().to_arrow().num_rows


@pytest.mark.parametrize(
    ("case", "kwargs"),
    [
        ("another recipe", {"appends": 1}),
        ("the same recipe twice in one test", {"appends": 2}),
        ("a location that is not empty", {"appends": 2}),
        ("a property naming a path", {"properties": {"write.data.path": "{live}/elsewhere"}}),
    ],
)
def test_a_table_is_built_anew_where_a_copy_could_differ(
    tmp_path: Path, case: str, kwargs: dict[str, Any]
) -> None:
    process = _Process(tmp_path)
    kwargs = {
        k: (
            {p: v.format(live=process.live.as_uri()) for p, v in v.items()}
            if k == "properties"
            else v
        )
        for k, v in kwargs.items()
    }
    first_kwargs = {"appends": 2} if case == "another recipe" else kwargs
    catalog, here = process.next_test()
    first = process.cache.build(catalog, ("ns", "t"), here, **first_kwargs)
    first_files = referenced_files(first)

    if case == "the same recipe twice in one test":
        catalog.drop_table(("ns", "t"))
        Path(split_uri(first.location())[1]).rename(tmp_path / "gone")
    else:
        catalog, here = process.next_test(emptied=case != "a location that is not empty")
    again = process.cache.build(catalog, ("ns", "t"), here, **kwargs)

    assert again.metadata_location != first.metadata_location
    assert referenced_files(again).isdisjoint(first_files)


def test_on_s3_the_second_build_is_kept(tmp_path: Path, moto_server: MotoS3) -> None:
    client = moto_server.client()
    kept, live = (f"pp-recipe-test-{uuid.uuid4().hex[:8]}" for _ in range(2))
    client.create_bucket(Bucket=kept)
    cache = RecipeCache(S3TableFiles(client, kept), keep_build=2)
    options = built_tables.S3Options(moto_server.endpoint_url)
    builds = []
    for n in range(3):
        assert remove_bucket(client, live)
        client.create_bucket(Bucket=live)
        catalog = built_tables.open_catalog(
            f"s3://{live}/wh", tmp_path / f"c{n}.db", name="s3", s3=options
        )
        builds.append(cache.build(catalog, ("ns", "t"), set(), appends=1))

    first, second, third = (t.metadata_location for t in builds)
    assert first != second == third
    assert built_tables.list_files(f"s3://{live}/wh", s3=options) == table_files(builds[2])


def test_a_test_bucket_is_removed_with_every_version(moto_server: MotoS3) -> None:
    client = moto_server.client()
    bucket = f"pp-removed-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"1", b"2"):
        client.put_object(Bucket=bucket, Key="k", Body=body)
    client.delete_object(Bucket=bucket, Key="k")  # a delete marker

    assert remove_bucket(client, bucket)

    assert bucket not in {b["Name"] for b in client.list_buckets()["Buckets"]}
    assert remove_bucket(client, bucket)  # gone already: removed


def test_the_s3_bucket_of_each_test_is_new(
    s3_bucket: str, moto_server: MotoS3, s3_warehouse: Warehouse
) -> None:
    client = moto_server.client()
    assert client.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0
    assert "Status" not in client.get_bucket_versioning(Bucket=s3_bucket)
    assert s3_warehouse.uri == f"s3://{s3_bucket}/wh"
