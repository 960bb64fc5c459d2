"""The JSON ``data`` payloads of Polaris's three task types, and task naming.

Shapes follow Polaris's Jackson serialization (see
``/work/shared/polaris-task-model.md`` section 4). Decoders raise
``PayloadError`` with one line saying what is wrong; encoders write compact
JSON that Polaris's own parser reads back.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.settings.bounds import JAVA_LONG_MAX
from polaris_pipeline.tasks.manifest_codec import (
    ManifestFileRef,
    decode_manifest_file,
    encode_manifest_file,
)
from polaris_pipeline.tasks.model import (
    ICEBERG_TABLE_SUB_TYPE,
    ICEBERG_VIEW_SUB_TYPE,
    NAMESPACE_LEVEL_SEPARATOR,
    TABLE_LIKE_TYPE_CODE,
    Prop,
    TaskType,
    parse_properties,
)

BATCH_TYPE_TABLE_METADATA = "TABLE_METADATA"
BATCH_TYPES = frozenset({BATCH_TYPE_TABLE_METADATA})
METADATA_LOCATION_KEY = "metadata-location"
PARENT_NAMESPACE_KEY = "parent-namespace"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _load_object(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, str):
        raise PayloadError(f"{what} data is not a string (found {type(data).__name__})")
    try:
        value = json.loads(data)
    except json.JSONDecodeError as exc:
        raise PayloadError(f"{what} data is not JSON ({exc.msg} at char {exc.pos})") from None
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"{what} data is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise PayloadError(f"{what} data is not a JSON object (found {_json_kind(value)})")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "object" if isinstance(value, dict) else type(value).__name__


def _require(obj: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in obj or obj[key] is None:
        raise PayloadError(f"{what} has no {key}")
    return obj[key]


def _check_path(value: Any, label: str) -> str:
    """A path to delete: a non-empty string without NUL."""
    if not isinstance(value, str):
        raise PayloadError(f"{label} is not a string (found {_json_kind(value)})")
    if not value:
        raise PayloadError(f"{label} is empty")
    if "\x00" in value:
        raise PayloadError(f"{label} contains a NUL character")
    return value


# ----------------------------------------------------------------------- TableIdentifier


@dataclass(frozen=True)
class TableIdentifier:
    """Iceberg's table identifier as Polaris serializes it."""

    namespace: tuple[str, ...]
    name: str

    def to_json_obj(self) -> dict[str, Any]:
        return {"namespace": list(self.namespace), "name": self.name}

    @classmethod
    def from_json_obj(cls, value: Any, *, what: str = "tableId") -> TableIdentifier:
        if not isinstance(value, dict):
            raise PayloadError(f"{what} is not a JSON object (found {_json_kind(value)})")
        namespace = value.get("namespace")
        if namespace is None:
            namespace = []  # the empty namespace
        if not isinstance(namespace, list):
            raise PayloadError(f"{what}.namespace is not a list (found {_json_kind(namespace)})")
        for index, level in enumerate(namespace):
            if not isinstance(level, str):
                raise PayloadError(f"{what}.namespace[{index}] is not a string")
        name = value.get("name")
        if not isinstance(name, str) or not name:
            raise PayloadError(f"{what}.name is missing or not a non-empty string")
        return cls(tuple(namespace), name)

    def __str__(self) -> str:
        return ".".join((*self.namespace, self.name))


# ----------------------------------- ENTITY_CLEANUP_SCHEDULER: the dropped table or view

# Jackson bean names, in the order Polaris writes them, and DroppedEntity's fields.
_ENTITY_FIELDS = {
    "catalogId": "catalog_id",
    "id": "id",
    "parentId": "parent_id",
    "typeCode": "type_code",
    "name": "name",
    "entityVersion": "entity_version",
    "subTypeCode": "sub_type_code",
    "createTimestamp": "create_timestamp",
    "dropTimestamp": "drop_timestamp",
    "purgeTimestamp": "purge_timestamp",
    "toPurgeTimestamp": "to_purge_timestamp",
    "lastUpdateTimestamp": "last_update_timestamp",
    "properties": "properties",
    "internalProperties": "internal_properties",
    "grantRecordsVersion": "grant_records_version",
}
# Needed to run the cleanup (naming, type checks): must be present.
_ENTITY_REQUIRED_INTS = ("id", "typeCode", "subTypeCode")
# Only carried along: a missing or null value reads as 0.
_ENTITY_OPTIONAL_INTS = tuple(
    key
    for key in _ENTITY_FIELDS
    if key not in (*_ENTITY_REQUIRED_INTS, "name", "properties", "internalProperties")
)


