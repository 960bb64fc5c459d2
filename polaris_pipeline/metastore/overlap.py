"""Which live entities own a location: Polaris's overlap rule, over the whole metastore.

Asked before a dropped table's unreferenced files are listed and again before each
batch is deleted. The rule is Polaris's (``QueryGenerator.generateOverlapQuery``,
``StorageLocation.isChildOf``): an entity whose ``location_without_scheme`` (schema v2+;
v1 reads ``properties["location"]``) equals an ancestor of the prefix, with or without
the trailing slash, or lies under it (``LIKE 'prefix/%'``, ``%``/``_`` escaped); the
candidates are then judged by ``storage/uri.py``'s location rule. Wider than Polaris's:
every realm and catalog in one statement, and the catalogs' ``default-base-location``.

Cost: Polaris's ``idx_locations`` is led by realm and parent, which a lookup by location
lacks; with ``guard_indexes.py`` each check is a few index searches, without them a read
of every row (warned at the first check). Each check is bounded (``GUARD_BOUND_ENV``):
past it a ``GuardTimeout`` fails the attempt, never an answer of "none".

Overlaps (``judge``): any entity at or under the prefix; a table or view at an ancestor
(a namespace or catalog above owns no file); an entity whose location or properties do
not parse (refused rather than guessed).

``metadata_users``: which live table or view has a file about to be deleted as its
``metadata-location`` (registered over the dropped one's metadata), found by file name,
which every spelling shares, then judged as locations. ``restored_as`` asks it for the
dropped entity's last metadata file: a live table of that file is the drop restored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Executable, and_, literal_column, or_, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ColumnElement

from polaris_pipeline.errors import MetastoreError
from polaris_pipeline.metastore.guard_indexes import (
    LOCATION_COLUMN_SINCE,
    TABLE_ROWS,
    WRITE_PATHS_INDEX,
    existing_indexes,
    guard_indexes,
    metadata_file_name,
    write_path_rows,
)
from polaris_pipeline.metastore.queries import ENTITY_REALMS
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.settings import GUARD_BOUND_ENV, setting_from_env
from polaris_pipeline.storage.uri import Location, parse_location
from polaris_pipeline.tasks.model import CATALOG_TYPE_CODE, TABLE_LIKE_TYPE_CODE
from polaris_pipeline.tasks.payloads import METADATA_LOCATION_KEY
from polaris_pipeline.tasks.roots import ENTITY_LOCATION_KEY, ROOT_PROPERTIES

NAMESPACE_TYPE_CODE = 6
log = logging.getLogger(__name__)
_KINDS = {CATALOG_TYPE_CODE: "catalog", NAMESPACE_TYPE_CODE: "namespace"}
CATALOG_BASE_LOCATION_KEY = "default-base-location"
# Catalogs are top-level entities: Polaris gives them catalog id 0 (its null id), so
# that ``idx_entities`` (realm_id, catalog_id, id) finds them among any number of tables.
CATALOG_ROWS_CATALOG_ID = 0
# Polaris's catalog-id-led index exists from schema v4.
CATALOG_ID_INDEX = "idx_entities_catalog_id_id"
CATALOG_ID_INDEX_SINCE = 4
# How often (SQLite virtual-machine steps) the SQLite bound is looked at.
_SQLITE_PROGRESS_STEPS = 1000
# How many metadata file names one lookup statement carries.
_NAMES_PER_STATEMENT = 500
_LIKE_ESCAPE = "\\"
# Azure's two endpoints name one account: an entity may be written with either.
_AZURE_ENDPOINTS = ("dfs.core.windows.net", "blob.core.windows.net")


# The columns ``judge`` reads of each entity row (and ``location_without_scheme``,
# where the statement selects it).
_JUDGED = tuple(
    entities.c[k] for k in ("realm_id", "catalog_id", "id", "type_code", "name", "properties")
)


@dataclass(frozen=True)
class Overlap:
    """A live entity that owns (or may own) files under the prefix."""

    realm_id: str
    catalog_id: int
    entity_id: int
    kind: str  # table-like, namespace, catalog
    name: str
    location: str
    why: str
    # The catalog's name, when its row was found (None: only its id is known).
    catalog: str | None = None

    def describe(self) -> str:
        return f"overlap with {self.entity()} at location {self.location!r}: {self.why}"

    def entity(self) -> str:
        """``live KIND 'NAME' (REALM/ID, catalog 'C')``: which live entity this is."""
        return (
            f"live {self.kind} {self.name!r} ({self.realm_id}/{self.entity_id}"
            f"{self._catalog_text()})"
        )

    def _catalog_text(self) -> str:
        if self.kind == "catalog":
            return ""
        if self.catalog is not None:
            return f", catalog {self.catalog!r}"
        return f", catalog id {self.catalog_id}"


def escape_like(text: str) -> str:
    """``text`` as a literal in a LIKE pattern (``\\`` escapes ``%``, ``_`` and itself)."""
    return (
        text.replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2)
        .replace("%", _LIKE_ESCAPE + "%")
        .replace("_", _LIKE_ESCAPE + "_")
    )


def _spellings(loc: Location) -> list[str]:
    """The prefix without its scheme, as Polaris's ``withoutScheme`` may have stored it."""
    path = "/".join(loc.segments)
    if loc.scheme == "file":
        # file:///x -> ///x, file:/x and /x -> /x, file://localhost/x -> //localhost/x
        return [f"///{path}", f"/{path}", f"//localhost/{path}"]
    authorities = [loc.authority]
    if loc.scheme == "abfs" and "@" in loc.store:
        authorities += [f"{loc.store}.{endpoint}" for endpoint in _AZURE_ENDPOINTS]
    tail = f"/{path}" if path else ""
    return list(dict.fromkeys(f"//{authority}{tail}" for authority in authorities))


