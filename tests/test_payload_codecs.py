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


def test_malformed_modified_utf8_schema() -> None:
    data = MAGIC + b"\x00\x02\xe2\x82" + b"\x00"
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(data)
    assert "not modified UTF-8" in reason(exc)


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


def test_decode_empty_bytes() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(b"")
    assert "too short: 0 bytes" in reason(exc)


def test_decode_wrong_magic_shows_hex() -> None:
    data = b"\x4f\x62" + encode_manifest_file(MINIMAL_REF)[2:]
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(data)
    assert "wrong magic bytes 0x4F 0x62" in reason(exc)


def test_decode_schema_length_past_end() -> None:
    data = MAGIC + b"\x01\x00" + b"{}"
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(data)
    assert "schema length 256 runs past the end" in reason(exc)


def test_decode_schema_not_json() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble("{not json", b""))
    assert "schema is not JSON" in reason(exc)


def test_decode_schema_not_a_record() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble('["null","string"]', b""))
    assert "not an Avro record" in reason(exc)


def test_decode_schema_without_manifest_path() -> None:
    schema = {"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]}
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble(schema, b"\x02"))
    assert "no manifest_path" in reason(exc)


def test_decode_schema_not_valid_avro() -> None:
    schema = {"type": "record", "name": "X", "fields": [{"name": "manifest_path", "type": "nope"}]}
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble(schema, b"\x02a"))
    assert "not a valid Avro schema" in reason(exc)


def test_decode_garbage_datum() -> None:
    schema, _ = split(encode_manifest_file(MINIMAL_REF))
    # manifest_path of 2 bytes that are not UTF-8, then nonsense
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble(schema, b"\x04\xff\xfe" + b"\x13" * 40))
    assert "datum is not valid Avro" in reason(exc)


def test_decode_truncated_datum() -> None:
    data = encode_manifest_file(FULL_REF)
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(data[:-3])
    assert "datum is truncated" in reason(exc)


def test_decode_datum_with_trailing_bytes() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(encode_manifest_file(MINIMAL_REF) + b"\x00\x00")
    assert "followed by 2 unexpected bytes" in reason(exc)


def test_decode_datum_of_wrong_field_type() -> None:
    schema = older_schema()
    schema["fields"][1]["type"] = "string"  # manifest_length as a string
    record = {**OLDER_RECORD, "manifest_length": "big"}
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble(schema, avro_datum(schema, record)))
    assert "manifest_length is not an integer" in reason(exc)


def test_decode_unknown_content() -> None:
    ref = ManifestFileRef(**{**MINIMAL_REF.__dict__, "content": 7})
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(encode_manifest_file(ref))
    assert "content 7 is unknown" in reason(exc)


def test_decode_missing_required_field() -> None:
    schema = older_schema()
    schema["fields"] = [f for f in schema["fields"] if f["field-id"] != 503]
    record = {k: v for k, v in OLDER_RECORD.items() if k != "added_snapshot_id"}
    with pytest.raises(PayloadError) as exc:
        decode_manifest_file(assemble(schema, avro_datum(schema, record)))
    assert "no added_snapshot_id" in reason(exc)


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
    assert e.table_properties == {"write.format.default": "parquet"}
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
    assert e.table_properties == {"a": "1"}
    assert e.internal_properties == {} and e.metadata_location is None
    obj.update(properties=None, internalProperties="null")
    e = decode_dropped_entity(json.dumps(obj))
    assert e.properties == {} and e.internal_properties == {}


def test_dropped_entity_lenient_on_fields_not_needed() -> None:
    obj = {"id": 5, "typeCode": 7, "subTypeCode": 2, "name": "t"}
    e = decode_dropped_entity(json.dumps(obj))
    assert (e.catalog_id, e.create_timestamp, e.grant_records_version) == (0, 0, 0)
    assert e.properties == {}


def test_dropped_entity_not_json() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity("{oops")
    assert "entity cleanup data is not JSON" in reason(exc)


def test_dropped_entity_array() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity("[1, 2]")
    assert "not a JSON object (found array)" in reason(exc)