@dataclass(frozen=True)
class DroppedEntity:
    """The TABLE_LIKE entity an ENTITY_CLEANUP_SCHEDULER task cleans up."""

    id: int
    name: str
    type_code: int = TABLE_LIKE_TYPE_CODE
    sub_type_code: int = ICEBERG_TABLE_SUB_TYPE
    catalog_id: int = 0
    parent_id: int = 0
    entity_version: int = 0
    create_timestamp: int = 0
    drop_timestamp: int = 0
    purge_timestamp: int = 0
    to_purge_timestamp: int = 0
    last_update_timestamp: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    internal_properties: dict[str, str] = field(default_factory=dict)
    grant_records_version: int = 0

    @property
    def metadata_location(self) -> str | None:
        return self.internal_properties.get(METADATA_LOCATION_KEY) or None

    @property
    def is_view(self) -> bool:
        return self.sub_type_code == ICEBERG_VIEW_SUB_TYPE


def _entity_int(obj: Mapping[str, Any], key: str, *, required: bool) -> int:
    value = obj.get(key)
    if value is None:
        if required:
            raise PayloadError(f"dropped entity has no {key}")
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"dropped entity {key} is not an integer (found {_json_kind(value)})")
    if not -JAVA_LONG_MAX - 1 <= value <= JAVA_LONG_MAX:
        raise PayloadError(f"dropped entity {key} is out of range for a long")
    return value


def _entity_map(obj: Mapping[str, Any], key: str) -> dict[str, str]:
    raw = obj.get(key)
    # Polaris stores these maps as JSON text; an empty or null text is an empty map.
    if raw is None or (isinstance(raw, str) and raw.strip() in ("", "null")):
        return {}
    try:
        return parse_properties(raw, column=f"dropped entity {key}")
    except RecursionError:
        raise PayloadError(f"dropped entity {key} is not JSON (nested too deeply)") from None


