"""MANIFEST_FILE_CLEANUP: delete every file a manifest names, then the manifest.

Entries stream block by block (``cleanup/avro_blocks.py``, then fastavro): memory stays
flat and bounded however the blocks are crafted, for format v1-v3, data or deletes. A
path longer than ``MAX_PATH_LENGTH`` fails the manifest (S3 and GCS keys end at 1,024
bytes). Fields are read by the spec's names; v1 has no ``content`` and means data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

from pyiceberg.io import InputFile

from polaris_pipeline.cleanup.avro_blocks import AvroBlocks
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.deleting import (
    delete_chunked,
    delete_leftover_sidecars,
    delete_one,
    existing_with_sizes,
)
from polaris_pipeline.cleanup.gc_policy import gc_disabling_value, gc_kept_note
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.cleanup.inflate import exceeded
from polaris_pipeline.errors import StorageError
from polaris_pipeline.tasks.manifest_codec import ManifestFileRef
from polaris_pipeline.tasks.payloads import ManifestCleanupPayload

# Characters in one entry's file_path.
MAX_PATH_LENGTH = 16 * 1024


@dataclass(frozen=True)
class EntryRef:
    """What a cleanup needs of one manifest entry."""

    status: int  # 0 EXISTING, 1 ADDED, 2 DELETED
    content: int  # 0 data, 1 position deletes, 2 equality deletes
    path: str
    size: int


def _entry(record: Any, location: str) -> EntryRef:
    try:
        data_file = record["data_file"]
        content = data_file.get("content")
        entry = EntryRef(
            status=int(record["status"]),
            content=0 if content is None else int(content),
            path=str(data_file["file_path"]),
            size=int(data_file["file_size_in_bytes"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise StorageError(f"{location} is not an Iceberg manifest: entry lacks {e}") from None
    if len(entry.path) > MAX_PATH_LENGTH:
        detail = f"an entry's file_path of {len(entry.path):,} characters"
        raise exceeded(location, "MAX_PATH_LENGTH", MAX_PATH_LENGTH, detail)
    return entry


def iter_manifest_entries(input_file: InputFile) -> Iterator[EntryRef]:
    """Every entry of a manifest, all statuses, one at a time."""
    with input_file.open() as stream:
        for record in AvroBlocks(cast(IO[bytes], stream), input_file.location).records():
            yield _entry(record, input_file.location)


def _expected_entries(ref: ManifestFileRef) -> int:
    counts = (ref.added_files_count, ref.existing_files_count, ref.deleted_files_count)
    return sum(c for c in counts if c is not None) if any(c is not None for c in counts) else 0


def sweep_manifest_entries(
    ctx: CleanupContext,
    result: CleanupTally,
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
        if ctx.dry_run:
            if guard.admit(entry.path, result):
                result.would_delete.append(entry.path)
            continue
        # Judged once, right before its chunk is deleted (``Guard.may_delete``).
        chunk.setdefault(entry.path, None)
        if len(chunk) >= chunk_size:
            done = delete_chunked(
                ctx, result, guard, list(chunk), what=what, done_before=done, total=total
            )
            chunk = {}
    if chunk and not ctx.dry_run:
        delete_chunked(ctx, result, guard, list(chunk), what=what, done_before=done, total=total)


def run_manifest_cleanup(ctx: CleanupContext) -> CleanupTally:
    """Delete the files a manifest names, then (if all went well) the manifest."""
    payload = ctx.decoded.require(ManifestCleanupPayload)
    ref = payload.manifest
    result = CleanupTally.start()
    props = ctx.task.internal_properties
    guard = Guard.for_task(ctx)
    if not guard.admit(ref.manifest_path, result):
        result.notes.append("manifest path refused by the guard: nothing read or deleted")
        return result

    present = existing_with_sizes(ctx, result, [ref.manifest_path])
    if result.failed:
        return result
    if ref.manifest_path not in present:
        delete_leftover_sidecars(ctx, result, guard, [ref.manifest_path])
        result.notes.append("manifest already gone: nothing to do")
        return result

    keep_value = gc_disabling_value(props)
    if keep_value is not None:
        result.notes.append(gc_kept_note(keep_value))
    else:
        sweep_manifest_entries(ctx, result, guard, ref)

    if not ctx.dry_run and (result.failed or result.refused):
        # The manifest is the only record of the files still to delete: keep it
        # so a retry (or an operator) can finish.
        result.notes.append("manifest kept: some of its files were not deleted")
        return result
    return delete_one(ctx, result, guard, ref.manifest_path, present)
