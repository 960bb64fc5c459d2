"""Is a held table still restorable? Every file its last metadata names, checked, read-only.

The metadata file, manifest lists, manifests, their live (ADDED or EXISTING) data and
delete files, and statistics files: ``restorable`` or ``N of M files missing``. Bounded:
manifests are immutable, so a ``ManifestCache`` keeps their entries; a check reads at most
``max_manifests`` new ones, else says it is incomplete. Existence is one paged listing of
the location, plus a stat per file outside it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from polaris_pipeline.errors import StorageError, one_line
from polaris_pipeline.storage.listing import list_prefix
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import location_within, normalize_uri

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

SAMPLE_SIZE = 5
_DELETED = 2  # a manifest entry's status


@dataclass
class ManifestCache:
    """Live entries (path, size) of each manifest read, by manifest path, most recent last."""

    capacity: int = 10_000
    entries: OrderedDict[str, tuple[tuple[str, int], ...]] = field(default_factory=OrderedDict)

    def get(self, manifest: str) -> tuple[tuple[str, int], ...] | None:
        found = self.entries.get(manifest)
        if found is not None:
            self.entries.move_to_end(manifest)
        return found

    def put(self, manifest: str, live: tuple[tuple[str, int], ...]) -> None:
        self.entries[manifest] = live
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


@dataclass(frozen=True)
class Restorability:
    """The answer for one table's last metadata file."""

    metadata_file: str
    files: int  # how many files the metadata names (so far, when incomplete)
    missing: tuple[str, ...] = ()  # every missing file
    bytes: int | None = None  # what the named files hold, where known
    incomplete: str | None = None  # why the check did not finish (budget, unreadable file)

    @property
    def restorable(self) -> bool:
        return not self.missing and self.incomplete is None

    def summary(self) -> str:
        """``restorable``, ``N of M files missing (sample: ...)``, or why it is not known."""
        if self.missing:
            sample = ", ".join(self.missing[:SAMPLE_SIZE])
            more = ", ..." if len(self.missing) > SAMPLE_SIZE else ""
            return f"{len(self.missing)} of {self.files} files missing (sample: {sample}{more})"
        if self.incomplete is not None:
            return f"not known yet: {self.incomplete}"
        return "restorable"


def _read_metadata(resolver: StorageResolver, uri: str) -> TableMetadata | None:
    # pyiceberg here, not at the top: the code location imports this module (the backlog's
    # restorable check) and its runs of BATCH tasks never load pyiceberg.
    from pyiceberg.serializers import FromInputFile

    try:
        return FromInputFile.table_metadata(resolver.input_file(uri))
    except FileNotFoundError:
        return None
    except StorageError:
        raise
    except Exception as e:  # not table metadata: not restorable as it is
        raise StorageError(f"cannot read table metadata {uri}: {one_line(e)[:300]}") from None


def check_restorable(
    resolver: StorageResolver,
    metadata_uri: str,
    cache: ManifestCache | None = None,
    *,
    max_manifests: int = 1_000,
) -> Restorability:
    """Whether every file ``metadata_uri`` names exists; reads nothing it need not."""
    # Kept lazy, as _read_metadata: both load pyiceberg.
    from pyiceberg.manifest import read_manifest_list

    from polaris_pipeline.cleanup.manifest import iter_manifest_entries

    cache = ManifestCache() if cache is None else cache
    metadata = _read_metadata(resolver, metadata_uri)
    if metadata is None:
        return Restorability(metadata_uri, 1, (metadata_uri,))
    sizes: dict[str, int | None] = {metadata_uri: None}
    for stats in [*metadata.statistics, *metadata.partition_statistics]:
        sizes.setdefault(stats.statistics_path, stats.file_size_in_bytes)
    budget = max_manifests
    incomplete: str | None = None
    for snapshot in metadata.snapshots:
        manifest_list = snapshot.manifest_list
        if not manifest_list or manifest_list in sizes:
            continue
        sizes[manifest_list] = None
        try:
            manifests = list(read_manifest_list(resolver.input_file(manifest_list)))
        except FileNotFoundError:
            continue  # missing: counted below
        for manifest in manifests:
            path = manifest.manifest_path
            if path in sizes:
                continue
            sizes[path] = manifest.manifest_length
            live = cache.get(path)
            if live is None:
                if budget <= 0:
                    incomplete = f"read {max_manifests} manifests this time; the rest next time"
                    continue
                budget -= 1
                try:
                    live = tuple(
                        (e.path, e.size)
                        for e in iter_manifest_entries(resolver.input_file(path))
                        if e.status != _DELETED
                    )
                except FileNotFoundError:
                    continue  # missing: counted below
                cache.put(path, live)
            for file_path, size in live:
                sizes.setdefault(file_path, size)
    missing = _missing(resolver, metadata.location, list(sizes))
    known = [s for s in sizes.values() if s is not None]
    return Restorability(
        metadata_uri,
        len(sizes),
        tuple(missing),
        sum(known) if known else None,
        incomplete,
    )


def _missing(resolver: StorageResolver, location: str, files: list[str]) -> list[str]:
    """Which of ``files`` do not exist: one listing of ``location``, a stat for the others."""
    inside = [f for f in files if location_within(f, location)]
    outside = [f for f in files if not location_within(f, location)]
    present: set[str] = set()
    if inside:
        try:
            for page in list_prefix(resolver, location):
                present.update(normalize_uri(obj.uri) for obj in page)
        except (StorageError, FileNotFoundError):
            outside = files  # the location cannot be listed: ask each file
            inside = []
    missing = [f for f in inside if normalize_uri(f) not in present]
    missing += [f for f in outside if not resolver.exists(f)]
    return missing
