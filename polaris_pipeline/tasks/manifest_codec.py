"""Iceberg's ``ManifestFiles.encode`` bytes: the payload of a MANIFEST_FILE_CLEANUP task.

Layout (``AvroEncoderUtil``): magic ``0xC2 0x01``; the writer schema as JSON in Java's
``writeUTF`` form (2-byte big-endian length, modified UTF-8); one Avro binary datum.
Decoding uses the embedded schema and finds fields by ``field-id``: writers differ in the
fields (older lack ``first_row_id``, ``key_metadata``, ``contains_nan``) and names.
"""

from __future__ import annotations

import dataclasses
import io
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastavro

from polaris_pipeline.errors import PayloadError

if TYPE_CHECKING:
    from pyiceberg.manifest import ManifestFile

MAGIC = b"\xc2\x01"
MAX_UTF_LENGTH = 0xFFFF

MANIFEST_FILE_RECORD = "org.apache.iceberg.GenericManifestFile"
PARTITION_SUMMARY_RECORD = "org.apache.iceberg.GenericPartitionFieldSummary"

CONTENT_DATA = 0
CONTENT_DELETES = 1

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class PartitionFieldSummary:
    """One partition field's summary in a manifest list entry."""

    contains_null: bool
    contains_nan: bool | None = None
    lower_bound: bytes | None = None
    upper_bound: bytes | None = None


@dataclass(frozen=True)
class ManifestFileRef:
    """One entry of a manifest list (Iceberg's ``ManifestFile``)."""

    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: int
    sequence_number: int | None
    min_sequence_number: int | None
    added_snapshot_id: int
    added_files_count: int | None = None
    existing_files_count: int | None = None
    deleted_files_count: int | None = None
    added_rows_count: int | None = None
    existing_rows_count: int | None = None
    deleted_rows_count: int | None = None
    partitions: tuple[PartitionFieldSummary, ...] | None = None
    key_metadata: bytes | None = None
    first_row_id: int | None = None


# ------------------------------ The writer schema. (field id, name, Avro type, optional)

_SUMMARY_FIELDS: tuple[tuple[int, str, str, bool], ...] = (
    (509, "contains_null", "boolean", False),
    (518, "contains_nan", "boolean", True),
    (510, "lower_bound", "bytes", True),
    (511, "upper_bound", "bytes", True),
)

_PARTITIONS_ID = 507
_CONTENT_ID = 517
_PARTITIONS_ELEMENT_ID = 508

# "partitions" has the array type built below instead of a primitive name.
_MANIFEST_FIELDS: tuple[tuple[int, str, str, bool], ...] = (
    (500, "manifest_path", "string", False),
    (501, "manifest_length", "long", False),
    (502, "partition_spec_id", "int", False),
    (_CONTENT_ID, "content", "int", True),
    (515, "sequence_number", "long", True),
    (516, "min_sequence_number", "long", True),
    (503, "added_snapshot_id", "long", False),
    (504, "added_files_count", "int", True),
    (505, "existing_files_count", "int", True),
    (506, "deleted_files_count", "int", True),
    (512, "added_rows_count", "long", True),
    (513, "existing_rows_count", "long", True),
    (514, "deleted_rows_count", "long", True),
    (_PARTITIONS_ID, "partitions", "array", True),
    (519, "key_metadata", "bytes", True),
    (520, "first_row_id", "long", True),
)

# Names seen in the wild for fields whose schema lacks a field-id: ours plus
# the names Iceberg's Java writers use for 504-506.
_MANIFEST_NAME_TO_ID: dict[str, int] = {name: fid for fid, name, _, _ in _MANIFEST_FIELDS} | {
    "added_data_files_count": 504,
    "existing_data_files_count": 505,
    "deleted_data_files_count": 506,
}
_SUMMARY_NAME_TO_ID: dict[str, int] = {name: fid for fid, name, _, _ in _SUMMARY_FIELDS}


def _avro_field(field_id: int, name: str, avro_type: Any, optional: bool) -> dict[str, Any]:
    if optional:
        return {"name": name, "type": ["null", avro_type], "default": None, "field-id": field_id}
    return {"name": name, "type": avro_type, "field-id": field_id}


def manifest_file_avro_schema() -> dict[str, Any]:
    """The Avro schema this module writes (a fresh copy; callers may mutate it)."""
    summary = {
        "type": "record",
        "name": PARTITION_SUMMARY_RECORD,
        "fields": [_avro_field(*f) for f in _SUMMARY_FIELDS],
    }
    partitions = {"type": "array", "items": summary, "element-id": _PARTITIONS_ELEMENT_ID}
    fields = [
        _avro_field(fid, name, partitions if fid == _PARTITIONS_ID else avro_type, optional)
        for fid, name, avro_type, optional in _MANIFEST_FIELDS
    ]
    return {"type": "record", "name": MANIFEST_FILE_RECORD, "fields": fields}


