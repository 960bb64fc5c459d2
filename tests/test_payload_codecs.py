"""The task payload codecs: Iceberg's encoded ManifestFile bytes and the JSON ``data`` payloads."""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.tasks.manifest_codec import (
    CONTENT_DELETES,
    MAGIC,
    ManifestFileRef,
    PartitionFieldSummary,
    decode_manifest_file,
    decode_modified_utf8,
    encode_manifest_file,
    encode_modified_utf8,
    java_write_utf,
    manifest_ref_from_pyiceberg,
)
from polaris_pipeline.tasks.model import TaskRow, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    DroppedEntity,
    ManifestCleanupPayload,
    TableIdentifier,
    batch_cleanup_task_name,
    decode_batch_cleanup,
    decode_dropped_entity,
    decode_manifest_cleanup,
    encode_batch_cleanup,
    encode_dropped_entity,
    encode_manifest_cleanup,
    entity_cleanup_task_name,
    manifest_cleanup_task_name,
    require_metadata_location,
    task_properties,
)

MANIFEST_FIELD_IDS = [
    500,
    501,
    502,
    517,
    515,
    516,
    503,
    504,
    505,
    506,
    512,
    513,
    514,
    507,
    519,
    520,
]
OPTIONAL_IDS = {517, 515, 516, 504, 505, 506, 512, 513, 514, 507, 519, 520}
SUMMARY_FIELD_IDS = [509, 518, 510, 511]
UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"

FULL_REF = ManifestFileRef(
    manifest_path="s3://bucket/wh/ns/t/metadata/0a1b-m0.avro",
    manifest_length=7_345,
    partition_spec_id=3,
    content=1,
    sequence_number=12,
    min_sequence_number=9,
    added_snapshot_id=8_765_432_109_876_543_210,
    added_files_count=4,
    existing_files_count=5,
    deleted_files_count=6,
    added_rows_count=2**40,
    existing_rows_count=0,
    deleted_rows_count=17,
    partitions=(
        PartitionFieldSummary(False, None, b"\x00\x01", b"\xff"),
        PartitionFieldSummary(True, True, None, None),
    ),
    key_metadata=b"\x00key\xff",
    first_row_id=1_000,
)

