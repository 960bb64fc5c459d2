"""An Avro object container file (a manifest, a manifest list) read block by block, within bounds.

Anyone who can write inside a table can write a manifest, so blocks are hostile: 200 KiB
of deflate can inflate to 200 MB, and fastavro's and pyiceberg's readers inflate a block
whole. So the container is read here, each block inflated with the codec's ``max_length``
(deflate, bzip2, xz) or a bounded stream read (zstandard): a bomb is refused after
``MAX_BLOCK_BYTES`` of output. Snappy and unnamed codecs are refused (none installed).
Bounds are generous (Java writes ~64 KB blocks); each refusal is one StorageError line
naming file and bound: the task fails, nothing is marked done.
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import fastavro

from polaris_pipeline.cleanup.inflate import PIECE, RAW_DEFLATE, exceeded, inflate_at_most
from polaris_pipeline.errors import StorageError

MiB = 1024 * 1024
# One block's bytes, decompressed (and as stored: a stored block larger is no real one).
MAX_BLOCK_BYTES = 64 * MiB
# Records in one block: about 1,000 in Iceberg's Java blocks, all of a manifest list's
# entries in pyiceberg's single block.
MAX_BLOCK_RECORDS = 1_000_000
# The header's metadata map: the Avro schema and Iceberg's table schema and spec as JSON.
MAX_HEADER_BYTES = 16 * MiB

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
_MAX_LONG_BYTES = 10  # a zig-zag varint of 64 bits


@dataclass(frozen=True)
class Block:
    """One block: its record count and its decompressed bytes."""

    count: int
    data: bytes


class _Stream:
    """Exact reads of Avro primitives from ``stream``, counting the bytes consumed."""

    def __init__(self, stream: IO[bytes], location: str) -> None:
        self._stream = stream
        self._pending = b""  # the byte at_end() looked at
        self.location = location
        self.consumed = 0

    def corrupt(self, what: str) -> StorageError:
        return StorageError(f"{self.location} is a corrupt Avro file: {what}")

    def read(self, n: int) -> bytes:
        head, self._pending = self._pending[:n], self._pending[n:]
        data = head + self._stream.read(n - len(head)) if n > len(head) else head
        self.consumed += len(data)
        if len(data) != n:
            raise self.corrupt(f"truncated ({n} bytes wanted at byte {self.consumed - len(data)})")
        return data

    def at_end(self) -> bool:
        """Whether the stream has ended (the byte looked at is kept for the next read)."""
        if not self._pending:
            self._pending = self._stream.read(1)
        return not self._pending

    def read_long(self) -> int:
        result = shift = 0
        for _ in range(_MAX_LONG_BYTES):
            byte = self.read(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
        raise self.corrupt("a long of more than 10 bytes")


def _read_header(s: _Stream) -> tuple[dict[str, bytes], bytes]:
    if s.read(len(MAGIC)) != MAGIC:
        raise StorageError(f"{s.location} is not an Avro file: no 'Obj\\x01' magic")
    meta: dict[str, bytes] = {}
    while (count := s.read_long()) != 0:
        if count < 0:
            count = -count
            s.read_long()  # the block's size in bytes, not needed
        for _ in range(count):
            key = _read_sized(s, "a metadata key").decode("utf-8", "replace")
            meta[key] = _read_sized(s, "a metadata value")
    return meta, s.read(SYNC_SIZE)


def _read_sized(s: _Stream, what: str) -> bytes:
    size = s.read_long()
    if size < 0:
        raise s.corrupt(f"{what} of negative size {size}")
    if s.consumed + size > MAX_HEADER_BYTES:
        raise exceeded(s.location, "MAX_HEADER_BYTES", MAX_HEADER_BYTES, "the Avro header")
    return s.read(size)


class _Output:
    """A block's inflated bytes, refused once they pass ``MAX_BLOCK_BYTES``."""

    def __init__(self, location: str) -> None:
        self.data = bytearray()
        self._location = location

    def add(self, piece: bytes) -> None:
        self.data += piece
        if len(self.data) > MAX_BLOCK_BYTES:
            raise self.past_bound()

    def past_bound(self) -> StorageError:
        return exceeded(
            self._location, "MAX_BLOCK_BYTES", MAX_BLOCK_BYTES, "a block inflates past it"
        )