_SCHEMA_JSON = json.dumps(manifest_file_avro_schema(), separators=(",", ":"))
_PARSED_WRITER_SCHEMA = fastavro.parse_schema(json.loads(_SCHEMA_JSON))


# ----------- Java's modified UTF-8 (DataOutputStream.writeUTF / DataInputStream.readUTF)


def encode_modified_utf8(text: str) -> bytes:
    """Encode like Java's modified UTF-8, without the length prefix.

    Java strings are UTF-16, so a supplementary character becomes two
    surrogates of three bytes each, and NUL becomes ``C0 80`` so the output
    never holds a zero byte.
    """
    # surrogatepass keeps lone surrogates that a Python str may hold.
    raw = text.encode("utf-16-be", "surrogatepass")
    out = bytearray()
    for unit in struct.unpack(f">{len(raw) // 2}H", raw):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:  # includes NUL, written in two bytes
            out += bytes((0xC0 | (unit >> 6), 0x80 | (unit & 0x3F)))
        else:
            out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)


def decode_modified_utf8(data: bytes) -> str:
    """Decode Java's modified UTF-8 (accepting what ``readUTF`` accepts)."""
    units: list[int] = []
    i, n = 0, len(data)
    while i < n:
        b0 = data[i]
        if b0 < 0x80:
            units.append(b0)
            i += 1
        elif b0 >> 5 == 0b110:
            if i + 1 >= n or data[i + 1] >> 6 != 0b10:
                raise PayloadError(f"malformed modified UTF-8 at byte {i}")
            units.append(((b0 & 0x1F) << 6) | (data[i + 1] & 0x3F))
            i += 2
        elif b0 >> 4 == 0b1110:
            if i + 2 >= n or data[i + 1] >> 6 != 0b10 or data[i + 2] >> 6 != 0b10:
                raise PayloadError(f"malformed modified UTF-8 at byte {i}")
            units.append(((b0 & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F))
            i += 3
        else:
            raise PayloadError(f"malformed modified UTF-8 at byte {i} (0x{b0:02X})")
    # Pairs of surrogates join into one character, as they do in Java.
    return struct.pack(f">{len(units)}H", *units).decode("utf-16-be", "surrogatepass")


def java_write_utf(text: str) -> bytes:
    """``DataOutputStream.writeUTF``: 2-byte big-endian length, then modified UTF-8."""
    body = encode_modified_utf8(text)
    if len(body) > MAX_UTF_LENGTH:
        raise PayloadError(
            f"string too long for writeUTF: {len(body)} bytes of modified UTF-8 "
            f"(at most {MAX_UTF_LENGTH})"
        )
    return struct.pack(">H", len(body)) + body


# -------------------------------------------------------------------------------- Encode


def _check_range(name: str, value: int | None, bounds: tuple[int, int]) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"cannot encode manifest: {name} is not an integer")
    if not bounds[0] <= value <= bounds[1]:
        raise PayloadError(f"cannot encode manifest: {name}={value} is out of range")


def encode_manifest_file(ref: ManifestFileRef) -> bytes:
    """Iceberg ``ManifestFiles.encode`` bytes for ``ref``."""
    for _, name, avro_type, _ in _MANIFEST_FIELDS:
        if avro_type in ("int", "long"):
            bounds = _INT_RANGE if avro_type == "int" else _LONG_RANGE
            _check_range(name, getattr(ref, name), bounds)
    if not isinstance(ref.manifest_path, str):
        raise PayloadError("cannot encode manifest: manifest_path is not a string")
    record: dict[str, Any] = {name: getattr(ref, name) for _, name, _, _ in _MANIFEST_FIELDS}
    if ref.partitions is not None:
        record["partitions"] = [dataclasses.asdict(p) for p in ref.partitions]
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(java_write_utf(_SCHEMA_JSON))
    try:
        fastavro.schemaless_writer(out, _PARSED_WRITER_SCHEMA, record, strict=True)
    except Exception as exc:  # fastavro raises several types for bad values
        raise PayloadError(f"cannot encode manifest: {type(exc).__name__}: {exc}") from None
    return out.getvalue()


# -------------------------------------------------------------------------------- Decode


