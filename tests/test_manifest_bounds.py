"""Manifests and manifest lists are read within bounds (``cleanup/avro_blocks.py``).

A file that breaks a bound fails with one StorageError line naming the file and
the bound, before the offending block is inflated (or the oversized field
allocated); ordinary files of every codec read exactly as fastavro reads them.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import fastavro
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestContent, ManifestFile, write_manifest_list

from builders import avro_bomb
from builders.avro_bomb import container, entry, write_manifest_bomb
from polaris_pipeline.cleanup import manifest_list, metadata_file
from polaris_pipeline.cleanup.avro_blocks import (
    MAX_BLOCK_BYTES,
    MAX_BLOCK_RECORDS,
    MAX_HEADER_BYTES,
    AvroBlocks,
)
from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.cleanup.dispatch import run_cleanup
from polaris_pipeline.cleanup.manifest import MAX_PATH_LENGTH, iter_manifest_entries
from polaris_pipeline.cleanup.table import read_table_metadata
from polaris_pipeline.errors import StorageError, is_permanent, one_line
from polaris_pipeline.leaks.metadata import read_root_metadata
from polaris_pipeline.storage.listing import ListedObject
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask
from tests.support.iceberg import Warehouse, drop_task_row

MiB = 1024 * 1024


def _entries(path: Path) -> list[tuple[int, str, int]]:
    found = iter_manifest_entries(StorageResolver().input_file(f"file://{path}"))
    return [(e.status, e.path, e.size) for e in found]


def _failure(path: Path) -> str:
    with pytest.raises(StorageError) as caught:
        _entries(path)
    assert not is_permanent(caught.value)  # the path a corrupt manifest takes: retried
    line = one_line(caught.value)
    assert line == f"StorageError: {caught.value}"  # one line
    return line


def _write(tmp_path: Path, data: bytes, name: str = "m.avro") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# -- ordinary files --------------------------------------------------------------


def _records(n: int) -> list[dict[str, Any]]:
    return [
        {
            "status": i % 3,
            "data_file": {
                "file_path": f"file:///wh/t/data/{i:05d}.parquet",
                "file_size_in_bytes": i,
            },
        }
        for i in range(n)
    ]


def _triples(records: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    return [
        (r["status"], r["data_file"]["file_path"], r["data_file"]["file_size_in_bytes"])
        for r in records
    ]


@pytest.mark.parametrize("codec", ["null", "deflate", "bzip2", "xz"])
def test_every_codec_reads_as_fastavro_reads_it(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"m-{codec}.avro"
    with path.open("wb") as out:
        # Small blocks: many of them, as Java writes them.
        fastavro.writer(
            out, avro_bomb.ENTRY_SCHEMA, _records(3000), codec=codec, sync_interval=4000
        )
    with path.open("rb") as f:
        expected = _triples([cast(dict[str, Any], r) for r in fastavro.reader(f)])
    assert _entries(path) == expected and len(expected) == 3000
    with path.open("rb") as f:
        assert len(list(AvroBlocks(f, str(path)).blocks())) > 10


def test_zstandard_blocks_read(tmp_path: Path) -> None:
    # fastavro here cannot write zstandard (it wants backports.zstd); Java can.
    import zstandard

    records = _records(300)
    blocks = []
    for start in range(0, len(records), 100):
        raw = io.BytesIO()
        for r in records[start : start + 100]:
            fastavro.schemaless_writer(raw, avro_bomb.ENTRY_SCHEMA, r)
        blocks.append((100, zstandard.ZstdCompressor().compress(raw.getvalue())))
    path = _write(tmp_path, container("zstandard", blocks))
    assert _entries(path) == _triples(records)


def test_a_path_of_the_bound_is_read(tmp_path: Path) -> None:
    longest = "/" + "p" * (MAX_PATH_LENGTH - 1)
    path = _write(tmp_path, container("deflate", [(1, _deflate(entry(longest)))]))
    assert _entries(path) == [(1, longest, 1)]


# -- each bound --------------------------------------------------------------------


def _deflate(data: bytes) -> bytes:
    d = zlib.compressobj(9, zlib.DEFLATED, -15)
    return d.compress(data) + d.flush()


def test_compressed_bomb_fails_with_one_line_before_it_inflates(tmp_path: Path) -> None:
    path = tmp_path / "bomb.avro"
    size = write_manifest_bomb(str(path), MAX_BLOCK_BYTES + MiB)
    assert size < 100_000  # small on disk...
    assert _failure(path) == (
        f"StorageError: file://{path} exceeds MAX_BLOCK_BYTES (67,108,864): a block inflates "
        "past it; not read further"
    )


def test_bomb_keeps_the_worker_within_the_stated_figure(tmp_path: Path) -> None:
    # The bomb (a 200 MB file_path in ~200 KB) read in a fresh process: its
    # high-water mark grows by no more than one block's bound and some slack.
    path = tmp_path / "bomb.avro"
    write_manifest_bomb(str(path), 200_000_000)
    script = f"""
