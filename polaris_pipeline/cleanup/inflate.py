"""Inflate zlib data (raw deflate, gzip) within a bound, a piece at a time; name a bound passed.

One call with ``max_length`` would do too, but it joins its pieces into a copy as
large: inflating a piece at a time stops a bomb holding at most ``limit`` bytes.
"""

from __future__ import annotations

import zlib

from polaris_pipeline.errors import StorageError

RAW_DEFLATE = -15  # zlib's wbits for Avro's deflate blocks
GZIP = 31  # zlib's wbits for a gzip member

PIECE = 1024 * 1024


def exceeded(location: str, bound: str, value: int, detail: str) -> StorageError:
    """A file refused for a bound, in one line: ``<file> exceeds <BOUND> (<value>): ...``."""
    return StorageError(f"{location} exceeds {bound} ({value:,}): {detail}; not read further")


def inflate_at_most(data: bytes, wbits: int, limit: int) -> bytes | None:
    """``data`` inflated, or None once the output passes ``limit`` bytes.

    Raises zlib.error for data that is not of the format. Only the first gzip
    member is read (what Iceberg and Avro writers make)."""
    out = bytearray()
    d = zlib.decompressobj(wbits)
    pending = data
    while not d.eof:
        piece = d.decompress(pending, PIECE)
        out += piece
        if len(out) > limit:
            return None
        pending = d.unconsumed_tail
        if not pending and len(piece) < PIECE:
            break
    return bytes(out)