def test_dropped_entity_type_code_6() -> None:
    obj = {**json.loads(POLARIS_ENTITY_DATA), "typeCode": 6}
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity(json.dumps(obj))
    assert "typeCode is 6, not 7" in reason(exc)


def test_dropped_entity_missing_or_non_integer_id() -> None:
    obj = json.loads(POLARIS_ENTITY_DATA)
    del obj["id"]
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity(json.dumps(obj))
    assert "has no id" in reason(exc)
    obj["id"] = "12"
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity(json.dumps(obj))
    assert "id is not an integer (found string)" in reason(exc)


def test_dropped_entity_missing_name() -> None:
    obj = json.loads(POLARIS_ENTITY_DATA)
    obj["name"] = ""
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity(json.dumps(obj))
    assert "name is missing" in reason(exc)


def test_dropped_entity_missing_metadata_location() -> None:
    obj = {**json.loads(POLARIS_ENTITY_DATA), "internalProperties": json.dumps({"x": "y"})}
    e = decode_dropped_entity(json.dumps(obj))
    assert e.metadata_location is None
    with pytest.raises(PayloadError) as exc:
        require_metadata_location(e)
    assert reason(exc).startswith("dropped table has no metadata-location")


def test_dropped_entity_internal_properties_not_json() -> None:
    obj = {**json.loads(POLARIS_ENTITY_DATA), "internalProperties": "{metadata-location"}
    with pytest.raises(PayloadError) as exc:
        decode_dropped_entity(json.dumps(obj))
    assert "internalProperties is not JSON" in reason(exc)


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


def test_manifest_cleanup_base64_garbage() -> None:
    data = json.dumps({"tableId": {"namespace": [], "name": "t"}, "manifestFileData": "wC*="})
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup(data)
    assert "manifestFileData is not valid base64" in reason(exc)


def test_manifest_cleanup_bytes_not_a_manifest() -> None:
    data = json.dumps({"tableId": {"namespace": [], "name": "t"}, "manifestFileData": "AAECAwQ="})
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup(data)
    assert reason(exc).startswith("manifestFileData: manifest data has wrong magic bytes 0x00 0x01")


def test_manifest_cleanup_not_json() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup('{"tableId": ')
    assert "manifest cleanup data is not JSON" in reason(exc)


def test_manifest_cleanup_json_array() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup("[]")
    assert "not a JSON object (found array)" in reason(exc)


def test_manifest_cleanup_missing_table_id() -> None:
    obj = json.loads(encode_manifest_cleanup(manifest_payload()))
    del obj["tableId"]
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup(json.dumps(obj))
    assert "has no tableId" in reason(exc)


def test_manifest_cleanup_missing_manifest_file_data() -> None:
    obj = json.loads(encode_manifest_cleanup(manifest_payload()))
    del obj["manifestFileData"]
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup(json.dumps(obj))
    assert "has no manifestFileData" in reason(exc)


def test_manifest_cleanup_rejects_nul_manifest_path() -> None:
    ref = ManifestFileRef(**{**MINIMAL_REF.__dict__, "manifest_path": "s3://b/a\x00b"})
    data = encode_manifest_cleanup(ManifestCleanupPayload(TableIdentifier((), "t"), ref))
    with pytest.raises(PayloadError) as exc:
        decode_manifest_cleanup(data)
    assert "manifest_path contains a NUL" in reason(exc)


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


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ("s3://b/x", "batchFiles is not a list (found string)"),
        (["s3://b/x", 7], "batchFiles[1] is not a string (found number)"),
        (["s3://b/x", "s3://b/y", "s3://b/\x00z"], "batchFiles[2] contains a NUL character"),
        ([""], "batchFiles[0] is empty"),
    ],
    ids=["not-a-list", "non-string", "nul", "empty"],
)
def test_batch_cleanup_bad_files(files: Any, message: str) -> None:
    obj = {**json.loads(encode_batch_cleanup(BATCH)), "batchFiles": files}
    with pytest.raises(PayloadError) as exc:
        decode_batch_cleanup(json.dumps(obj))
    assert reason(exc) == message


def test_batch_cleanup_missing_table_id() -> None:
    with pytest.raises(PayloadError) as exc:
        decode_batch_cleanup(json.dumps({"batchFiles": []}))
    assert "has no tableId" in reason(exc)


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
