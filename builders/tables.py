"""Build real Iceberg tables with pyiceberg, and list the files they hold.

Used by the demo and by the tests (``tests/support/iceberg.py`` wraps these in
fixtures); the Polaris TASK that drops such a table is ``builders/tasks.py``'s.
Everything takes plain paths and URIs: a warehouse is a local directory
(``file:///...``) or an ``s3://bucket/prefix`` with S3 options.

The tables are shaped to exercise every kind of file a cleanup must delete:
several snapshots (appends, an overwrite, a copy-on-write delete), real
positional and equality delete files listed in a delete manifest, statistics
and partition statistics files, and a metadata log that may be capped by
``write.metadata.previous-versions-max`` so older metadata files fall out of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.statistics import PartitionStatisticsFile, StatisticsFile
from pyiceberg.table.update import SetPartitionStatisticsUpdate
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

TABLE_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "value", DoubleType(), required=False),
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("category", pa.string()),
        pa.field("value", pa.float64()),
    ]
)
PARTITION_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
)

# Reserved field ids of the positional-delete schema (Iceberg spec).
_DELETE_FILE_PATH_ID = 2147483546
_DELETE_POS_ID = 2147483545
_PUFFIN_MAGIC = b"PFA1"


# -- catalogs ------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Options:
    """Where an S3-compatible store is and how to sign for it (moto, MinIO)."""

    endpoint: str
    access_key: str = "testing"
    secret_key: str = "testing"
    region: str = "us-east-1"

    def pyiceberg_properties(self) -> dict[str, str]:
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
        }

    def fsspec_options(self) -> dict[str, Any]:
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": self.region},
        }


def local_warehouse_uri(directory: str | os.PathLike[str]) -> str:
    """``file:///abs/dir`` for a local directory (created if missing)."""
    path = os.path.abspath(os.fspath(directory))
    os.makedirs(path, exist_ok=True)
    return "file://" + path


def open_catalog(
    warehouse: str,
    db_path: str | os.PathLike[str],
    *,
    name: str = "demo",
    s3: S3Options | None = None,
    properties: Mapping[str, str] | None = None,
) -> SqlCatalog:
    """A pyiceberg SqlCatalog over a sqlite file, writing tables under ``warehouse``.

    ``warehouse`` is ``file:///dir`` or ``s3://bucket/prefix``; a plain local path is
    turned into a ``file://`` URI so every file path in the metadata carries a scheme,
    as Polaris-written tables do.
    """
    if warehouse.startswith("/"):
        warehouse = local_warehouse_uri(warehouse)
    props: dict[str, str] = {
        "uri": f"sqlite:///{os.path.abspath(os.fspath(db_path))}",
        "warehouse": warehouse,
    }
    if s3 is not None:
        props.update(s3.pyiceberg_properties())
    props.update(properties or {})
    return SqlCatalog(name, **props)


def _ensure_namespace(catalog: SqlCatalog, namespace: tuple[str, ...]) -> None:
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(namespace)


# -- table builders ------------------------------------------------------------------


def _batch(start: int, rows: int, categories: tuple[str, ...] = ("a", "b", "c")) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table(
        {
            "id": ids,
            "category": [categories[i % len(categories)] for i in ids],
            "value": [i * 1.5 for i in ids],
        },
        schema=ARROW_SCHEMA,
    )