MINIMAL_REF = ManifestFileRef(
    manifest_path="file:///tmp/m.avro",
    manifest_length=0,
    partition_spec_id=0,
    content=0,
    sequence_number=None,
    min_sequence_number=None,
    added_snapshot_id=-(2**63),
)


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The embedded schema (JSON) and the datum bytes, read by hand."""
    (length,) = struct.unpack(">H", data[2:4])
    return json.loads(decode_modified_utf8(data[4 : 4 + length])), data[4 + length :]


def assemble(schema: dict[str, Any] | str, datum: bytes) -> bytes:
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return MAGIC + java_write_utf(text) + datum


def avro_datum(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def reason(exc_info: pytest.ExceptionInfo[PayloadError]) -> str:
    return exc_info.value.reason


# ---------------------------------------------------------------------------
# Manifest codec: round trips and the byte layout
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ref", [FULL_REF, MINIMAL_REF], ids=["full", "minimal"])
def test_manifest_round_trip(ref: ManifestFileRef) -> None:
    assert decode_manifest_file(encode_manifest_file(ref)) == ref


def test_manifest_round_trip_keeps_empty_partition_list_distinct_from_none() -> None:
    empty = ManifestFileRef(**{**MINIMAL_REF.__dict__, "partitions": ()})
    assert decode_manifest_file(encode_manifest_file(empty)).partitions == ()
    assert decode_manifest_file(encode_manifest_file(MINIMAL_REF)).partitions is None


def test_is_delete_manifest() -> None:
    assert FULL_REF.content == CONTENT_DELETES
    assert MINIMAL_REF.content != CONTENT_DELETES


def test_manifest_golden_bytes() -> None:
    ref = ManifestFileRef(
        manifest_path="s3://b/m.avro",
        manifest_length=100,
        partition_spec_id=1,
        content=1,
        sequence_number=3,
        min_sequence_number=None,
        added_snapshot_id=-1,
        added_files_count=2,
        partitions=(PartitionFieldSummary(True, None, b"\x01", None),),
        first_row_id=64,
    )
    data = encode_manifest_file(ref)

    assert data[:2] == b"\xc2\x01"
    (length,) = struct.unpack(">H", data[2:4])
    schema_bytes = data[4 : 4 + length]
    assert len(schema_bytes) == length
    schema = json.loads(schema_bytes.decode("ascii"))  # our JSON is ASCII, so MUTF-8 == ASCII

    assert schema["type"] == "record"
    assert schema["name"] == "org.apache.iceberg.GenericManifestFile"
    assert [f["field-id"] for f in schema["fields"]] == MANIFEST_FIELD_IDS
    for f in schema["fields"]:
        if f["field-id"] in OPTIONAL_IDS:
            assert f["type"][0] == "null" and f["default"] is None, f["name"]
        else:
            assert isinstance(f["type"], str), f["name"]
    partitions = next(f for f in schema["fields"] if f["field-id"] == 507)["type"][1]
    assert partitions["type"] == "array" and partitions["element-id"] == 508
    summary = partitions["items"]
    assert summary["name"] == "org.apache.iceberg.GenericPartitionFieldSummary"
    assert [f["field-id"] for f in summary["fields"]] == SUMMARY_FIELD_IDS

    # The datum, written out by hand from the Avro spec (zig-zag varints,
    # union branch index before each optional value, arrays in blocks).
    expected_datum = (
        b"\x1as3://b/m.avro"  # manifest_path: length 13 -> 26
        + b"\xc8\x01"  # manifest_length 100 -> 200
        + b"\x02"  # partition_spec_id 1
        + b"\x02\x02"  # content: branch 1, value 1
        + b"\x02\x06"  # sequence_number: branch 1, value 3
        + b"\x00"  # min_sequence_number: null
        + b"\x01"  # added_snapshot_id -1
        + b"\x02\x04"  # added_files_count: 2
        + b"\x00" * 5  # existing/deleted files, added/existing/deleted rows: null
        + b"\x02\x02"  # partitions: branch 1, block of one item
        + b"\x01\x00\x02\x02\x01\x00"  # contains_null, nan null, lower b"\x01", upper null
        + b"\x00"  # end of array
        + b"\x00"  # key_metadata: null
        + b"\x02\x80\x01"  # first_row_id: branch 1, 64 -> 128
    )
    assert data[4 + length :] == expected_datum

    datum = fastavro.schemaless_reader(
        io.BytesIO(data[4 + length :]), fastavro.parse_schema(schema), None
    )
    assert isinstance(datum, dict)
    assert datum["manifest_path"] == "s3://b/m.avro"
    assert datum["added_snapshot_id"] == -1
    assert datum["partitions"] == [
        {"contains_null": True, "contains_nan": None, "lower_bound": b"\x01", "upper_bound": None}
    ]
    assert datum["first_row_id"] == 64


# ---------------------------------------------------------------------------
# Modified UTF-8
# ---------------------------------------------------------------------------


def test_modified_utf8_of_non_ascii_path() -> None:
    path = "s3://b/ünï/€/🧊.avro"
    encoded = encode_modified_utf8(path)
    assert encoded == (
        b"s3://b/\xc3\xbcn\xc3\xaf/\xe2\x82\xac/"
        + b"\xed\xa0\xbe\xed\xb7\x8a"  # U+1F9CA as surrogates D83E DDCA, 3 bytes each
        + b".avro"
    )
    assert decode_modified_utf8(encoded) == path


def test_modified_utf8_of_nul_containing_path() -> None:
    path = "s3://b/a\x00b.avro"
    encoded = encode_modified_utf8(path)
    assert encoded == b"s3://b/a\xc0\x80b.avro"
    assert b"\x00" not in encoded
    assert decode_modified_utf8(encoded) == path
    assert java_write_utf(path) == struct.pack(">H", len(encoded)) + encoded


def test_java_write_utf_limits_length_in_encoded_bytes() -> None:
    assert len(java_write_utf("é" * 32_767)) == 2 + 65_534
    assert java_write_utf("a" * 65_535)[:2] == b"\xff\xff"
    with pytest.raises(PayloadError) as exc:
        java_write_utf("é" * 32_768)  # 65,536 bytes once encoded
    assert "65536 bytes" in reason(exc)


def test_manifest_paths_with_non_ascii_and_nul_round_trip() -> None:
    for path in ("s3://b/ünï/🧊.avro", "s3://b/a\x00b.avro"):
        ref = ManifestFileRef(**{**MINIMAL_REF.__dict__, "manifest_path": path})
        assert decode_manifest_file(encode_manifest_file(ref)).manifest_path == path


def test_decoder_reads_schema_as_modified_utf8() -> None:
    # Java's Schema.toString writes non-ASCII docs raw; plain UTF-8 would reject the surrogates.
    schema = {
        "type": "record",
        "name": "GenericManifestFile",
        "namespace": "org.apache.iceberg",
        "doc": "naïve 🧊",
        "fields": [
            {"name": "manifest_path", "type": "string", "field-id": 500},
            {"name": "manifest_length", "type": "long", "field-id": 501},
            {"name": "partition_spec_id", "type": "int", "field-id": 502},
            {"name": "added_snapshot_id", "type": "long", "field-id": 503},
        ],
    }
    text = json.dumps(schema, ensure_ascii=False)
    datum = avro_datum(
        schema,
        {
            "manifest_path": "p",
            "manifest_length": 1,
            "partition_spec_id": 0,
            "added_snapshot_id": 5,
        },
    )
    data = assemble(text, datum)
    with pytest.raises(UnicodeDecodeError):
        data[4 : 4 + struct.unpack(">H", data[2:4])[0]].decode("utf-8")
    ref = decode_manifest_file(data)
    assert (ref.manifest_path, ref.added_snapshot_id, ref.content) == ("p", 5, 0)


# ---------------------------------------------------------------------------
# Older writers
# ---------------------------------------------------------------------------


def older_schema(*, field_ids: bool = True) -> dict[str, Any]:
    """A manifest_file schema as an older Java writer produced it.

    No first_row_id, key_metadata or contains_nan; Java's names for 504-506;
    the namespace split from the name, as Avro's Java Schema.toString does.
    """

    def fld(name: str, avro_type: Any, fid: int, optional: bool = False) -> dict[str, Any]:
        f: dict[str, Any] = {"name": name, "type": ["null", avro_type] if optional else avro_type}
        if optional:
            f["default"] = None
        if field_ids:
            f["field-id"] = fid
        return f

    summary = {
        "type": "record",
        "name": "GenericPartitionFieldSummary",
        "fields": [
            fld("contains_null", "boolean", 509),
            fld("lower_bound", "bytes", 510, True),
            fld("upper_bound", "bytes", 511, True),
        ],
    }
    return {
        "type": "record",
        "name": "GenericManifestFile",
        "namespace": "org.apache.iceberg",
        "fields": [
            fld("manifest_path", "string", 500),
            fld("manifest_length", "long", 501),
            fld("partition_spec_id", "int", 502),
            fld("content", "int", 517, True),
            fld("sequence_number", "long", 515, True),
            fld("min_sequence_number", "long", 516, True),
            fld("added_snapshot_id", "long", 503),
            fld("added_data_files_count", "int", 504, True),
            fld("existing_data_files_count", "int", 505, True),
            fld("deleted_data_files_count", "int", 506, True),
            fld("added_rows_count", "long", 512, True),
            fld("existing_rows_count", "long", 513, True),
            fld("deleted_rows_count", "long", 514, True),
            {
                **fld("partitions", {"type": "array", "items": summary}, 507, True),
                "element-id": 508,
            },
        ],
    }


OLDER_RECORD = {
    "manifest_path": "s3://b/wh/ns/t/metadata/old-m1.avro",
    "manifest_length": 555,
    "partition_spec_id": 0,
    "content": 1,
    "sequence_number": 4,
    "min_sequence_number": 2,
    "added_snapshot_id": 42,
    "added_data_files_count": 7,
    "existing_data_files_count": 8,
    "deleted_data_files_count": 9,
    "added_rows_count": 70,
    "existing_rows_count": 80,
    "deleted_rows_count": 90,
    "partitions": [{"contains_null": True, "lower_bound": b"lo", "upper_bound": b"hi"}],
}


@pytest.mark.parametrize("field_ids", [True, False], ids=["field-ids", "names-only"])
def test_decode_bytes_from_older_schema(field_ids: bool) -> None:
    schema = older_schema(field_ids=field_ids)
    ref = decode_manifest_file(assemble(schema, avro_datum(schema, OLDER_RECORD)))
    assert ref == ManifestFileRef(
        manifest_path="s3://b/wh/ns/t/metadata/old-m1.avro",
        manifest_length=555,
        partition_spec_id=0,
        content=1,
        sequence_number=4,
        min_sequence_number=2,
        added_snapshot_id=42,
        added_files_count=7,
        existing_files_count=8,
        deleted_files_count=9,
        added_rows_count=70,
        existing_rows_count=80,
        deleted_rows_count=90,
        partitions=(PartitionFieldSummary(True, None, b"lo", b"hi"),),
        key_metadata=None,
        first_row_id=None,
    )


def test_decode_v1_schema_defaults_content_to_data() -> None:
    schema = older_schema()
    schema["fields"] = [f for f in schema["fields"] if f["field-id"] not in (517, 515, 516)]
    record = {k: v for k, v in OLDER_RECORD.items() if k not in ("content", "sequence_number")}
    ref = decode_manifest_file(assemble(schema, avro_datum(schema, record)))
    assert ref.content == 0
    assert ref.sequence_number is None and ref.min_sequence_number is None
    assert ref.added_files_count == 7


# ---------------------------------------------------------------------------
# pyiceberg
# ---------------------------------------------------------------------------


def test_manifest_ref_from_pyiceberg(tmp_path: Path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = SqlCatalog(
        "codecs",
        uri=f"sqlite:///{tmp_path / 'catalog.db'}",
        warehouse=(tmp_path / "warehouse").as_uri(),
    )
    catalog.create_namespace("ns")
    table = catalog.create_table(
        "ns.t",
        schema=Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "kind", StringType(), required=False),
        ),
        partition_spec=PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="kind")
        ),
    )
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "kind": pa.array(["a", "b", None], pa.string()),
        }
    )
    table.append(rows)
    table.append(rows)
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = snapshot.manifests(table.io)
    assert len(manifests) == 2

    snapshot_ids = {s.snapshot_id for s in table.snapshots()}
    for mf in manifests:
        ref = manifest_ref_from_pyiceberg(mf)
        assert ref.manifest_path == mf.manifest_path
        assert ref.manifest_path.startswith((tmp_path / "warehouse").as_uri())
        assert type(ref.content) is int and ref.content == 0
        assert ref.added_snapshot_id in snapshot_ids
        assert ref.added_files_count == 3  # one data file per partition value
        assert ref.added_rows_count == 3
        assert ref.partitions == (PartitionFieldSummary(True, False, b"a", b"b"),)
        assert decode_manifest_file(encode_manifest_file(ref)) == ref
    assert {manifest_ref_from_pyiceberg(mf).sequence_number for mf in manifests} == {1, 2}


# ---------------------------------------------------------------------------
# Manifest codec: malformed input
# ---------------------------------------------------------------------------


def _older_bytes_with(*, field_type: dict[str, str], record: dict[str, Any]) -> bytes:
    """An older writer's bytes whose schema gives fields other types (by name)."""
    schema = older_schema()
    for field in schema["fields"]:
        field["type"] = field_type.get(field["name"], field["type"])
    return assemble(schema, avro_datum(schema, record))