def _read_schema(data: bytes) -> tuple[dict[str, Any], int]:
    """The embedded schema as JSON and the offset where the datum starts."""
    if len(data) < 4:
        raise PayloadError(
            f"manifest data too short: {len(data)} bytes (need at least 4 for header and length)"
        )
    if data[:2] != MAGIC:
        raise PayloadError(
            f"manifest data has wrong magic bytes 0x{data[0]:02X} 0x{data[1]:02X} "
            f"(expected 0xC2 0x01)"
        )
    (length,) = struct.unpack(">H", data[2:4])
    end = 4 + length
    if end > len(data):
        raise PayloadError(
            f"manifest schema length {length} runs past the end of the data "
            f"({len(data) - 4} bytes follow the length)"
        )
    try:
        text = decode_modified_utf8(data[4:end])
    except PayloadError as exc:
        raise PayloadError(f"manifest schema is not modified UTF-8: {exc.reason}") from None
    try:
        schema = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"manifest schema is not JSON ({exc})") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise PayloadError("manifest schema is not an Avro record")
    fields = schema.get("fields")
    if not isinstance(fields, list) or not any(
        isinstance(f, dict) and (f.get("name") == "manifest_path" or f.get("field-id") == 500)
        for f in fields
    ):
        raise PayloadError("manifest schema is not a manifest_file record (no manifest_path)")
    return schema, end


def _resolve(avro_type: Any, named: Mapping[str, Any]) -> Any:
    """Follow a named reference and unwrap a ``["null", T]`` union."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        avro_type = branches[0] if len(branches) == 1 else None
    if isinstance(avro_type, str):
        return named.get(avro_type, avro_type)
    return avro_type


def _names_by_id(record: Mapping[str, Any], fallback: Mapping[str, int]) -> dict[int, str]:
    """Field id -> field name in a (parsed) writer record schema."""
    out: dict[int, str] = {}
    for f in record.get("fields", ()):
        name = f.get("name")
        fid = f.get("field-id")
        if isinstance(fid, str) and fid.isdigit():
            fid = int(fid)
        if not isinstance(fid, int) or isinstance(fid, bool):
            fid = fallback.get(name)
        if fid is not None and isinstance(name, str):
            out.setdefault(fid, name)
    return out


def _summary_names_by_id(partitions_type: Any, named: Mapping[str, Any]) -> dict[int, str]:
    """Field id -> name inside the partitions array's element record."""
    array = _resolve(partitions_type, named)
    if not isinstance(array, dict) or array.get("type") != "array":
        raise PayloadError("manifest schema: partitions is not an array")
    summary = _resolve(array.get("items"), named)
    if not isinstance(summary, dict) or summary.get("type") != "record":
        raise PayloadError("manifest schema: partitions elements are not records")
    return _names_by_id(summary, _SUMMARY_NAME_TO_ID)


