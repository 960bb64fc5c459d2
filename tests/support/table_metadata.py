"""What a table's metadata names, read with pyiceberg's own readers: the tests' oracle.

- ``referenced_files(table)``: every file the metadata names, directly or through
  older metadata;
- ``content_files(table)``: the data and delete files of every manifest entry;
- ``restorable_files(table)``: what a register of the current metadata needs (no
  older metadata, no entry a snapshot deleted);
- ``delete_manifest_paths(table)``: the delete manifests of every snapshot;
- ``entry_statuses(table)``: the manifest entry statuses the table holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus, ManifestFile
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata


def _read_metadata(io: FileIO, uri: str) -> TableMetadata:
    return FromInputFile.table_metadata(io.new_input(uri))


def _all_entries(io: FileIO, manifest: ManifestFile) -> Iterable[str]:
    # discard_deleted=False: a DELETED entry still names a file that exists on disk.
    for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
        yield entry.data_file.file_path


def referenced_files(table: Table) -> set[str]:
    """Every file the table's metadata names, directly or through older metadata.

    Current metadata, its metadata log, older metadata files reachable by
    following each file's own log, manifest lists, manifests, every manifest
    entry (all statuses, data and delete files), statistics and partition
    statistics files. Uses pyiceberg's own readers: an oracle independent of the
    handlers under test.
    """
    io = table.io
    metadata = table.metadata
    out: set[str] = {table.metadata_location}
    # Follow metadata logs transitively, so files beyond a capped log are named too.
    pending = [e.metadata_file for e in metadata.metadata_log]
    while pending:
        uri = pending.pop()
        if uri in out:
            continue
        out.add(uri)
        try:
            older = _read_metadata(io, uri)
        except FileNotFoundError:
            continue
        pending.extend(e.metadata_file for e in older.metadata_log)
    manifests: dict[str, ManifestFile] = {}
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for m in snapshot.manifests(io):
            manifests.setdefault(m.manifest_path, m)
    for path, m in manifests.items():
        out.add(path)
        out.update(_all_entries(io, m))
    for stats in metadata.statistics:
        out.add(stats.statistics_path)
    for pstats in metadata.partition_statistics:
        out.add(pstats.statistics_path)
    # Cross-check with pyiceberg's inspection tables (live entries only).
    out.update(str(p) for p in table.inspect.all_files().column("file_path").to_pylist())
    out.update(str(p) for p in table.inspect.all_manifests().column("path").to_pylist())
    return out


def restorable_files(table: Table) -> set[str]:
    """What a register of ``table``'s current metadata needs: the metadata file, the
    statistics, each snapshot's manifest list and manifests and their live entries."""
    io, metadata = table.io, table.metadata
    files = {table.metadata_location}
    files |= {s.statistics_path for s in metadata.statistics}
    files |= {s.statistics_path for s in metadata.partition_statistics}
    for snapshot in metadata.snapshots:
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            files.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                files.add(entry.data_file.file_path)
    return files


def delete_manifest_paths(table: Table) -> set[str]:
    """Paths of the delete manifests of every snapshot."""
    return {
        m.manifest_path
        for s in table.metadata.snapshots
        for m in s.manifests(table.io)
        if m.content == ManifestContent.DELETES
    }


def content_files(table: Table) -> set[str]:
    """Data and delete files named by any manifest entry of any snapshot."""
    out: set[str] = set()
    seen: set[str] = set()
    for s in table.metadata.snapshots:
        for m in s.manifests(table.io):
            if m.manifest_path in seen:
                continue
            seen.add(m.manifest_path)
            out.update(_all_entries(table.io, m))
    return out


def entry_statuses(table: Table) -> set[ManifestEntryStatus]:
    """Which entry statuses occur across the table's manifests (for test coverage)."""
    found: set[ManifestEntryStatus] = set()
    for s in table.metadata.snapshots:
        for m in s.manifests(table.io):
            for e in m.fetch_manifest_entry(table.io, discard_deleted=False):
                found.add(e.status)
    return found