def _older_bytes_without(field_id: int) -> bytes:
    """An older writer's bytes whose schema and record lack the field ``field_id``."""
    schema = older_schema()
    [name] = [f["name"] for f in schema["fields"] if f["field-id"] == field_id]
    schema["fields"] = [f for f in schema["fields"] if f["field-id"] != field_id]
    record = {k: v for k, v in OLDER_RECORD.items() if k != name}
    return assemble(schema, avro_datum(schema, record))


# Each case: the bytes, and the part of the reason that says what is wrong with them.
MALFORMED_MANIFESTS: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "too short: 0 bytes"),
    "wrong-magic-shows-hex": (
        b"\x4f\x62" + encode_manifest_file(MINIMAL_REF)[2:],
        "wrong magic bytes 0x4F 0x62",
    ),
    "schema-length-past-end": (MAGIC + b"\x01\x00" + b"{}", "schema length 256 runs past the end"),
    "schema-not-modified-utf8": (MAGIC + b"\x00\x02\xe2\x82" + b"\x00", "not modified UTF-8"),
    "schema-not-json": (assemble("{not json", b""), "schema is not JSON"),
    "schema-not-a-record": (assemble('["null","string"]', b""), "not an Avro record"),
    "schema-without-manifest-path": (
        assemble(
            {"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]}, b"\x02"
        ),
        "no manifest_path",
    ),
    "schema-not-valid-avro": (
        assemble(
            {"type": "record", "name": "X", "fields": [{"name": "manifest_path", "type": "nope"}]},
            b"\x02a",
        ),
        "not a valid Avro schema",
    ),
    # manifest_path of 2 bytes that are not UTF-8, then nonsense
    "garbage-datum": (
        assemble(split(encode_manifest_file(MINIMAL_REF))[0], b"\x04\xff\xfe" + b"\x13" * 40),
        "datum is not valid Avro",
    ),
    "truncated-datum": (encode_manifest_file(FULL_REF)[:-3], "datum is truncated"),
    "trailing-bytes": (
        encode_manifest_file(MINIMAL_REF) + b"\x00\x00",
        "followed by 2 unexpected bytes",
    ),
    "field-of-wrong-type": (
        _older_bytes_with(
            field_type={"manifest_length": "string"},
            record={**OLDER_RECORD, "manifest_length": "big"},
        ),
        "manifest_length is not an integer",
    ),
    "unknown-content": (
        encode_manifest_file(ManifestFileRef(**{**MINIMAL_REF.__dict__, "content": 7})),
        "content 7 is unknown",
    ),
    "missing-required-field": (_older_bytes_without(503), "no added_snapshot_id"),
}