def _deflate(data: bytes, location: str) -> bytes:
    out = inflate_at_most(data, RAW_DEFLATE, MAX_BLOCK_BYTES)
    if out is None:
        raise _Output(location).past_bound()
    return out


def _stream(d: bz2.BZ2Decompressor | lzma.LZMADecompressor, data: bytes, location: str) -> bytes:
    out = _Output(location)
    out.add(d.decompress(data, PIECE))
    while not d.eof and not d.needs_input:
        out.add(d.decompress(b"", PIECE))
    return bytes(out.data)


def _zstandard(data: bytes, location: str) -> bytes:
    import zstandard  # pyiceberg's dependency; imported only for a zstd file

    out = _Output(location)
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        while piece := reader.read(PIECE):
            out.add(piece)
    return bytes(out.data)


_CODECS: dict[str, Callable[[bytes, str], bytes]] = {
    "null": lambda data, _: data,
    "deflate": _deflate,
    "bzip2": lambda data, location: _stream(bz2.BZ2Decompressor(), data, location),
    "xz": lambda data, location: _stream(lzma.LZMADecompressor(), data, location),
    "zstandard": _zstandard,
}


class AvroBlocks:
    """The container in ``stream`` (``location`` in messages): ``schema`` (parsed by
    fastavro) from the header, then :meth:`blocks`, each checked against the bounds."""

    def __init__(self, stream: IO[bytes], location: str) -> None:
        self._s = _Stream(stream, location)
        self.location = location
        meta, self._sync = _read_header(self._s)
        codec = meta.get("avro.codec", b"null").decode("utf-8", "replace") or "null"
        inflate = _CODECS.get(codec)
        if inflate is None:
            raise StorageError(
                f"{location}: Avro codec {codec!r} is not read (only "
                f"{', '.join(_CODECS)} can be inflated within bounds)"
            )
        self._inflate = inflate
        try:
            self.schema: Any = fastavro.parse_schema(json.loads(meta["avro.schema"]))
        except KeyError:
            raise StorageError(f"{location} is not an Avro file: no avro.schema") from None
        except Exception as e:  # fastavro raises several types for a bad schema
            raise StorageError(
                f"{location} is not an Avro file: bad schema ({type(e).__name__}: {e})"
            ) from None

    def blocks(self) -> Iterator[Block]:
        s = self._s
        while not s.at_end():
            count = s.read_long()
            size = s.read_long()
            if count < 0 or size < 0:
                raise s.corrupt(f"a block of {count} records in {size} bytes")
            if count > MAX_BLOCK_RECORDS:
                raise exceeded(
                    self.location, "MAX_BLOCK_RECORDS", MAX_BLOCK_RECORDS, f"a block of {count:,}"
                )
            if size > MAX_BLOCK_BYTES:
                raise exceeded(
                    self.location, "MAX_BLOCK_BYTES", MAX_BLOCK_BYTES, f"a block of {size:,} bytes"
                )
            stored = s.read(size)
            if s.read(SYNC_SIZE) != self._sync:
                raise s.corrupt("a block's sync marker differs from the header's")
            try:
                data = self._inflate(stored, self.location)
            except (zlib.error, OSError, EOFError, ValueError, lzma.LZMAError) as e:
                raise s.corrupt(f"a block does not inflate ({type(e).__name__}: {e})") from None
            except StorageError:
                raise
            except Exception as e:  # zstandard.ZstdError, imported lazily
                raise s.corrupt(f"a block does not inflate ({type(e).__name__}: {e})") from None
            yield Block(count, data)

    def records(self) -> Iterator[Any]:
        """Every record, decoded with the writer's schema, one block inflated at a time."""
        for block in self.blocks():
            body = io.BytesIO(block.data)
            try:
                for _ in range(block.count):
                    yield fastavro.schemaless_reader(body, self.schema, None)
            except Exception as e:  # garbage can trip any of the decoder's errors
                raise self._s.corrupt(
                    f"a record does not decode ({type(e).__name__}: {e})"
                ) from None