def overlap_terms(prefix: Location) -> tuple[list[str], list[str]]:
    """``(equality terms, LIKE patterns)`` for ``location_without_scheme``.

    Every ancestor of the prefix and the prefix itself, each with and without its
    trailing slash; and everything under the prefix.
    """
    equal: dict[str, None] = {}
    like: list[str] = []
    for spelling in _spellings(prefix):
        for i, char in enumerate(spelling):
            if char == "/":
                if i:
                    equal[spelling[:i]] = None
                equal[spelling[: i + 1]] = None
        equal[spelling] = None
        equal[spelling + "/"] = None
        like.append(escape_like(spelling) + "/%")
    return list(equal), like


def json_object(raw: Any) -> Mapping[str, Any] | None:
    """A JSON-object column (text, or decoded by the driver) as a mapping; null is empty,
    anything else (not JSON, not an object) None."""
    if isinstance(raw, Mapping):
        return raw
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, Mapping) else None


def judge(
    prefix: Location,
    *,
    realm_id: str,
    catalog_id: int,
    entity_id: int,
    type_code: int,
    name: str,
    properties: Any,
    location_without_scheme: str | None = None,
) -> Overlap | None:
    """Whether one entity row overlaps ``prefix`` (see the module docstring)."""
    kind = _KINDS.get(type_code, "table-like")

    def overlap(location: str, why: str) -> Overlap:
        return Overlap(realm_id, catalog_id, entity_id, kind, name, location, why)

    props = json_object(properties)
    if props is None:
        return overlap(location_without_scheme or "?", "its properties do not decode")
    key = CATALOG_BASE_LOCATION_KEY if type_code == CATALOG_TYPE_CODE else ENTITY_LOCATION_KEY
    raw = props.get(key)
    if not isinstance(raw, str) or not raw.strip():
        if location_without_scheme:
            # The index names a location its properties do not: refuse, never guess.
            return overlap(location_without_scheme, f"no {key!r} property to judge it by")
        return None
    try:
        loc = parse_location(raw, directory=True)
    except ValueError as e:
        return overlap(raw, f"its location is malformed ({e})")
    if prefix.contains(loc):
        return overlap(raw, "it is at or under the prefix")
    if type_code == TABLE_LIKE_TYPE_CODE and loc.contains(prefix):
        return overlap(raw, "the prefix lies inside it")
    return None


def _at(hit: Overlap, prefix: Location) -> bool:
    try:
        return parse_location(hit.location, directory=True) == prefix
    except ValueError:
        return True  # a malformed location is refused, never guessed