@pytest.mark.parametrize(
    ("data", "fragment"), MALFORMED_MANIFESTS.values(), ids=MALFORMED_MANIFESTS.keys()
)
def test_malformed_manifest_bytes_are_refused_saying_why(data: bytes, fragment: str) -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(data)
    assert fragment in reason(exc)


def test_encode_rejects_out_of_range_values() -> None:
    ref = ManifestFileRef(**{**MINIMAL_REF.__dict__, "partition_spec_id": 2**31})
    with pytest.raises(PayloadError) as exc:
        encode_manifest_file(ref)
    assert "partition_spec_id=2147483648 is out of range" in reason(exc)


# ---------------------------------------------------------------------------
# TableIdentifier
# ---------------------------------------------------------------------------


def test_table_identifier_json_shape() -> None:
    ident = TableIdentifier(("a", "b"), "t")
    assert ident.to_json_obj() == {"namespace": ["a", "b"], "name": "t"}
    assert TableIdentifier.from_json_obj(ident.to_json_obj()) == ident
    assert TableIdentifier.from_json_obj({"namespace": [], "name": "t"}).namespace == ()
    assert str(ident) == "a.b.t"


# ---------------------------------------------------------------------------
# ENTITY_CLEANUP_SCHEDULER
# ---------------------------------------------------------------------------

