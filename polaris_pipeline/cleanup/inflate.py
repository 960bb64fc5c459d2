"""Inflate zlib data (raw deflate, gzip) within a bound, a piece at a time.

One call with ``max_length`` would do too, but it joins its pieces into a copy as
large: inflating a piece at a time stops a bomb holding at most ``limit`` bytes.
"""

from __future__ import annotations

import zlib

RAW_DEFLATE = -15  # zlib's wbits for Avro's deflate blocks
GZIP = 31  # zlib's wbits for a gzip member

_PIECE = 1024 * 1024


def inflate_at_most(data: bytes, wbits: int, limit: int) -> bytes | None:
    """``data`` inflated, or None once the output passes ``limit`` bytes.

    Raises zlib.error for data that is not of the format. Only the first gzip
    member is read (what Iceberg and Avro writers make)."""
    out = bytearray()
    d = zlib.decompressobj(wbits)
    pending = data
    while not d.eof:
        piece = d.decompress(pending, _PIECE)
        out += piece
        if len(out) > limit:
            return None
        pending = d.unconsumed_tail
        if not pending and len(piece) < _PIECE:
            break
    return bytes(out)