class GuardTimeout(MetastoreError):
    """A guard check gave no answer within its bound: the attempt fails (retried later),
    nothing is deleted on a guess."""


def guard_bound_s() -> float:
    """The bound of one guard check: the guard section's, from this process's environment."""
    bound: float = setting_from_env("guard", "bound_s")
    return bound


def _timed_out(exc: DBAPIError) -> bool:
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) == "57014":  # PostgreSQL query_canceled
        return True
    return "interrupted" in str(orig)  # SQLite, stopped by the progress handler


# The indexes on ``entities`` of each metastore (by URL), read at its first check in
# this process, when the missing guard indexes are warned of (once each).
_indexes: dict[str, frozenset[str]] = {}
_indexes_lock = threading.Lock()


def _indexes_of(engine: Engine, schema_version: int | None, bound_s: float) -> frozenset[str]:
    key = engine.url.render_as_string(hide_password=True)
    with _indexes_lock:
        known = _indexes.get(key)
    if known is not None:
        return known
    found = frozenset(existing_indexes(engine))
    with _indexes_lock:
        if key in _indexes:
            return _indexes[key]
        _indexes[key] = found
    missing = [i for i in guard_indexes(schema_version) if i.name not in found]
    if missing:
        log.warning(
            "the metastore lacks the guard index(es) %s (%s): each shared-location "
            "guard check reads every entity row, bounded by %.0f s (%s), past which "
            "the task's attempt fails and is retried; `polaris-pipeline guard-indexes` "
            "creates them",
            ", ".join(i.name for i in missing),
            "; ".join(i.what for i in missing),
            bound_s,
            GUARD_BOUND_ENV,
        )
    return found


def _metadata_user(row: Any, wanted: set[Location]) -> Overlap | None:
    """The live table-like ``row`` when its ``metadata-location`` is one of ``wanted``."""
    internal = json_object(row.internal_properties)
    raw = internal.get(METADATA_LOCATION_KEY) if internal is not None else None
    if not isinstance(raw, str):
        return None
    try:
        loc = parse_location(raw, directory=True)
    except ValueError:
        return None
    if loc not in wanted:
        return None
    props = json_object(row.properties) or {}
    location = props.get(ENTITY_LOCATION_KEY)
    return Overlap(
        row.realm_id,
        int(row.catalog_id),
        int(row.id),
        "table-like",
        row.name,
        location if isinstance(location, str) else raw,
        f"its metadata-location {raw!r} is a file about to be deleted",
    )