POLARIS_ENTITY_DATA = json.dumps(
    {
        "catalogId": 11,
        "id": 123456789012345,
        "parentId": 22,
        "typeCode": 7,
        "name": "orders",
        "entityVersion": 3,
        "subTypeCode": 2,
        "createTimestamp": 1_700_000_000_000,
        "dropTimestamp": 1_700_000_100_000,
        "purgeTimestamp": 0,
        "toPurgeTimestamp": 0,
        "lastUpdateTimestamp": 1_700_000_050_000,
        "properties": json.dumps({"write.format.default": "parquet"}),
        "internalProperties": json.dumps(
            {"metadata-location": "s3://b/wh/ns/orders/metadata/00003-x.metadata.json"}
        ),
        "grantRecordsVersion": 1,
    }
)


def test_decode_polaris_dropped_entity() -> None:
    e = decode_dropped_entity(POLARIS_ENTITY_DATA)
    assert (e.id, e.name, e.catalog_id, e.parent_id) == (123456789012345, "orders", 11, 22)
    assert (e.entity_version, e.grant_records_version) == (3, 1)
    assert e.drop_timestamp == 1_700_000_100_000
    assert e.metadata_location == "s3://b/wh/ns/orders/metadata/00003-x.metadata.json"
    assert require_metadata_location(e) == e.metadata_location
    assert e.properties == {"write.format.default": "parquet"}
    assert not e.is_view


