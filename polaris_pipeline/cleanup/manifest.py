"""MANIFEST_FILE_CLEANUP: delete every file a manifest names, then the manifest.

Entries are streamed one at a time with pyiceberg's ``AvroFile``: no list of
entries is built, whatever the manifest's format version (1, 2 or 3) or content
(data or deletes). pyiceberg's ``AvroFile`` does read the manifest's bytes in
one go before decoding; manifests are bounded by
``commit.manifest.target-size-bytes`` (8 MB by default).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import InputFile
from pyiceberg.manifest import DEFAULT_READ_VERSION, MANIFEST_ENTRY_SCHEMAS
from pyiceberg.typedef import Record
from pyiceberg.types import StructType

from polaris_pipeline.cleanup.common import (
    Guard,
    delete_chunked,
    existing_with_sizes,
    gc_disabled,
    tally,
)
from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.storage.delete import bulk_delete
from polaris_pipeline.tasks.manifest_codec import ManifestFileRef
from polaris_pipeline.tasks.payloads import decode_manifest_cleanup

# pyiceberg's own read schema for manifest entries (what fetch_manifest_entry
# uses): the resolver matches fields by id, reads v1, v2 and v3 files, and skips
# primitive fields it does not know. Records stay generic (no enum conversion), so
# an unexpected file format or content code cannot stop a cleanup.
_ENTRY_SCHEMA = MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION]


def _position(struct: StructType, field_id: int) -> int:
    for pos, f in enumerate(struct.fields):
        if f.field_id == field_id:
            return pos
    raise LookupError(f"field {field_id} not in the manifest entry schema")


_STATUS_POS = _position(_ENTRY_SCHEMA.as_struct(), 0)
_DATA_FILE_POS = _position(_ENTRY_SCHEMA.as_struct(), 2)
_DATA_FILE_TYPE = _ENTRY_SCHEMA.find_field(2).field_type
assert isinstance(_DATA_FILE_TYPE, StructType)
_CONTENT_POS = _position(_DATA_FILE_TYPE, 134)
_PATH_POS = _position(_DATA_FILE_TYPE, 100)
_SIZE_POS = _position(_DATA_FILE_TYPE, 104)


@dataclass(frozen=True)
class EntryRef:
    """What a cleanup needs of one manifest entry."""

    status: int  # 0 EXISTING, 1 ADDED, 2 DELETED
    content: int  # 0 data, 1 position deletes, 2 equality deletes
    path: str
    size: int


def iter_manifest_entries(input_file: InputFile) -> Iterator[EntryRef]:
    """Every entry of a manifest, all statuses, one at a time."""
    with AvroFile[Record](input_file, _ENTRY_SCHEMA) as reader:
        for record in reader:
            data_file = record[_DATA_FILE_POS]
            content = data_file[_CONTENT_POS]
            yield EntryRef(
                status=int(record[_STATUS_POS]),
                content=0 if content is None else int(content),
                path=str(data_file[_PATH_POS]),
                size=int(data_file[_SIZE_POS]),
            )


def _expected_entries(ref: ManifestFileRef) -> int:
    counts = (ref.added_files_count, ref.existing_files_count, ref.deleted_files_count)
    return sum(c for c in counts if c is not None) if any(c is not None for c in counts) else 0


def sweep_manifest_entries(
    ctx: CleanupContext,
    result: CleanupResult,
    guard: Guard,
    ref: ManifestFileRef,
) -> None:
    """Delete (or, in a dry run, list) every file ``ref`` names, in fenced chunks."""
    total = _expected_entries(ref)
    what = f"files of manifest {ref.manifest_path}"
    chunk_size = max(1, ctx.delete_chunk_size)
    # A file named twice (deletion vectors share a Puffin file) is deleted once
    # per chunk; a repeat in a later chunk is just reported missing. Entry sizes
    # are not used for bytes freed: S3 reports an absent key as deleted, and files
    # shared with an earlier manifest are usually gone already.
    chunk: dict[str, None] = {}
    done = 0
    for entry in iter_manifest_entries(ctx.resolver.input_file(ref.manifest_path)):
        if not guard.admit(entry.path, result):
            continue
        if ctx.dry_run:
            result.would_delete.append(entry.path)
            continue
        chunk.setdefault(entry.path, None)
        if len(chunk) >= chunk_size:
            done = delete_chunked(
                ctx, result, list(chunk), what=what, done_before=done, total=total
            )
            chunk = {}
    if chunk and not ctx.dry_run:
        delete_chunked(ctx, result, list(chunk), what=what, done_before=done, total=total)


def run_manifest_cleanup(ctx: CleanupContext) -> CleanupResult:
    """Delete the files a manifest names, then (if all went well) the manifest."""
    payload = decode_manifest_cleanup(ctx.task.data())
    ref = payload.manifest
    result = CleanupResult()
    props = ctx.task.internal_properties
    guard = Guard.build(ctx, props)
    if not guard.admit(ref.manifest_path, result):
        result.notes.append("manifest path refused by the guard: nothing read or deleted")
        return result

    present = existing_with_sizes(ctx, result, [ref.manifest_path])
    if result.failed:
        return result
    if ref.manifest_path not in present:
        result.notes.append("manifest already gone: nothing to do")
        return result

    if gc_disabled(props):
        result.notes.append("gc.enabled=false: content files kept")
    else:
        sweep_manifest_entries(ctx, result, guard, ref)

    if ctx.dry_run:
        result.would_delete.append(ref.manifest_path)
        return result
    if result.failed or result.refused:
        # The manifest is the only record of the files still to delete: keep it
        # so a retry (or an operator) can finish.
        result.notes.append("manifest kept: some of its files were not deleted")
        return result
    ctx.fence()
    tally(result, bulk_delete(ctx.resolver, [ref.manifest_path]), present)
    return result
