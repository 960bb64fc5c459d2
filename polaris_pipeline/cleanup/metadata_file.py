"""A table metadata file's JSON bytes, read and un-gzipped within one bound.

A table writer writes the metadata file too, and a ``.gz.metadata.json`` can be a
gzip bomb: pyiceberg's reader would read the whole file and inflate all of it.
Here at most ``MAX_METADATA_BYTES`` are read, and a gzipped file (told by its magic
bytes, which JSON never starts with) is inflated to at most as many.
"""

from __future__ import annotations

import zlib
from typing import IO, TYPE_CHECKING, cast

from polaris_pipeline.cleanup.inflate import GZIP, exceeded, inflate_at_most
from polaris_pipeline.errors import StorageError

if TYPE_CHECKING:
    # Typing only: a BATCH task's run and the code location never import pyiceberg.
    from pyiceberg.io import InputFile

# Table metadata is rarely above a few MiB; a file far larger is not one worth holding.
MAX_METADATA_BYTES = 256 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


def gunzipped(data: bytes, location: str) -> bytes:
    """``data``, inflated when it is gzip; StorageError past the bound or when corrupt."""
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        out = inflate_at_most(data, GZIP, MAX_METADATA_BYTES)
    except zlib.error as e:
        raise StorageError(f"{location} is not valid gzip: {e}") from None
    if out is None:
        raise exceeded(location, "MAX_METADATA_BYTES", MAX_METADATA_BYTES, "it inflates past it")
    return out


def read_metadata_bytes(input_file: InputFile) -> bytes:
    """The JSON of the metadata file ``input_file``; FileNotFoundError when it is gone."""
    with input_file.open() as stream:
        data = cast(IO[bytes], stream).read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise exceeded(input_file.location, "MAX_METADATA_BYTES", MAX_METADATA_BYTES, "its size")
    return gunzipped(data, input_file.location)