def test_dropped_entity_round_trip_uses_jackson_names_and_string_maps() -> None:
    e = decode_dropped_entity(POLARIS_ENTITY_DATA)
    encoded = encode_dropped_entity(e)
    assert decode_dropped_entity(encoded) == e
    obj = json.loads(encoded)
    assert list(obj) == list(json.loads(POLARIS_ENTITY_DATA))
    assert isinstance(obj["properties"], str) and isinstance(obj["internalProperties"], str)
    assert json.loads(obj["internalProperties"]) == e.internal_properties
    assert " " not in encoded.replace("orders", "")  # compact separators


def test_dropped_entity_built_in_code_round_trips() -> None:
    view = DroppedEntity(
        id=9,
        name="v",
        sub_type_code=3,
        internal_properties={"metadata-location": "s3://b/v/metadata/1.metadata.json"},
    )
    decoded = decode_dropped_entity(encode_dropped_entity(view))
    assert decoded == view
    assert decoded.is_view and decoded.type_code == 7
    assert require_metadata_location(decoded) == "s3://b/v/metadata/1.metadata.json"


def test_dropped_view_and_maps_given_as_objects_or_empty() -> None:
    obj = json.loads(POLARIS_ENTITY_DATA)
    obj.update(subTypeCode=3, properties={"a": "1"}, internalProperties="")
    e = decode_dropped_entity(json.dumps(obj))
    assert e.is_view
    assert e.properties == {"a": "1"}
    assert e.internal_properties == {} and e.metadata_location is None
    obj.update(properties=None, internalProperties="null")
    e = decode_dropped_entity(json.dumps(obj))
    assert e.properties == {} and e.internal_properties == {}


def test_dropped_entity_lenient_on_fields_not_needed() -> None:
    obj = {"id": 5, "typeCode": 7, "subTypeCode": 2, "name": "t"}
    e = decode_dropped_entity(json.dumps(obj))
    assert (e.catalog_id, e.create_timestamp, e.grant_records_version) == (0, 0, 0)
    assert e.properties == {}


def _entity_with(**fields: Any) -> str:
    """POLARIS_ENTITY_DATA with ``fields`` replaced (or, given as None, removed)."""
    obj = {**json.loads(POLARIS_ENTITY_DATA), **fields}
    return json.dumps({k: v for k, v in obj.items() if v is not None})


# Each case: the ``data`` property, and the part of the reason that says what is wrong.
MALFORMED_ENTITIES: dict[str, tuple[str, str]] = {
    "not-json": ("{oops", "entity cleanup data is not JSON"),
    "array": ("[1, 2]", "not a JSON object (found array)"),
    "type-code-6": (_entity_with(typeCode=6), "typeCode is 6, not 7"),
    "missing-id": (_entity_with(id=None), "has no id"),
    "non-integer-id": (_entity_with(id="12"), "id is not an integer (found string)"),
    "empty-name": (_entity_with(name=""), "name is missing"),
    "internal-properties-not-json": (
        _entity_with(internalProperties="{metadata-location"),
        "internalProperties is not JSON",
    ),
}