class LiveLocations:
    """The overlap check against one metastore (its engine and schema version).

    One or two index-answered statements per check given the guard indexes (else a read of
    every row, warned at the first check). Bounded by ``bound_s`` (``guard_bound_s()``): past
    it a ``GuardTimeout`` names check and time; the attempt fails and is retried.
    """

    def __init__(
        self, engine: Engine, schema_version: int | None, *, bound_s: float | None = None
    ) -> None:
        self.engine = engine
        self.schema_version = schema_version
        self.indexed = schema_version is not None and schema_version >= LOCATION_COLUMN_SINCE
        self.bound_s = guard_bound_s() if bound_s is None else bound_s
        # Read on the first check only: the catalogs' base locations (a table created
        # at the path during the sweep is seen at the next check, a new catalog is not).
        self._catalog_hits: dict[Location, list[Overlap]] = {}
        # (realm, catalog id) -> the catalog's name, read with the first check.
        self._catalog_names: dict[tuple[str, int], str] | None = None
        # The one connection of a ``held()`` block; None: a connection per check.
        self._held: Connection | None = None
        # The indexes on ``entities``, known at the first check.
        self._indexes: frozenset[str] = frozenset()

    @contextlib.contextmanager
    def held(self) -> Iterator[LiveLocations]:
        """Every check inside the block on one connection: a walk asking once per
        directory (the leak report) spent most of its time opening connections (a SQLite
        engine keeps no pool). Each check still reads the rows as they are then."""
        with self.engine.connect() as conn:
            session_bound = conn.dialect.name == "postgresql"
            if session_bound:
                # The block's own connection: bounded once for the session, not with a
                # round trip per check (a walk makes two checks per directory).
                conn.execute(text(f"SET statement_timeout = {self._bound_ms}"))
                conn.commit()
            self._held = conn
            try:
                yield self
            finally:
                self._held = None
                if session_bound:
                    with contextlib.suppress(DBAPIError):  # a broken one is discarded
                        conn.execute(text("RESET statement_timeout"))
                        conn.commit()

    @contextlib.contextmanager
    def _connection(self, guard: str) -> Iterator[Connection]:
        """A check's connection, its statements bounded by ``bound_s``; a database
        error in the check is a MetastoreError, running out of time a GuardTimeout."""
        started = time.monotonic()
        try:
            self._indexes = _indexes_of(self.engine, self.schema_version, self.bound_s)
            if self._held is not None:
                try:
                    with self._bounded(self._held):
                        yield self._held
                finally:
                    # End the read transaction the check began: the next check must see
                    # what is committed then (SQLite would keep this one's snapshot).
                    self._held.rollback()
            else:
                with self.engine.connect() as conn, self._bounded(conn):
                    yield conn
        except DBAPIError as exc:
            took = time.monotonic() - started
            if _timed_out(exc):
                raise GuardTimeout(
                    f"the {guard} guard gave no answer within its bound of {self.bound_s:g} s "
                    f"(took {took:.3f} s): nothing deleted, the attempt is retried "
                    f"(`polaris-pipeline guard-indexes`, {GUARD_BOUND_ENV})"
                ) from exc
            first = str(getattr(exc, "orig", exc)).strip().splitlines()
            raise MetastoreError(
                f"overlap check failed: {first[0] if first else type(exc).__name__}"
            ) from exc

    @contextlib.contextmanager
    def _bounded(self, conn: Connection) -> Iterator[None]:
        if conn.dialect.name == "postgresql":
            if conn is not self._held:  # held(): bounded for its whole session
                # SET LOCAL: for this check's transaction only (rolled back after it).
                conn.execute(text(f"SET LOCAL statement_timeout = {self._bound_ms}"))
            yield
            return
        raw: Any = conn.connection.driver_connection
        deadline = time.monotonic() + self.bound_s
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), _SQLITE_PROGRESS_STEPS)
        try:
            yield
        finally:
            raw.set_progress_handler(None, _SQLITE_PROGRESS_STEPS)

    @property
    def _bound_ms(self) -> int:
        return max(1, int(self.bound_s * 1000))

    def overlaps(self, prefix: Location, limit: int = 5) -> list[Overlap]:
        """Up to ``limit`` live entities overlapping ``prefix``; empty when none does."""
        return self._first("shared-location overlap", lambda c: self._candidates(c, prefix), limit)

    def metadata_users(self, files: Iterable[str], limit: int = 5) -> list[Overlap]:
        """Up to ``limit`` live tables or views whose ``metadata-location`` is one of
        ``files`` (compared as locations: ``file:/x`` is ``file:///x``, ``s3a`` is
        ``s3``). The rows are found by file name (``guard_indexes.py``), which finds every
        spelling of a file wherever it lies; every candidate is judged here."""
        wanted: set[Location] = set()
        for uri in files:
            try:
                wanted.add(parse_location(uri, directory=True))
            except ValueError:
                continue  # never a metadata-location that parses either
        if not wanted:
            return []
        return self._first(
            "metadata-file", lambda conn: self._metadata_candidates(conn, wanted), limit
        )

    def restored_as(self, realm_id: str, metadata_file: str) -> Overlap | None:
        """The live table or view of ``realm_id`` whose ``metadata-location`` is
        ``metadata_file`` (the dropped entity's last one, as a location), else None: the
        dropped table restored by any client. Another realm's is another table."""
        try:
            wanted = {parse_location(metadata_file, directory=True)}
        except ValueError:
            return None
        found = self._first(
            "restored-table",
            lambda conn: self._metadata_candidates(conn, wanted, realm_id),
            1,
        )
        return found[0] if found else None

    def _first(
        self, guard: str, hits: Callable[[Connection], Iterator[Overlap]], limit: int
    ) -> list[Overlap]:
        found: list[Overlap] = []
        with self._connection(guard) as conn:
            names = self._names(conn)
            for hit in hits(conn):
                found.append(
                    dataclasses.replace(hit, catalog=names.get((hit.realm_id, hit.catalog_id)))
                )
                if len(found) >= limit:
                    break
        return found

    def enclosing_table(self, prefix: Location) -> Overlap | None:
        """A live table or view at ``prefix`` or above it (the prefix is its files), else
        None: the part of the rule a walk prunes by, without reading what lies under it."""
        tables = entities.c.type_code == TABLE_LIKE_TYPE_CODE
        if self.indexed:
            lws = entities.c.location_without_scheme
            stmt = select(*_JUDGED, lws).where(tables, lws.in_(overlap_terms(prefix)[0]))
        else:
            stmt = select(*_JUDGED).where(tables).execution_options(yield_per=1000)
        with self._connection("enclosing-table") as conn:
            for hit in self._judged(conn.execute(stmt), prefix):
                # At the prefix, or above it; one under it is not "enclosing".
                if hit.why != "it is at or under the prefix" or _at(hit, prefix):
                    return hit
        return None

    def _catalogs(self, conn: Connection, *columns: Any) -> Executable:
        """``columns`` of the catalogs' rows, selected through an index."""
        c = entities.c
        rows = and_(c.catalog_id == CATALOG_ROWS_CATALOG_ID, c.type_code == CATALOG_TYPE_CODE)
        if (self.schema_version or 0) < CATALOG_ID_INDEX_SINCE:
            # idx_entities is led by realm_id: name each realm (found by a loose index scan).
            realms = [r for (r,) in conn.execute(ENTITY_REALMS.build(conn.dialect.name))]
            return select(*columns).where(c.realm_id.in_(realms), rows)
        if conn.dialect.name == "sqlite" and CATALOG_ID_INDEX in self._indexes:
            # SQLite's statistics know only the average rows per catalog id, which a few
            # catalogs of many tables make look like a scan's worth: it is told.
            names = ", ".join(col.name for col in columns)
            return text(
                f"SELECT {names} FROM entities INDEXED BY {CATALOG_ID_INDEX} "
                f"WHERE catalog_id = {CATALOG_ROWS_CATALOG_ID} AND type_code = {CATALOG_TYPE_CODE}"
            )
        return select(*columns).where(rows)  # idx_entities_catalog_id_id

    def _names(self, conn: Connection) -> dict[tuple[str, int], str]:
        if self._catalog_names is None:
            c = entities.c
            rows = conn.execute(self._catalogs(conn, c.realm_id, c.id, c.name))
            self._catalog_names = {(r.realm_id, int(r.id)): r.name for r in rows}
        return self._catalog_names

    def _metadata_candidates(
        self, conn: Connection, wanted: set[Location], realm_id: str | None = None
    ) -> Iterator[Overlap]:
        """Live table-like rows whose metadata-location is one of ``wanted``; ``realm_id``:
        of that realm only (None: every realm)."""
        c = entities.c
        dialect = conn.dialect.name
        name: ColumnElement[str] = literal_column(metadata_file_name(dialect))
        names = sorted({loc.segments[-1] for loc in wanted if loc.segments})
        for i in range(0, len(names), _NAMES_PER_STATEMENT):
            stmt = select(
                c.realm_id, c.catalog_id, c.id, c.name, c.properties, c.internal_properties
            ).where(text(TABLE_ROWS), name.in_(names[i : i + _NAMES_PER_STATEMENT]))
            if realm_id is not None:
                stmt = stmt.where(c.realm_id == realm_id)
            for row in conn.execute(stmt):
                hit = _metadata_user(row, wanted)
                if hit is not None:
                    yield hit

    def _candidates(self, conn: Connection, prefix: Location) -> Iterator[Overlap]:
        c = entities.c
        if prefix not in self._catalog_hits:
            # Catalogs are few; their base location is only in their properties.
            catalogs = self._catalogs(conn, *_JUDGED)
            self._catalog_hits[prefix] = list(self._judged(conn.execute(catalogs), prefix))
        yield from self._catalog_hits[prefix]
        owners = c.type_code.in_([NAMESPACE_TYPE_CODE, TABLE_LIKE_TYPE_CODE])
        if not self.indexed:
            # Schema v1: no location column, every table's and namespace's properties.
            stmt = select(*_JUDGED).where(owners).execution_options(yield_per=1000)
            yield from self._judged(conn.execute(stmt), prefix)
            return
        lws = c.location_without_scheme
        stmt = select(*_JUDGED, lws).where(owners, _location_matches(conn.dialect.name, prefix))
        yield from self._judged(conn.execute(stmt), prefix)

    @staticmethod
    def _judged(rows: Iterable[Any], prefix: Location) -> Iterator[Overlap]:
        for row in rows:
            hit = judge(
                prefix,
                realm_id=row.realm_id,
                catalog_id=int(row.catalog_id),
                entity_id=int(row.id),
                type_code=int(row.type_code),
                name=row.name,
                properties=row.properties,
                location_without_scheme=getattr(row, "location_without_scheme", None),
            )
            if hit is not None:
                yield hit

    def write_path_users(self, prefix: Location, limit: int = 5) -> list[Overlap]:
        """Up to ``limit`` live tables or views whose ``write.data.path``-style root
        (``ROOT_PROPERTIES``) lies at, above or under ``prefix``: their files are there
        whatever their location says. No column holds these properties: the rows naming
        one are read, through ``polaris_pipeline_guard_write_paths`` where it exists (the
        few such rows), else by reading every row (warned at the first check)."""

        def hits(conn: Connection) -> Iterator[Overlap]:
            dialect = conn.dialect.name
            stmt: Executable
            if dialect == "sqlite" and WRITE_PATHS_INDEX in self._indexes:
                # SQLite cannot tell this partial index from the other one on table rows
                # (it read every table through that one): it is told.
                names = ", ".join(col.name for col in _JUDGED)
                stmt = text(
                    f"SELECT {names} FROM entities INDEXED BY {WRITE_PATHS_INDEX} "
                    f"WHERE {write_path_rows(dialect)}"
                )
            else:
                rows = text(write_path_rows(dialect))
                stmt = select(*_JUDGED).where(rows).execution_options(yield_per=1000)
            return _write_root_hits(conn.execute(stmt), prefix)

        return self._first("write-path", hits, limit)


