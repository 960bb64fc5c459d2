"""Decide whether a path may be deleted on behalf of one table.

Polaris has no such fence (vended credentials are its only limit, and a manifest or
crafted task can name any path). A path is admitted only strictly inside one of the
table's roots (its location and data/metadata paths) and, when the storage config lists
allowed prefixes, inside one of those. Checks are lexical (``storage.uri``, no URL
decoding), plus symlink resolution of a local parent. The roots come from what the
catalog recorded (``DecodedTask.roots``), never from a file the guard is about to judge.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.uri import BUCKET_SCHEMES, Location, checked_location
from polaris_pipeline.tasks.roots import ROOT_PROPERTIES


def _parse(uri: str, *, root: bool = False) -> Location:
    """``uri`` as a Location (``root``: a directory) by the one rule of
    ``storage.uri.checked_location``; its ValueError carries the reason."""
    return checked_location(uri, directory=root)


def _parse_root(uri: str, what: str) -> Location:
    try:
        return _parse(uri, root=True)
    except ValueError as e:
        raise GuardRefusal(uri, f"{what}: {e}") from None


def _table_root(uri: str) -> Location:
    loc = _parse_root(uri, "table location")
    if not loc.segments:
        # Everything "inside" a bucket or "/" is everything; an allowed prefix may be one.
        raise GuardRefusal(uri, "table location is a bucket or filesystem root")
    return loc


class PathGuard:
    """Admits paths strictly inside one of ``roots`` and one of ``allowed_prefixes``.

    With no allowed prefixes, only the roots apply. Roots that lie outside every
    allowed prefix are dropped, so a table whose location is outside them can
    delete nothing.
    """

    def __init__(
        self,
        roots: Iterable[str],
        allowed_prefixes: Iterable[str] = (),
        *,
        location: str | None = None,
    ) -> None:
        all_roots = tuple(_table_root(r) for r in roots)
        if not all_roots:
            raise GuardRefusal("", "no table location")
        self._allowed = tuple(_parse_root(p, "allowed prefix") for p in allowed_prefixes)
        self._all_roots = all_roots
        self._roots = tuple(r for r in all_roots if not self._allowed or self._in_allowed(r))
        self.roots: tuple[str, ...] = tuple(str(r) for r in self._roots)
        self.location = location or str(all_roots[0])
        self._real_roots: tuple[Location, ...] | None = None
        self._real_allowed: tuple[Location, ...] = ()

    @classmethod
    def for_table(
        cls,
        storage_location: str,
        table_properties: Mapping[str, str],
        config: StorageConfig,
    ) -> PathGuard:
        """The guard for a table at ``storage_location`` with ``table_properties``."""
        roots = [storage_location]
        roots.extend(
            table_properties[k] for k in ROOT_PROPERTIES if table_properties.get(k, "").strip()
        )
        return cls(roots, config.allowed_prefixes, location=storage_location)

    # -- checks -------------------------------------------------------------------

    def check(self, uri: str) -> None:
        """Return if ``uri`` may be deleted; raise :class:`GuardRefusal` otherwise."""
        try:
            loc = _parse(uri)
        except ValueError as e:
            raise GuardRefusal(uri, str(e)) from None
        if loc in self._all_roots:
            raise GuardRefusal(uri, "is a table location itself")
        if not self._roots:
            raise GuardRefusal(uri, "table location is outside the allowed prefixes")
        if not any(r.contains(loc, strictly=True) for r in self._roots):
            raise GuardRefusal(uri, self._why_outside(loc))
        if self._allowed and not self._in_allowed(loc):
            raise GuardRefusal(uri, "outside the allowed prefixes")
        if loc.scheme == "file":
            self._check_local(uri, loc)

    def split(self, uris: Iterable[str]) -> tuple[list[str], list[GuardRefusal]]:
        """``(admitted, refusals)`` of ``uris``, each in input order."""
        admitted: list[str] = []
        refused: list[GuardRefusal] = []
        for uri in uris:
            try:
                self.check(uri)
            except GuardRefusal as e:
                refused.append(e)
            else:
                admitted.append(uri)
        return admitted, refused

    def _in_allowed(self, loc: Location) -> bool:
        return any(p.contains(loc) for p in self._allowed)

    def _why_outside(self, loc: Location) -> str:
        if not any(r.scheme == loc.scheme for r in self._roots):
            return f"other scheme {loc.scheme!r} (table location is {self._roots[0].scheme})"
        same_scheme = [r for r in self._roots if r.scheme == loc.scheme]
        if not any(r.store == loc.store for r in same_scheme):
            kind = "bucket" if loc.scheme in BUCKET_SCHEMES else "host"
            return f"other {kind} {loc.authority!r}"
        if len(self.roots) == 1:
            return f"outside the table location {self.roots[0]}"
        return f"outside the table locations {', '.join(self.roots)}"

    def _check_local(self, uri: str, loc: Location) -> None:
        # A symlinked directory inside the table could point anywhere: compare where
        # the parent really is, resolved afresh on every check (a directory checked
        # once can be swapped for a link later; the delete itself then follows none,
        # see storage.local_walk). The file itself may be a symlink; unlinking it
        # removes the link, not its target, so it is not resolved.
        real_loc = Location("file", "", (*self._real_dir(loc.segments[:-1]), loc.segments[-1]))
        real_roots, real_allowed = self._real_bounds()
        if not any(rr.contains(real_loc, strictly=True) for rr in real_roots):
            raise GuardRefusal(uri, f"resolves outside the table location (to {real_loc.path})")
        if self._allowed and not any(p.contains(real_loc, strictly=False) for p in real_allowed):
            raise GuardRefusal(uri, f"resolves outside the allowed prefixes (to {real_loc.path})")

    def _real_bounds(self) -> tuple[tuple[Location, ...], tuple[Location, ...]]:
        """The roots and allowed prefixes with local symlinks resolved, once per guard: they
        come from the catalog and the operator, not from anyone who writes in a table."""
        if self._real_roots is None:
            # A root that resolves to "/" admits nothing rather than everything.
            self._real_roots = tuple(rr for rr in map(self._realpath, self._roots) if rr.segments)
            self._real_allowed = tuple(map(self._realpath, self._allowed))
        return self._real_roots, self._real_allowed

    def _realpath(self, loc: Location) -> Location:
        """``loc`` with local symlinks resolved."""
        return Location("file", "", self._real_dir(loc.segments)) if loc.scheme == "file" else loc

    @staticmethod
    def _real_dir(segments: tuple[str, ...]) -> tuple[str, ...]:
        """The local directory ``segments`` with every symlink resolved, now (never cached)."""
        return _parse(os.path.realpath("/" + "/".join(segments)), root=True).segments

    def __repr__(self) -> str:
        return f"PathGuard(roots={self.roots!r})"