def build_table(
    catalog: SqlCatalog,
    identifier: str | tuple[str, ...],
    *,
    partitioned: bool = False,
    with_deletes: bool = False,
    properties: Mapping[str, str] | None = None,
    with_statistics: bool = False,
    format_version: int = 2,
    appends: int = 3,
) -> Table:
    """Create and populate a table with many kinds of files; returns it refreshed.

    Commits, in order: ``appends`` appends, an overwrite of one category, a
    copy-on-write delete of a few rows, then (``with_deletes``, format 2 only) a
    snapshot adding one positional and one equality delete file in a delete
    manifest, then (``with_statistics``) a statistics file and a partition
    statistics file, then one last append. Every commit writes a new metadata file,
    so the metadata log has several entries.
    """
    if with_deletes and format_version < 2:
        raise ValueError("delete files need format version 2")
    ident = tuple(identifier.split(".")) if isinstance(identifier, str) else tuple(identifier)
    _ensure_namespace(catalog, ident[:-1])
    props = {"format-version": str(format_version), **(properties or {})}
    kwargs: dict[str, Any] = {"properties": props}
    if partitioned:
        kwargs["partition_spec"] = PARTITION_SPEC
    table = catalog.create_table(ident, schema=TABLE_SCHEMA, **kwargs)

    for i in range(appends):
        table.append(_batch(i * 10, 6))
    # Replaces every row of category "a": old files are dropped from the current
    # snapshot but stay referenced by older snapshots.
    table.overwrite(_batch(1000, 4, ("a",)), overwrite_filter="category == 'a'")
    # pyiceberg deletes copy-on-write: rewrites the affected data files.
    table.delete(delete_filter="id == 1 or id == 13")
    if with_deletes:
        add_delete_files(table)
    if with_statistics:
        add_statistics_files(table)
    table.append(_batch(2000, 3))
    return catalog.load_table(ident)


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg writes only data manifests; this one declares delete content."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _RowDelta(_FastAppendFiles):
    """A fast append whose new manifest is a delete manifest (Iceberg's RowDelta)."""

    def new_manifest_writer(self, spec: PartitionSpec) -> ManifestWriter:
        return _DeleteManifestWriter(
            spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
        )


def _field_with_id(name: str, type_: pa.DataType, field_id: int) -> pa.Field:
    return pa.field(
        name, type_, nullable=False, metadata={b"PARQUET:field_id": str(field_id).encode()}
    )


def _write_parquet(io: FileIO, path: str, table: pa.Table) -> int:
    with io.new_output(path).create(overwrite=True) as out:
        pq.write_table(table, out)
    return len(io.new_input(path))


def add_delete_files(table: Table) -> list[str]:
    """Commit one positional and one equality delete file; returns their paths.

    Both target a data file of the current snapshot (same partition), and are
    listed in a new delete manifest, so the metadata names real delete files.
    """
    target = next(iter(table.scan().plan_files())).file
    base = f"{table.location()}/data"
    io = table.io

    pos_path = f"{base}/pos-deletes-{uuid.uuid4()}.parquet"
    pos_schema = pa.schema(
        [
            _field_with_id("file_path", pa.string(), _DELETE_FILE_PATH_ID),
            _field_with_id("pos", pa.int64(), _DELETE_POS_ID),
        ]
    )
    pos_size = _write_parquet(
        io, pos_path, pa.table({"file_path": [target.file_path], "pos": [0]}, schema=pos_schema)
    )
    eq_path = f"{base}/eq-deletes-{uuid.uuid4()}.parquet"
    eq_schema = pa.schema([_field_with_id("id", pa.int64(), 1)])
    eq_size = _write_parquet(io, eq_path, pa.table({"id": [2]}, schema=eq_schema))

    def delete_file(content: DataFileContent, path: str, size: int, **extra: Any) -> DataFile:
        return DataFile.from_args(
            content=content,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=target.partition,
            record_count=1,
            file_size_in_bytes=size,
            **extra,
        )

    files = [
        delete_file(DataFileContent.POSITION_DELETES, pos_path, pos_size),
        delete_file(DataFileContent.EQUALITY_DELETES, eq_path, eq_size, equality_ids=[1]),
    ]
    tx = table.transaction()
    producer = _RowDelta(operation=Operation.OVERWRITE, transaction=tx, io=table.io)
    for f in files:
        f.spec_id = target.spec_id
        producer.append_data_file(f)
    producer.commit()
    tx.commit_transaction()
    return [pos_path, eq_path]


def _puffin_bytes(snapshot_id: int, sequence_number: int, payload: bytes) -> tuple[bytes, int]:
    """A Puffin file with one blob; returns (bytes, footer size)."""
    blob_offset = len(_PUFFIN_MAGIC)
    footer_json = json.dumps(
        {
            "blobs": [
                {
                    "type": "apache-datasketches-theta-v1",
                    "fields": [1],
                    "snapshot-id": snapshot_id,
                    "sequence-number": sequence_number,
                    "offset": blob_offset,
                    "length": len(payload),
                    # The blob is a placeholder, not a real sketch: nothing here reads it.
                    "properties": {"polaris-pipeline": "test blob"},
                }
            ],
            "properties": {"created-by": "polaris-pipeline demo"},
        }
    ).encode()
    footer = _PUFFIN_MAGIC + footer_json + struct.pack("<i", len(footer_json)) + b"\x00\x00\x00\x00"
    footer += _PUFFIN_MAGIC
    return _PUFFIN_MAGIC + payload + footer, len(footer)