@pytest.mark.parametrize(
    ("data", "fragment"), MALFORMED_ENTITIES.values(), ids=MALFORMED_ENTITIES.keys()
)
def test_malformed_dropped_entity_is_refused_saying_why(data: str, fragment: str) -> None:
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity(data)
    assert fragment in reason(exc)


def test_dropped_entity_missing_metadata_location() -> None:
    obj = {**json.loads(POLARIS_ENTITY_DATA), "internalProperties": json.dumps({"x": "y"})}
    e = decode_dropped_entity(json.dumps(obj))
    assert e.metadata_location is None
    with pytest.raises(PayloadError) as exc:
        require_metadata_location(e)
    assert reason(exc).startswith("dropped table has no metadata-location")


# ---------------------------------------------------------------------------
# MANIFEST_FILE_CLEANUP
# ---------------------------------------------------------------------------


def manifest_payload() -> ManifestCleanupPayload:
    return ManifestCleanupPayload(TableIdentifier(("ns", "sub"), "t"), FULL_REF)


def test_manifest_cleanup_round_trip() -> None:
    payload = manifest_payload()
    data = encode_manifest_cleanup(payload)
    obj = json.loads(data)
    assert obj["tableId"] == {"namespace": ["ns", "sub"], "name": "t"}
    assert base64.b64decode(obj["manifestFileData"], validate=True)[:2] == b"\xc2\x01"
    assert ", " not in data and ": " not in data
    assert decode_manifest_cleanup(data) == payload


def _manifest_cleanup_with(**fields: Any) -> str:
    """manifest_payload() encoded, with ``fields`` replaced (or, given as None, removed)."""
    obj = {**json.loads(encode_manifest_cleanup(manifest_payload())), **fields}
    return json.dumps({k: v for k, v in obj.items() if v is not None})


_NUL_PATH_REF = ManifestFileRef(**{**MINIMAL_REF.__dict__, "manifest_path": "s3://b/a\x00b"})

# Each case: the ``data`` property, and the part of the reason that says what is wrong.
MALFORMED_MANIFEST_CLEANUPS: dict[str, tuple[str, str]] = {
    "base64-garbage": (
        _manifest_cleanup_with(manifestFileData="wC*="),
        "manifestFileData is not valid base64",
    ),
    # The reason names the property, then what the manifest codec found.
    "bytes-not-a-manifest": (
        _manifest_cleanup_with(manifestFileData="AAECAwQ="),
        "manifestFileData: manifest data has wrong magic bytes 0x00 0x01",
    ),
    "not-json": ('{"tableId": ', "manifest cleanup data is not JSON"),
    "json-array": ("[]", "not a JSON object (found array)"),
    "missing-table-id": (_manifest_cleanup_with(tableId=None), "has no tableId"),
    "missing-manifest-file-data": (
        _manifest_cleanup_with(manifestFileData=None),
        "has no manifestFileData",
    ),
    "nul-manifest-path": (
        encode_manifest_cleanup(ManifestCleanupPayload(TableIdentifier((), "t"), _NUL_PATH_REF)),
        "manifest_path contains a NUL",
    ),
}


@pytest.mark.parametrize(
    ("data", "fragment"),
    MALFORMED_MANIFEST_CLEANUPS.values(),
    ids=MALFORMED_MANIFEST_CLEANUPS.keys(),
)
def test_malformed_manifest_cleanup_is_refused_saying_why(data: str, fragment: str) -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup(data)
    assert fragment in reason(exc)


# ---------------------------------------------------------------------------
# BATCH_FILE_CLEANUP
# ---------------------------------------------------------------------------

BATCH = BatchCleanupPayload(
    TableIdentifier(("ns",), "t"),
    ("s3://b/wh/ns/t/metadata/00001-a.metadata.json", "s3://b/wh/ns/t/metadata/snap-1.avro"),
)


