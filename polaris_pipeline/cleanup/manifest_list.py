"""A snapshot's manifest list read within bounds, then by pyiceberg.

pyiceberg reads the whole file and inflates each block whole, and a table
cleanup keeps every entry of every list, so a list is first checked here: its
stored size, each block inflated within ``avro_blocks``' bounds (and dropped),
its entries counted. pyiceberg then reads the very bytes that were checked, so
what it inflates is bounded too, and entries keep pyiceberg's reading (its
defaults for v1 lists) for the children's payloads.
"""

from __future__ import annotations

import io
from typing import IO, cast

from pyiceberg.io import InputFile, InputStream
from pyiceberg.manifest import ManifestFile, read_manifest_list

from polaris_pipeline.cleanup.avro_blocks import AvroBlocks
from polaris_pipeline.cleanup.inflate import exceeded

# A stored manifest list: Java writes about 100 bytes an entry, deflated.
MAX_MANIFEST_LIST_BYTES = 64 * 1024 * 1024
# Entries (manifests) of one list; Iceberg's writers merge manifests long before this.
MAX_MANIFEST_LIST_ENTRIES = 1_000_000


class _CheckedBytes(InputFile):
    """The checked bytes of ``location``, as the InputFile pyiceberg reads."""

    def __init__(self, location: str, data: bytes) -> None:
        super().__init__(location=location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return cast(InputStream, io.BytesIO(self._data))


def checked_bytes(stream: IO[bytes], location: str) -> bytes:
    """The manifest list in ``stream``, once it passed every bound (StorageError if not)."""
    data = stream.read(MAX_MANIFEST_LIST_BYTES + 1)
    if len(data) > MAX_MANIFEST_LIST_BYTES:
        raise exceeded(location, "MAX_MANIFEST_LIST_BYTES", MAX_MANIFEST_LIST_BYTES, "its size")
    entries = 0
    for block in AvroBlocks(io.BytesIO(data), location).blocks():
        entries += block.count
        if entries > MAX_MANIFEST_LIST_ENTRIES:
            raise exceeded(
                location, "MAX_MANIFEST_LIST_ENTRIES", MAX_MANIFEST_LIST_ENTRIES, "its entries"
            )
    return data


def read_bounded_manifest_list(input_file: InputFile) -> list[ManifestFile]:
    """Every entry of the manifest list ``input_file``; FileNotFoundError when it is gone."""
    with input_file.open() as stream:
        data = checked_bytes(cast(IO[bytes], stream), input_file.location)
    return list(read_manifest_list(_CheckedBytes(input_file.location, data)))