def _write_root_hits(rows: Iterable[Any], prefix: Location) -> Iterator[Overlap]:
    for row in rows:
        props = json_object(row.properties)
        if props is None:
            continue  # judged by ``overlaps`` (its properties do not decode)
        for key in ROOT_PROPERTIES:
            raw = props.get(key)
            if not isinstance(raw, str) or not raw.strip():
                continue
            hit = Overlap(
                row.realm_id, int(row.catalog_id), int(row.id), "table-like", row.name, raw, ""
            )
            try:
                loc = parse_location(raw, directory=True)
            except ValueError as e:
                yield dataclasses.replace(hit, why=f"its {key} is malformed ({e})")
                continue
            if prefix.contains(loc):
                yield dataclasses.replace(hit, why=f"its {key} is at or under the prefix")
            elif loc.contains(prefix):
                yield dataclasses.replace(hit, why=f"the prefix lies inside its {key}")


def _location_matches(dialect: str, prefix: Location) -> ColumnElement[bool]:
    """``location_without_scheme`` at an ancestor of ``prefix`` or at it (equal), or under
    it: every realm at once, through ``polaris_pipeline_guard_locations``."""
    lws = entities.c.location_without_scheme
    equal, like = overlap_terms(prefix)
    under: list[ColumnElement[bool]]
    if dialect == "postgresql":
        # LIKE 'x/%' ranges over a text_pattern_ops index whatever the collation.
        under = [lws.like(p, escape=_LIKE_ESCAPE) for p in like]
    else:
        # SQLite's LIKE ignores case and no index serves it; its default (binary)
        # collation orders bytes, so 'x/' <= v < 'x0' ('0' follows '/') is "starts with x/".
        under = [and_(lws >= f"{s}/", lws < f"{s}0") for s in _spellings(prefix)]
    return or_(lws.in_(equal), *under)