def decode_dropped_entity(data: str) -> DroppedEntity:
    """Decode an ENTITY_CLEANUP_SCHEDULER ``data`` payload."""
    obj = _load_object(data, "entity cleanup")
    type_code = _entity_int(obj, "typeCode", required=True)
    if type_code != TABLE_LIKE_TYPE_CODE:
        raise PayloadError(
            f"dropped entity typeCode is {type_code}, not {TABLE_LIKE_TYPE_CODE} (TABLE_LIKE)"
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise PayloadError("dropped entity name is missing or not a non-empty string")
    ints = {key: _entity_int(obj, key, required=True) for key in _ENTITY_REQUIRED_INTS}
    ints |= {key: _entity_int(obj, key, required=False) for key in _ENTITY_OPTIONAL_INTS}
    return DroppedEntity(
        name=name,
        properties=_entity_map(obj, "properties"),
        internal_properties=_entity_map(obj, "internalProperties"),
        **{_ENTITY_FIELDS[key]: value for key, value in ints.items()},
    )


def encode_dropped_entity(e: DroppedEntity) -> str:
    """The payload Polaris writes for a dropped entity (maps as JSON strings)."""
    values = {key: getattr(e, name) for key, name in _ENTITY_FIELDS.items()}
    values["properties"] = _dumps(e.properties)
    values["internalProperties"] = _dumps(e.internal_properties)
    return _dumps(values)


def table_identifier(entity: DroppedEntity) -> TableIdentifier:
    """The dropped table's identifier, as Polaris's ``getTableIdentifier`` builds it.

    ``parent-namespace`` holds the levels joined by ``%1F``, each encoded by Java's
    ``URLEncoder`` (form encoding: a space is ``+``, a plus sign ``%2B``), so each
    level is decoded with form semantics.
    """
    encoded = entity.internal_properties.get(PARENT_NAMESPACE_KEY, "")
    levels = tuple(map(unquote_plus, encoded.split(NAMESPACE_LEVEL_SEPARATOR))) if encoded else ()
    return TableIdentifier(levels, entity.name)


def require_metadata_location(e: DroppedEntity) -> str:
    """The dropped table's current metadata file, or PayloadError."""
    location = e.metadata_location
    if location is None:
        raise PayloadError(
            f"dropped table has no metadata-location in its internalProperties "
            f"(entity {e.id} {e.name!r})"
        )
    return _check_path(location, "metadata-location")


def decode_child_table_id(data: str) -> TableIdentifier:
    """The ``tableId`` of a manifest or batch cleanup's ``data``, whatever the rest holds.

    For the views that name a task's table even when its file list is unreadable.
    """
    return _child_payload(data, "cleanup")[1]


def _child_payload(data: str, what: str) -> tuple[dict[str, Any], TableIdentifier]:
    """A manifest or batch cleanup's ``data`` as an object, and its ``tableId``."""
    obj = _load_object(data, what)
    return obj, TableIdentifier.from_json_obj(_require(obj, "tableId", f"{what} data"))


# ----------------------------------------------------------------- MANIFEST_FILE_CLEANUP


@dataclass(frozen=True)
class ManifestCleanupPayload:
    table_id: TableIdentifier
    manifest: ManifestFileRef


def decode_manifest_cleanup(data: str) -> ManifestCleanupPayload:
    """Decode a MANIFEST_FILE_CLEANUP ``data`` payload."""
    obj, table_id = _child_payload(data, "manifest cleanup")
    encoded = _require(obj, "manifestFileData", "manifest cleanup data")
    if not isinstance(encoded, str):
        raise PayloadError(f"manifestFileData is not a string (found {_json_kind(encoded)})")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PayloadError(f"manifestFileData is not valid base64 ({exc})") from None
    try:
        manifest = decode_manifest_file(raw)
    except PayloadError as exc:
        raise PayloadError(f"manifestFileData: {exc.reason}") from None
    _check_path(manifest.manifest_path, "manifest_path")
    return ManifestCleanupPayload(table_id, manifest)


def encode_manifest_cleanup(p: ManifestCleanupPayload) -> str:
    encoded = base64.b64encode(encode_manifest_file(p.manifest)).decode("ascii")
    return _dumps({"tableId": p.table_id.to_json_obj(), "manifestFileData": encoded})


# -------------------------------------------------------------------- BATCH_FILE_CLEANUP


@dataclass(frozen=True)
class BatchCleanupPayload:
    table_id: TableIdentifier
    batch_files: tuple[str, ...]
    type: str = BATCH_TYPE_TABLE_METADATA


def decode_batch_cleanup(data: str) -> BatchCleanupPayload:
    """Decode a BATCH_FILE_CLEANUP ``data`` payload."""
    obj, table_id = _child_payload(data, "batch cleanup")
    files = _require(obj, "batchFiles", "batch cleanup data")
    if not isinstance(files, list):
        raise PayloadError(f"batchFiles is not a list (found {_json_kind(files)})")
    paths = tuple(_check_path(path, f"batchFiles[{i}]") for i, path in enumerate(files))
    batch_type = obj.get("type")
    if batch_type is None:
        batch_type = BATCH_TYPE_TABLE_METADATA
    if not isinstance(batch_type, str):
        raise PayloadError(f"batch type is not a string (found {_json_kind(batch_type)})")
    normalised = batch_type.upper()  # Jackson writes the enum name; accept lower case too
    if normalised not in BATCH_TYPES:
        raise PayloadError(f"unknown batch type {batch_type[:40]!r}")
    return BatchCleanupPayload(table_id, paths, normalised)


def encode_batch_cleanup(p: BatchCleanupPayload, *, with_type: bool = True) -> str:
    """The BATCH_FILE_CLEANUP ``data``; ``with_type=False`` for Polaris before 1.7."""
    doc: dict[str, Any] = {"tableId": p.table_id.to_json_obj(), "batchFiles": list(p.batch_files)}
    if with_type:
        doc["type"] = p.type
    return _dumps(doc)


# ------------------------------------- Task names and properties, as Polaris builds them


def entity_cleanup_task_name(entity_id: int) -> str:
    return f"entityCleanup_{entity_id}"


def manifest_cleanup_task_name(
    parent_name: str, manifest_path: str, *, suffix: uuid.UUID | None = None
) -> str:
    return f"{parent_name}_{manifest_path}_{suffix or uuid.uuid4()}"


def java_list_string(items: Iterable[str]) -> str:
    """What Java's ``List.toString`` prints: ``[a, b]``."""
    return "[" + ", ".join(items) + "]"


def batch_cleanup_task_name(
    parent_name: str, files: Iterable[str], *, suffix: uuid.UUID | None = None
) -> str:
    return f"{parent_name}_{java_list_string(files)}_{suffix or uuid.uuid4()}"


def task_properties(task_type: TaskType, data: str) -> dict[str, str]:
    """A new task's ``properties``: Polaris keeps every value as a string."""
    return {Prop.TASK_TYPE: task_type.code, Prop.DATA: data}
