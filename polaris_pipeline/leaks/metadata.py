"""A table root's metadata: whether a directory is one, and what its newest metadata says.

A table root's ``metadata/`` holds Iceberg metadata (``*.metadata.json``, ``v<N>``, gzipped)
or a Hadoop ``version-hint.text``; a view's has ``view-uuid`` inside. The newest is the
one the hint names, else the highest version, newer mtime breaking ties. Reading never
raises: an unreadable file is the root's error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from polaris_pipeline.cleanup.gc_policy import GC_ENABLED_KEY
from polaris_pipeline.cleanup.metadata_file import MAX_METADATA_BYTES, gunzipped
from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.listing import ListedObject
from polaris_pipeline.storage.resolve import StorageResolver

METADATA_DIRECTORY = "metadata"
METADATA_SUFFIX = ".metadata.json"
VERSION_HINT = "version-hint.text"
_VERSION_RE = re.compile(r"^v?(\d+)[-.]")


def is_metadata_file(name: str) -> bool:
    return name.endswith(METADATA_SUFFIX) and len(name) > len(METADATA_SUFFIX)


def holds_table_metadata(files: list[ListedObject]) -> bool:
    """Whether a ``metadata/`` directory's files make its parent a table root."""
    return any(_name(f) == VERSION_HINT or is_metadata_file(_name(f)) for f in files)


def _name(obj: ListedObject) -> str:
    return obj.uri.rsplit("/", 1)[-1]


def _version(name: str) -> int:
    m = _VERSION_RE.match(name)
    return int(m.group(1)) if m else -1


@dataclass(frozen=True)
class RootMetadata:
    """What the newest metadata file of a root says (or why it could not be read)."""

    file: str | None
    kind: str  # "table", "view", "unknown"
    uuid: str | None = None
    last_updated_ms: int | None = None
    gc_enabled: str | None = None
    error: str | None = None


def newest_metadata_file(resolver: StorageResolver, files: list[ListedObject]) -> str | None:
    """The URI of the newest metadata file among a ``metadata/`` directory's files."""
    candidates = [f for f in files if is_metadata_file(_name(f))]
    hint = next((f for f in files if _name(f) == VERSION_HINT), None)
    if hint is not None:
        try:
            version = int(_read(resolver, hint.uri, 64).decode().strip())
        except (StorageError, ValueError):  # UnicodeDecodeError is a ValueError
            version = None
        candidates = [f for f in candidates if _version(_name(f)) == version] or candidates
    if not candidates:
        return None
    newest = max(candidates, key=lambda f: (_version(_name(f)), f.mtime_ms or 0, _name(f)))
    return newest.uri


def _read(resolver: StorageResolver, uri: str, limit: int) -> bytes:
    fs, path = resolver.filesystem(uri)
    try:
        with fs.open(path, "rb") as f:
            data: bytes = f.read(limit + 1)
    except Exception as e:
        raise StorageError(f"cannot read {resolver.redact(uri)}: {resolver.describe(e)}") from None
    if len(data) > limit:
        raise StorageError(f"{resolver.redact(uri)} is larger than {limit} bytes")
    return data


def read_root_metadata(resolver: StorageResolver, files: list[ListedObject]) -> RootMetadata:
    """The newest metadata of a root whose ``metadata/`` holds ``files``."""
    uri = newest_metadata_file(resolver, files)
    if uri is None:
        return RootMetadata(None, "unknown", error="only a version-hint.text, no metadata file")
    try:
        doc = json.loads(gunzipped(_read(resolver, uri, MAX_METADATA_BYTES), uri))
    except StorageError as e:
        return RootMetadata(uri, "unknown", error=f"unreadable: {e}")
    except (OSError, EOFError, ValueError, RecursionError) as e:
        return RootMetadata(uri, "unknown", error=f"malformed: {type(e).__name__}: {e}"[:300])
    if not isinstance(doc, dict):
        return RootMetadata(uri, "unknown", error=f"malformed: a JSON {type(doc).__name__}")
    return _described(uri, doc)


def _described(uri: str, doc: dict[str, object]) -> RootMetadata:
    properties = doc.get("properties")
    props = properties if isinstance(properties, dict) else {}
    gc = props.get(GC_ENABLED_KEY)
    gc_value = None if gc is None else str(gc)
    if isinstance(doc.get("table-uuid"), str):
        updated = doc.get("last-updated-ms")
        return RootMetadata(
            uri,
            "table",
            uuid=str(doc["table-uuid"]),
            last_updated_ms=updated if isinstance(updated, int) else None,
            gc_enabled=gc_value,
        )
    if isinstance(doc.get("view-uuid"), str):
        return RootMetadata(
            uri,
            "view",
            uuid=str(doc["view-uuid"]),
            last_updated_ms=_view_updated_ms(doc),
            gc_enabled=gc_value,
        )
    return RootMetadata(uri, "unknown", error="malformed: no table-uuid or view-uuid")


def _view_updated_ms(doc: dict[str, object]) -> int | None:
    # A view has no last-updated-ms: its current version's timestamp is when it last changed.
    versions = doc.get("versions")
    current = doc.get("current-version-id")
    if not isinstance(versions, list):
        return None
    for version in versions:
        if isinstance(version, dict) and version.get("version-id") == current:
            stamp = version.get("timestamp-ms")
            return stamp if isinstance(stamp, int) else None
    return None
