"""A leaf: what the leak report holds, per catalog and per leaked root."""

from __future__ import annotations

from dataclasses import dataclass, field

from polaris_pipeline.storage.catalog_config import CatalogStorage

# At most this many directories that are not table roots are kept per catalog (the
# rest are counted): a bucket of other tools' data must not fill the report.
NOT_A_TABLE_SAMPLE = 100


@dataclass(frozen=True)
class CatalogRef:
    """A catalog entity (type code 4) and the locations its tables may live under."""

    realm_id: str
    catalog_id: int
    name: str
    # The default base location first, then the storage configuration's allowedLocations.
    locations: tuple[str, ...]
    # Why the catalog cannot be walked (its storage configuration does not decode), if so.
    problem: str | None = None
    # Its storage configuration, decoded: how its locations are reached (``catalogs.py``).
    storage: CatalogStorage | None = None


@dataclass
class LeakedRoot:
    """A directory holding Iceberg table or view metadata that nothing live owns."""

    uri: str
    kind: str  # "table", "view", or "unknown" when its metadata could not be read
    objects: int = 0
    bytes: int = 0
    newest_ms: int | None = None
    oldest_ms: int | None = None
    metadata_file: str | None = None
    uuid: str | None = None
    last_updated_ms: int | None = None
    # The newest metadata's gc.enabled value as written, when it has one.
    gc_enabled: str | None = None
    dropped_by: str | None = None
    dropped_at_ms: int | None = None
    error: str | None = None  # metadata unreadable or malformed
    partial: bool = False  # its listing failed half way: the numbers are what was seen


@dataclass
class NotATable:
    """A directory of loose files, outside every live table, that is no table root."""

    uri: str
    objects: int
    bytes: int


@dataclass
class CatalogLeaks:
    """What the walk of one catalog's locations found."""

    catalog: CatalogRef
    roots: list[LeakedRoot] = field(default_factory=list)
    not_tables: list[NotATable] = field(default_factory=list)
    not_tables_total: int = 0
    # Table roots left out: a live entity overlaps them, or a task still names them.
    owned_roots: int = 0
    pending_roots: int = 0
    live_tables_pruned: int = 0
    directories_listed: int = 0
    # Directories not walked again: an earlier catalog (realm and name order) shares them.
    walked_before: int = 0
    skipped: str | None = None  # why the catalog was not walked at all
    errors: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """A listing failed: the catalog's roots are those seen before it failed."""
        return bool(self.errors) or any(r.partial for r in self.roots)

    @property
    def leaked_bytes(self) -> int:
        return sum(r.bytes for r in self.roots)

    @property
    def oldest_ms(self) -> int | None:
        """When the longest-leaked root was last written (its newest object)."""
        times = [r.newest_ms for r in self.roots if r.newest_ms is not None]
        return min(times) if times else None

    def add_not_a_table(self, entry: NotATable) -> None:
        self.not_tables_total += 1
        if len(self.not_tables) < NOT_A_TABLE_SAMPLE:
            self.not_tables.append(entry)


@dataclass
class LeakReport:
    """Every catalog walked, in realm and name order."""

    catalogs: list[CatalogLeaks] = field(default_factory=list)

    @property
    def roots(self) -> int:
        return sum(len(c.roots) for c in self.catalogs)

    @property
    def leaked_bytes(self) -> int:
        return sum(c.leaked_bytes for c in self.catalogs)

    @property
    def partial(self) -> bool:
        return any(c.partial for c in self.catalogs)