def test_batch_cleanup_round_trip() -> None:
    data = encode_batch_cleanup(BATCH)
    assert json.loads(data) == {
        "tableId": {"namespace": ["ns"], "name": "t"},
        "batchFiles": list(BATCH.batch_files),
        "type": "TABLE_METADATA",
    }
    assert decode_batch_cleanup(data) == BATCH


def test_batch_cleanup_type_lower_case_or_missing() -> None:
    obj = json.loads(encode_batch_cleanup(BATCH))
    obj["type"] = "table_metadata"
    assert decode_batch_cleanup(json.dumps(obj)).type == "TABLE_METADATA"
    del obj["type"]
    assert decode_batch_cleanup(json.dumps(obj)).type == "TABLE_METADATA"
    obj["type"] = "DATA"
    with pytest.raises(PayloadError) as exc:
        decode_batch_cleanup(json.dumps(obj))
    assert "unknown batch type 'DATA'" in reason(exc)


def _batch_with(**fields: Any) -> str:
    """BATCH encoded, with ``fields`` replaced (or, given as None, removed)."""
    obj = {**json.loads(encode_batch_cleanup(BATCH)), **fields}
    return json.dumps({k: v for k, v in obj.items() if v is not None})


# Each case: the ``data`` property, and the whole reason (it names the bad element).
MALFORMED_BATCHES: dict[str, tuple[str, str]] = {
    "not-a-list": (_batch_with(batchFiles="s3://b/x"), "batchFiles is not a list (found string)"),
    "non-string": (
        _batch_with(batchFiles=["s3://b/x", 7]),
        "batchFiles[1] is not a string (found number)",
    ),
    "nul": (
        _batch_with(batchFiles=["s3://b/x", "s3://b/y", "s3://b/\x00z"]),
        "batchFiles[2] contains a NUL character",
    ),
    "empty": (_batch_with(batchFiles=[""]), "batchFiles[0] is empty"),
    "missing-table-id": (json.dumps({"batchFiles": []}), "batch cleanup data has no tableId"),
}


@pytest.mark.parametrize(
    ("data", "message"), MALFORMED_BATCHES.values(), ids=MALFORMED_BATCHES.keys()
)
def test_malformed_batch_cleanup_is_refused_saying_why(data: str, message: str) -> None:
    with pytest.raises(PayloadError) as exc:
        decode_batch_cleanup(data)
    assert reason(exc) == message


# ---------------------------------------------------------------------------
# Names and properties
# ---------------------------------------------------------------------------


def test_task_names_match_polaris() -> None:
    assert entity_cleanup_task_name(42) == "entityCleanup_42"
    fixed = uuid.UUID("12345678-1234-4234-8234-123456789abc")
    assert (
        manifest_cleanup_task_name("entityCleanup_42", "s3://b/m.avro", suffix=fixed)
        == f"entityCleanup_42_s3://b/m.avro_{fixed}"
    )
    assert (
        batch_cleanup_task_name("entityCleanup_42", ["s3://b/a", "s3://b/b"], suffix=fixed)
        == f"entityCleanup_42_[s3://b/a, s3://b/b]_{fixed}"
    )
    name = manifest_cleanup_task_name("p", "m")
    assert re.fullmatch(rf"p_m_{UUID_RE}", name)
    assert name != manifest_cleanup_task_name("p", "m")
    assert re.fullmatch(rf"p_\[x\]_{UUID_RE}", batch_cleanup_task_name("p", ["x"]))


def test_task_properties_are_read_back_by_the_task_model() -> None:
    data = encode_batch_cleanup(BATCH)
    props = task_properties(TaskType.BATCH_FILE_CLEANUP, data)
    assert props == {"taskType": "3", "data": data}
    row = TaskRow(
        realm_id="r",
        id=1,
        name="n",
        entity_version=1,
        grant_records_version=1,
        create_timestamp=0,
        last_update_timestamp=0,
        properties=props,
    )
    assert row.task_type() is TaskType.BATCH_FILE_CLEANUP
    assert decode_batch_cleanup(row.data()) == BATCH
