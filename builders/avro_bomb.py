"""Hand-made Avro object containers: a manifest memory bomb, and blocks that break a bound.

``write_manifest_bomb`` writes what a table writer could plant: a manifest whose
one entry has a file_path of ``path_chars`` characters, deflated in one block, a
few hundred KB on disk for hundreds of MB inflated. It is deflated in 1 MiB pieces,
so writing it never holds the path in memory. ``container`` lays out any header
and blocks, for tests of each bound.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Iterator

MAGIC = b"Obj\x01"
SYNC = bytes(range(16))
_PIECE = 1024 * 1024

# The fields of a manifest entry the cleanup reads, nothing else.
ENTRY_SCHEMA = {
    "type": "record",
    "name": "manifest_entry",
    "fields": [
        {"name": "status", "type": "int"},
        {
            "name": "data_file",
            "type": {
                "type": "record",
                "name": "r2",
                "fields": [
                    {"name": "file_path", "type": "string"},
                    {"name": "file_size_in_bytes", "type": "long"},
                ],
            },
        },
    ],
}


def avro_long(n: int) -> bytes:
    """``n`` as an Avro long (zig-zag varint)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def avro_bytes(data: bytes) -> bytes:
    return avro_long(len(data)) + data


def header(
    codec: str, schema: object = ENTRY_SCHEMA, extra: dict[str, bytes] | None = None
) -> bytes:
    """Magic, the metadata map (schema, codec, ``extra``) and the sync marker."""
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": codec.encode()}
    meta.update(extra or {})
    body = b"".join(avro_bytes(k.encode()) + avro_bytes(v) for k, v in meta.items())
    return MAGIC + avro_long(len(meta)) + body + avro_long(0) + SYNC


def block(count: int, stored: bytes) -> bytes:
    """One block as stored: record count, byte size, the bytes, the sync marker."""
    return avro_long(count) + avro_long(len(stored)) + stored + SYNC


def container(codec: str, blocks: Iterable[tuple[int, bytes]], **kwargs: object) -> bytes:
    """A whole file: ``header(codec, ...)`` then each ``(count, stored bytes)`` block."""
    return header(codec, **kwargs) + b"".join(block(c, s) for c, s in blocks)  # type: ignore[arg-type]


def entry(path: str, size: int = 1, status: int = 1) -> bytes:
    """One record of ``ENTRY_SCHEMA``, encoded."""
    return avro_long(status) + avro_bytes(path.encode()) + avro_long(size)


def _bomb_pieces(path_chars: int) -> Iterator[bytes]:
    yield avro_long(1) + avro_long(path_chars)  # status, then the path's length
    left = path_chars
    while left:
        n = min(left, _PIECE)
        yield b"a" * n
        left -= n
    yield avro_long(1)  # file_size_in_bytes


def write_manifest_bomb(local_path: str, path_chars: int) -> int:
    """Write the bomb at ``local_path``; its size in bytes."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    stored = b"".join(deflate.compress(p) for p in _bomb_pieces(path_chars)) + deflate.flush()
    with open(local_path, "wb") as out:
        out.write(header("deflate") + block(1, stored))
    return os.path.getsize(local_path)
