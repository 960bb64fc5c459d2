"""Real Iceberg manifests for the benchmarks and the tests that seed them.

Two writers, both producing files pyiceberg and Java Iceberg read:

- :func:`write_with_pyiceberg`: pyiceberg's own ``write_manifest`` (format v2).
  pyiceberg writes one Avro block per entry, which makes its files larger and
  slower to write than Java's; fine for thousands of entries.
- :func:`write_with_fastavro`: the same Avro schema pyiceberg derives for a v2
  manifest entry (field ids and all), the same key/value metadata, written by
  fastavro in deflate-compressed blocks of ~64 kB, as Java's Avro writer lays
  them out. Used for the 100k and 1M entry manifests, optionally with the
  column metrics Java writers record for every data file.
"""

from __future__ import annotations

import os
import random
import struct
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from pydantic_core import to_json
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    data_file_with_partition,
    manifest_entry_schema_with_data_file,
    write_manifest,
)
from pyiceberg.typedef import Record
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from builders.tables import PARTITION_SPEC, TABLE_SCHEMA
from polaris_pipeline.tasks.manifest_codec import ManifestFileRef

CATEGORIES = ("a", "b", "c", "d")
JAVA_SYNC_INTERVAL = 64_000  # Avro's DataFileConstants.DEFAULT_SYNC_INTERVAL


@dataclass(frozen=True)
class WrittenManifest:
    local_path: str
    entries: int
    length: int
    snapshot_id: int

    def ref(self, manifest_path: str) -> ManifestFileRef:
        """The manifest-list entry naming this manifest at ``manifest_path``."""
        return ManifestFileRef(
            manifest_path=manifest_path,
            manifest_length=self.length,
            partition_spec_id=PARTITION_SPEC.spec_id,
            content=0,
            sequence_number=1,
            min_sequence_number=1,
            added_snapshot_id=self.snapshot_id,
            added_files_count=self.entries,
            existing_files_count=0,
            deleted_files_count=0,
            added_rows_count=self.entries * 1000,
            existing_rows_count=0,
            deleted_rows_count=0,
        )


def data_file_paths(table_location: str, n: int, seed: int = 1) -> Iterator[str]:
    """``n`` data file paths under ``table_location``, named as Iceberg writers name them."""
    rng = random.Random(seed)
    run = uuid.UUID(int=rng.getrandbits(128))
    for i in range(n):
        category = CATEGORIES[i % len(CATEGORIES)]
        name = f"{i // 1000:05d}-{i % 1000}-{run}-0000{i % 7}.parquet"
        yield f"{table_location}/data/category={category}/{name}"


def _category(path: str) -> str:
    return path.split("category=", 1)[1].split("/", 1)[0] if "category=" in path else "a"


def write_with_pyiceberg(
    local_path: str, paths: Sequence[str], snapshot_id: int = 1
) -> WrittenManifest:
    """A v2 data manifest naming ``paths`` (status ADDED), written by pyiceberg."""
    io = PyArrowFileIO()
    with write_manifest(
        format_version=2,
        spec=PARTITION_SPEC,
        schema=TABLE_SCHEMA,
        output_file=io.new_output(local_path),
        snapshot_id=snapshot_id,
        avro_compression="deflate",
    ) as writer:
        for path in paths:
            data_file = DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=Record(_category(path)),
                record_count=1000,
                file_size_in_bytes=64_000,
            )
            data_file.spec_id = PARTITION_SPEC.spec_id
            writer.add_entry(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=snapshot_id,
                    sequence_number=1,
                    file_sequence_number=1,
                    data_file=data_file,
                )
            )
    return WrittenManifest(local_path, len(paths), os.path.getsize(local_path), snapshot_id)


def avro_schema() -> dict[str, Any]:
    """The Avro schema of a v2 manifest entry of the demo table, as pyiceberg derives it."""
    partition_type = PARTITION_SPEC.partition_type(TABLE_SCHEMA)
    schema = manifest_entry_schema_with_data_file(
        format_version=2,
        data_file=data_file_with_partition(format_version=2, partition_type=partition_type),
    )
    avro: dict[str, Any] = AvroSchemaConversion().iceberg_to_avro(
        schema, schema_name="manifest_entry"
    )  # type: ignore[assignment]
    return avro


def _metadata() -> dict[str, str]:
    """The key/value metadata pyiceberg's (and Java's) manifest writers put in the header."""
    return {
        "schema": TABLE_SCHEMA.model_dump_json(),
        "partition-spec": to_json(PARTITION_SPEC.fields).decode("utf-8"),
        "partition-spec-id": str(PARTITION_SPEC.spec_id),
        "format-version": "2",
        "content": "data",
    }


def _kv(pairs: dict[int, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": v} for k, v in pairs.items()]


def _entries(paths: Iterator[str], snapshot_id: int, stats: bool) -> Iterator[dict[str, Any]]:
    rng = random.Random(2)
    for i, path in enumerate(paths):
        rows = 500 + rng.randrange(100_000)
        data_file: dict[str, Any] = {
            "content": 0,
            "file_path": path,
            "file_format": "PARQUET",
            "partition": {"category": _category(path)},
            "record_count": rows,
            "file_size_in_bytes": 40 * rows + rng.randrange(4096),
            "column_sizes": None,
            "value_counts": None,
            "null_value_counts": None,
            "nan_value_counts": None,
            "lower_bounds": None,
            "upper_bounds": None,
            "key_metadata": None,
            "split_offsets": [4],
            "equality_ids": None,
            "sort_order_id": 0,
        }
        if stats:
            low = i * 100_000
            data_file.update(
                column_sizes=_kv({1: 8 * rows, 2: 2 * rows, 3: 8 * rows}),
                value_counts=_kv({1: rows, 2: rows, 3: rows}),
                null_value_counts=_kv({1: 0, 2: rng.randrange(10), 3: rng.randrange(10)}),
                nan_value_counts=_kv({3: 0}),
                lower_bounds=_kv(
                    {
                        1: struct.pack("<q", low),
                        2: _category(path).encode(),
                        3: struct.pack("<d", low * 1.5),
                    }
                ),
                upper_bounds=_kv(
                    {
                        1: struct.pack("<q", low + rows),
                        2: _category(path).encode(),
                        3: struct.pack("<d", (low + rows) * 1.5),
                    }
                ),
            )
        yield {
            "status": 1,
            "snapshot_id": snapshot_id,
            "sequence_number": 1,
            "file_sequence_number": 1,
            "data_file": data_file,
        }


def write_with_fastavro(
    local_path: str, paths: Iterator[str], n: int, *, stats: bool = True, snapshot_id: int = 1
) -> WrittenManifest:
    """A v2 data manifest of ``n`` entries (``paths``), in Java-sized deflate blocks."""
    schema = fastavro.parse_schema(avro_schema())
    with open(local_path, "wb") as out:
        fastavro.writer(
            out,
            schema,
            _entries(paths, snapshot_id, stats),
            codec="deflate",
            sync_interval=JAVA_SYNC_INTERVAL,
            metadata=_metadata(),
        )
    return WrittenManifest(local_path, n, os.path.getsize(local_path), snapshot_id)