class _Fields:
    """Typed access to a decoded record by Iceberg field id."""

    def __init__(self, values: Mapping[str, Any], names: Mapping[int, str], what: str) -> None:
        self._values = values
        self._names = names
        self._what = what

    def get(self, field_id: int) -> Any:
        name = self._names.get(field_id)
        return None if name is None else self._values.get(name)

    def _present(self, field_id: int, label: str, required: bool) -> Any:
        value = self.get(field_id)
        if value is None and required:
            raise PayloadError(f"{self._what} has no {label} (field {field_id})")
        return value

    def integer(self, field_id: int, label: str, *, required: bool = False) -> int | None:
        value = self._present(field_id, label, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise PayloadError(
                f"{self._what} {label} is not an integer (found {type(value).__name__})"
            )
        return value

    def boolean(self, field_id: int, label: str, *, required: bool = False) -> bool | None:
        value = self._present(field_id, label, required)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise PayloadError(f"{self._what} {label} is not a boolean")
        return value

    def binary(self, field_id: int, label: str) -> bytes | None:
        value = self.get(field_id)
        if value is None:
            return None
        if not isinstance(value, (bytes, bytearray)):
            raise PayloadError(f"{self._what} {label} is not binary")
        return bytes(value)


def decode_manifest_file(data: bytes) -> ManifestFileRef:
    """Decode ``ManifestFiles.encode`` bytes. Every failure is a PayloadError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PayloadError(f"manifest data is not bytes (found {type(data).__name__})")
    data = bytes(data)
    schema, start = _read_schema(data)
    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(schema, named)
    except Exception as exc:  # fastavro raises many types for a bad schema
        raise PayloadError(
            f"manifest schema is not a valid Avro schema ({type(exc).__name__}: {exc})"
        ) from None
    body = io.BytesIO(data[start:])
    try:
        datum = fastavro.schemaless_reader(body, parsed, None)
    except EOFError:
        raise PayloadError(
            f"manifest datum is truncated ({len(data) - start} bytes after the schema)"
        ) from None
    except Exception as exc:  # garbage can trip any decoder error
        raise PayloadError(
            f"manifest datum is not valid Avro for its schema ({type(exc).__name__}: {exc})"
        ) from None
    trailing = len(data) - start - body.tell()
    if trailing:
        raise PayloadError(f"manifest datum is followed by {trailing} unexpected bytes")
    if not isinstance(datum, dict) or not isinstance(parsed, dict):
        raise PayloadError("manifest datum is not a record")
    return _ref_from_datum(datum, parsed, named)


def _ref_from_datum(
    datum: Mapping[str, Any], parsed: Mapping[str, Any], named: Mapping[str, Any]
) -> ManifestFileRef:
    names = _names_by_id(parsed, _MANIFEST_NAME_TO_ID)
    f = _Fields(datum, names, "manifest")
    path = f.get(500)
    if not isinstance(path, str):
        raise PayloadError("manifest has no manifest_path string (field 500)")
    content = f.integer(_CONTENT_ID, "content")
    content = CONTENT_DATA if content is None else content  # v1 writers: always data
    if content not in (CONTENT_DATA, CONTENT_DELETES):
        raise PayloadError(f"manifest content {content} is unknown (0 data, 1 deletes)")
    partitions: tuple[PartitionFieldSummary, ...] | None = None
    raw_partitions = f.get(_PARTITIONS_ID)
    if raw_partitions is not None:
        if not isinstance(raw_partitions, list):
            raise PayloadError("manifest partitions is not a list")
        field = next(x for x in parsed["fields"] if x.get("name") == names[_PARTITIONS_ID])
        summary_names = _summary_names_by_id(field.get("type"), named)
        items: list[PartitionFieldSummary] = []
        for index, raw in enumerate(raw_partitions):
            if not isinstance(raw, dict):
                raise PayloadError(f"manifest partitions[{index}] is not a record")
            s = _Fields(raw, summary_names, f"manifest partitions[{index}]")
            contains_null = s.boolean(509, "contains_null", required=True)
            assert contains_null is not None
            items.append(
                PartitionFieldSummary(
                    contains_null=contains_null,
                    contains_nan=s.boolean(518, "contains_nan"),
                    lower_bound=s.binary(510, "lower_bound"),
                    upper_bound=s.binary(511, "upper_bound"),
                )
            )
        partitions = tuple(items)
    # The other fields, in the schema's order: ints and longs, and key_metadata.
    values: dict[str, Any] = {}
    for fid, name, avro_type, optional in _MANIFEST_FIELDS:
        if avro_type == "bytes":
            values[name] = f.binary(fid, name)
        elif avro_type in ("int", "long") and fid != _CONTENT_ID:
            values[name] = f.integer(fid, name, required=not optional)
    return ManifestFileRef(manifest_path=path, content=content, partitions=partitions, **values)


# ----------------------------------------------------------------------------- pyiceberg


def manifest_ref_from_pyiceberg(mf: ManifestFile) -> ManifestFileRef:
    """Convert a manifest list entry read by pyiceberg."""
    snapshot_id = mf.added_snapshot_id
    if snapshot_id is None:
        raise PayloadError(f"manifest {mf.manifest_path!r} has no added_snapshot_id")
    partitions = None
    if mf.partitions is not None:
        partitions = tuple(
            PartitionFieldSummary(
                contains_null=bool(p.contains_null),
                contains_nan=None if p.contains_nan is None else bool(p.contains_nan),
                lower_bound=None if p.lower_bound is None else bytes(p.lower_bound),
                upper_bound=None if p.upper_bound is None else bytes(p.upper_bound),
            )
            for p in mf.partitions
        )
    content = mf.content
    key_metadata = mf.key_metadata
    # pyiceberg 0.12 has no accessor for first_row_id; a later one may.
    first_row_id = getattr(mf, "first_row_id", None)
    return ManifestFileRef(
        manifest_path=mf.manifest_path,
        manifest_length=mf.manifest_length,
        partition_spec_id=mf.partition_spec_id,
        content=CONTENT_DATA if content is None else int(content),
        sequence_number=mf.sequence_number,
        min_sequence_number=mf.min_sequence_number,
        added_snapshot_id=snapshot_id,
        added_files_count=mf.added_files_count,
        existing_files_count=mf.existing_files_count,
        deleted_files_count=mf.deleted_files_count,
        added_rows_count=mf.added_rows_count,
        existing_rows_count=mf.existing_rows_count,
        deleted_rows_count=mf.deleted_rows_count,
        partitions=partitions,
        key_metadata=None if key_metadata is None else bytes(key_metadata),
        first_row_id=first_row_id if isinstance(first_row_id, int) else None,
    )