import json, resource
from polaris_pipeline.cleanup.manifest import iter_manifest_entries
from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask
from tests.support.iceberg import Warehouse, drop_task_row
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
before = hwm()
try:
    list(iter_manifest_entries(StorageResolver().input_file("file://{path}")))
    error = None
except StorageError as e:
    error = str(e)
print(json.dumps({{"before": before, "after": hwm(), "error": error}}))
"""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc/self/status")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    measured: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert "exceeds MAX_BLOCK_BYTES" in measured["error"]
    growth = measured["after"] - measured["before"]
    assert growth < MAX_BLOCK_BYTES / MiB + 32, measured


def test_too_many_records_in_a_block(tmp_path: Path) -> None:
    path = _write(tmp_path, container("null", [(MAX_BLOCK_RECORDS + 1, entry("/x"))]))
    assert _failure(path) == (
        f"StorageError: file://{path} exceeds MAX_BLOCK_RECORDS (1,000,000): a block of "
        "1,000,001; not read further"
    )


def test_a_stored_block_larger_than_the_bound_is_not_read(tmp_path: Path) -> None:
    # The size is refused from the block's own header, before any of it is read.
    head = (
        avro_bomb.header("null") + avro_bomb.avro_long(1) + avro_bomb.avro_long(MAX_BLOCK_BYTES + 1)
    )
    path = _write(tmp_path, head + b"short")
    assert _failure(path) == (
        f"StorageError: file://{path} exceeds MAX_BLOCK_BYTES (67,108,864): a block of "
        "67,108,865 bytes; not read further"
    )


def test_an_oversized_header_is_not_read(tmp_path: Path) -> None:
    head = avro_bomb.header("null")
    # A further metadata entry claiming 16 MiB: refused from its length alone.
    crafted = head[: -len(avro_bomb.SYNC) - 1] + (
        avro_bomb.avro_long(1) + avro_bomb.avro_bytes(b"k") + avro_bomb.avro_long(MAX_HEADER_BYTES)
    )
    path = _write(tmp_path, crafted)
    assert _failure(path) == (
        f"StorageError: file://{path} exceeds MAX_HEADER_BYTES (16,777,216): the Avro header; "
        "not read further"
    )


def test_a_path_longer_than_the_bound(tmp_path: Path) -> None:
    long_path = "/" + "p" * MAX_PATH_LENGTH
    path = _write(tmp_path, container("deflate", [(1, _deflate(entry(long_path)))]))
    assert _failure(path) == (
        f"StorageError: file://{path} exceeds MAX_PATH_LENGTH (16,384): an entry's file_path "
        "of 16,385 characters; not read further"
    )


def test_a_codec_that_cannot_be_bounded_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, container("snappy", [(1, b"\x00")]))
    assert _failure(path) == (
        f"StorageError: file://{path}: Avro codec 'snappy' is not read (only null, deflate, "
        "bzip2, xz, zstandard can be inflated within bounds)"
    )


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"not avro at all", "is not an Avro file: no 'Obj\\x01' magic"),
        (container("null", [(2, entry("/x"))]), "is a corrupt Avro file: a record does not decode"),
        (
            container("deflate", [(1, b"\xff\xff")]),
            "is a corrupt Avro file: a block does not inflate",
        ),
        (container("null", [(1, entry("/x"))])[:-3], "is a corrupt Avro file: truncated"),
    ],
)
def test_malformed_files_keep_their_one_line(tmp_path: Path, data: bytes, what: str) -> None:
    path = _write(tmp_path, data)
    assert _failure(path).startswith(f"StorageError: file://{path} {what}")


# -- manifest lists --------------------------------------------------------------------


def _manifest_list(tmp_path: Path, n: int) -> str:
    uri = f"file://{tmp_path}/snap-1.avro"
    files = [
        ManifestFile.from_args(
            manifest_path=f"file://{tmp_path}/m{i}.avro",
            manifest_length=100,
            partition_spec_id=0,
            content=ManifestContent.DATA,
            sequence_number=1,
            min_sequence_number=1,
            added_snapshot_id=1,
            added_files_count=1,
            existing_files_count=0,
            deleted_files_count=0,
            added_rows_count=1,
            existing_rows_count=0,
            deleted_rows_count=0,
        )
        for i in range(n)
    ]
    with write_manifest_list(
        format_version=2,
        output_file=PyArrowFileIO().new_output(uri),
        snapshot_id=1,
        parent_snapshot_id=None,
        sequence_number=1,
        avro_compression="deflate",
    ) as writer:
        writer.add_manifests(files)
    return uri


def _read_list(uri: str) -> list[str]:
    entries = manifest_list.read_bounded_manifest_list(StorageResolver().input_file(uri))
    return [mf.manifest_path for mf in entries]


def test_manifest_list_reads_and_its_entries_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = _manifest_list(tmp_path, 3)
    assert _read_list(uri) == [f"file://{tmp_path}/m{i}.avro" for i in range(3)]
    monkeypatch.setattr(manifest_list, "MAX_MANIFEST_LIST_ENTRIES", 2)
    with pytest.raises(StorageError) as caught:
        _read_list(uri)
    assert (
        str(caught.value)
        == f"{uri} exceeds MAX_MANIFEST_LIST_ENTRIES (2): its entries; not read further"
    )


def test_manifest_list_size_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _manifest_list(tmp_path, 3)
    size = os.path.getsize(uri.removeprefix("file://"))
    monkeypatch.setattr(manifest_list, "MAX_MANIFEST_LIST_BYTES", size - 1)
    with pytest.raises(StorageError) as caught:
        _read_list(uri)
    assert str(caught.value) == (
        f"{uri} exceeds MAX_MANIFEST_LIST_BYTES ({size - 1:,}): its size; not read further"
    )


def test_manifest_list_bomb_is_refused_before_pyiceberg_inflates_it(tmp_path: Path) -> None:
    path = tmp_path / "snap-bomb.avro"
    write_manifest_bomb(str(path), MAX_BLOCK_BYTES + MiB)
    with pytest.raises(StorageError) as caught:
        _read_list(f"file://{path}")
    assert "exceeds MAX_BLOCK_BYTES (67,108,864): a block inflates past it" in str(caught.value)


def test_block_reader_reads_from_any_stream() -> None:
    data = container("null", [(1, entry("/a")), (2, entry("/b") + entry("/c"))])
    blocks = list(AvroBlocks(io.BytesIO(data), "mem").blocks())
    assert [b.count for b in blocks] == [1, 2]


def test_table_cleanup_fails_on_a_manifest_list_bomb(local_warehouse: Warehouse) -> None:
    # A table writer replaced a snapshot's manifest list with a bomb: the table's task
    # fails with the one line, before any child is planned or any file deleted.
    wh = local_warehouse
    table = wh.build("t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    listed = Path(snapshot.manifest_list.removeprefix("file://"))
    write_manifest_bomb(str(listed), MAX_BLOCK_BYTES + MiB)
    before = wh.files()
    created: list[NewTask] = []

    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        created.extend(children)
        return children

    ctx = CleanupContext(
        task=drop_task_row(table), resolver=wh.resolver, config=wh.config, create_children=create
    )
    with pytest.raises(StorageError) as caught:
        run_cleanup(ctx)
    assert one_line(caught.value) == (
        f"StorageError: {snapshot.manifest_list} exceeds MAX_BLOCK_BYTES (67,108,864): a block "
        "inflates past it; not read further"
    )
    assert created == [] and wh.files() == before


# -- table metadata files ----------------------------------------------------------------


def _gzip_bomb(path: Path, inflated: int) -> None:
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as out:
        out.write(gz.compress(b'{"format-version": 2, "x": "'))
        for _ in range(inflated // MiB):
            out.write(gz.compress(b" " * MiB))
        out.write(gz.compress(b'"}') + gz.flush())


def test_gzipped_metadata_reads_and_a_gzip_bomb_fails_the_table(
    local_warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = local_warehouse
    table = wh.build("t")
    metadata = Path(table.metadata_location.removeprefix("file://"))
    text = metadata.read_bytes()
    metadata.write_bytes(gzip.compress(text))  # gzipped under its plain name: still read
    monkeypatch.setattr(metadata_file, "MAX_METADATA_BYTES", 2 * MiB)
    ctx = CleanupContext(task=drop_task_row(table), resolver=wh.resolver, config=wh.config)
    parsed = read_table_metadata(ctx, table.metadata_location)
    assert parsed is not None and parsed.location == table.location()

    _gzip_bomb(metadata, 3 * MiB)
    assert metadata.stat().st_size < 100_000
    with pytest.raises(StorageError) as caught:
        run_cleanup(ctx)
    assert one_line(caught.value) == (
        f"StorageError: {table.metadata_location} exceeds MAX_METADATA_BYTES (2,097,152): it "
        "inflates past it; not read further"
    )


def test_leak_finder_reports_a_gzip_bomb_as_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata = tmp_path / "t" / "metadata" / "00001-x.metadata.json"
    metadata.parent.mkdir(parents=True)
    _gzip_bomb(metadata, 3 * MiB)
    monkeypatch.setattr(metadata_file, "MAX_METADATA_BYTES", 2 * MiB)
    uri = f"file://{metadata}"
    root = read_root_metadata(StorageResolver(), [ListedObject(uri, 1, None)])
    assert root.error == (
        f"unreadable: {uri} exceeds MAX_METADATA_BYTES (2,097,152): it inflates past it; "
        "not read further"
    )