def add_statistics_files(table: Table) -> list[str]:
    """Write and register a statistics (Puffin) file and a partition statistics file."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        raise ValueError("statistics need a snapshot")
    seq = snapshot.sequence_number or 0
    io = table.io
    stats_path = f"{table.location()}/metadata/{snapshot.snapshot_id}-{uuid.uuid4()}.stats"
    data, footer_size = _puffin_bytes(snapshot.snapshot_id, seq, b"\x01\x02\x03\x04")
    with io.new_output(stats_path).create(overwrite=True) as out:
        out.write(data)
    part_path = (
        f"{table.location()}/metadata/partition-stats-{snapshot.snapshot_id}-{uuid.uuid4()}.parquet"
    )
    part_size = _write_parquet(
        io, part_path, pa.table({"partition": ["a", "b"], "data_record_count": [1, 2]})
    )

    # model_validate with the spec's (hyphenated) names: the models use field aliases.
    stats = StatisticsFile.model_validate(
        {
            "snapshot-id": snapshot.snapshot_id,
            "statistics-path": stats_path,
            "file-size-in-bytes": len(data),
            "file-footer-size-in-bytes": footer_size,
            "blob-metadata": [
                {
                    "type": "apache-datasketches-theta-v1",
                    "snapshot-id": snapshot.snapshot_id,
                    "sequence-number": seq,
                    "fields": [1],
                }
            ],
        }
    )
    part_stats = PartitionStatisticsFile.model_validate(
        {
            "snapshot-id": snapshot.snapshot_id,
            "statistics-path": part_path,
            "file-size-in-bytes": part_size,
        }
    )
    tx = table.transaction()
    tx.update_statistics().set_statistics(stats).commit()
    # pyiceberg has no public builder for partition statistics; the update model
    # is public and applies like any other metadata update.
    tx._apply((SetPartitionStatisticsUpdate.model_validate({"partition-statistics": part_stats}),))
    tx.commit_transaction()
    return [stats_path, part_path]


def add_data_file_named(table: Table, file_name: str) -> str:
    """Write a data file with a chosen name (e.g. with ``[`` and ``*``) and add it.

    Returns its path; it is listed in a new data manifest of the table.
    """
    path = f"{table.location()}/data/{file_name}"
    field_ids = {"id": b"1", "category": b"2", "value": b"3"}
    schema = pa.schema(
        [f.with_metadata({b"PARQUET:field_id": field_ids[f.name]}) for f in ARROW_SCHEMA]
    )
    rows = _batch(5000, 2, ("a",)).cast(schema)
    _write_parquet(table.io, path, rows)
    table.add_files([path])
    return path


# -- listing a location --------------------------------------------------------------


def list_files(location: str, *, s3: S3Options | None = None) -> set[str]:
    """Every file under ``location`` (``file:///...`` or ``s3://...``), as full URIs."""
    root = location.rstrip("/")
    if root.startswith("file://") or root.startswith("/"):
        base = root[len("file://") :] if root.startswith("file://") else root
        found: set[str] = set()
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                found.add("file://" + os.path.join(dirpath, name))
        return found
    if root.startswith("s3://"):
        import s3fs

        fs = s3fs.S3FileSystem(
            skip_instance_cache=True,
            use_listings_cache=False,
            **(s3.fsspec_options() if s3 else {}),
        )
        bucket_key = root[len("s3://") :]
        try:
            keys = fs.find(bucket_key)
        except FileNotFoundError:
            return set()
        # find() on a prefix also matches siblings sharing the prefix text; keep only
        # keys at a path-segment boundary.
        return {"s3://" + k for k in keys if k == bucket_key or k.startswith(bucket_key + "/")}
    raise ValueError(f"cannot list {location!r}: only file:// and s3:// are supported")
