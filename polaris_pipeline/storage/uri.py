"""The scheme table and the one location rule, as Polaris's ``StorageLocation``.

Every check comparing locations uses it (guard, a metadata file's ``location``,
``allowedLocations``, credential scopes, static-config prefixes). As Polaris's
``StorageLocation``, ``S3Location`` and ``AzureLocation``: ``file:/x``, ``file:///x``
and ``/x`` are one location (so is ``file://localhost/x``; other ``file://host/`` is
none); S3 compares without its scheme (``s3a://`` is ``s3://``); Azure by container
and account (abfs[s], wasb[s]). A trailing slash never counts, "under" stops at a
``/``, and nothing is decoded (``%2e%2e`` is a literal name).
"""

from __future__ import annotations

import re
from contextlib import suppress
from dataclasses import dataclass, field

from polaris_pipeline.errors import StorageError

# Scheme as written -> (the scheme it is read as, also the fsspec protocol serving
# it; the Polaris StorageType admitting it). adlfs serves abfss and, through the
# blob endpoint, wasb[s]; Polaris admits neither s3n (Hadoop's) nor gcs (fsspec's).
SCHEMES: dict[str, tuple[str, str | None]] = {
    "file": ("file", "FILE"),
    "s3": ("s3", "S3"),
    "s3a": ("s3", "S3"),
    "s3n": ("s3", None),
    "gs": ("gs", "GCS"),
    "gcs": ("gs", None),
    "abfs": ("abfs", "AZURE"),
    "wasb": ("abfs", "AZURE"),
    "abfss": ("abfs", "AZURE"),
    "wasbs": ("abfs", "AZURE"),
}
BUCKET_SCHEMES = frozenset({"s3", "gs"})

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.DOTALL)


def _written(uri: str) -> tuple[str, str]:
    """``(scheme as written, lower case; rest)``; ``("", uri)`` when there is none."""
    m = _SCHEME_RE.match(uri)
    return (m.group(1).lower(), m.group(2)) if m else ("", uri)


def split_uri(uri: str) -> tuple[str, str]:
    """``(scheme, rest)``, the scheme read through :data:`SCHEMES`; ``("", uri)`` if none.

    ``rest`` follows ``scheme://``: ``bucket/key``, or for ``file`` a path with one
    leading slash (``/x``, ``file:/x``, ``file:///x``, ``file://localhost/x`` all
    give ``("file", "/x")``; ``file://host/x`` gives ``"host/x"``, which callers refuse).
    """
    if uri.startswith("/"):
        return "file", "/" + uri.lstrip("/")
    written, rest = _written(uri)
    if not written:
        return "", uri
    scheme = SCHEMES.get(written, (written, None))[0]
    if scheme == "file":
        if rest.startswith("//localhost/"):
            rest = rest[len("//localhost") :]
        elif rest.startswith("//") and not rest.startswith("///"):
            return scheme, rest[2:]
        return (scheme, "/" + rest.lstrip("/")) if rest.startswith("/") else ("", uri)
    return (scheme, rest[2:]) if rest.startswith("//") else ("", uri)


def storage_type_of(uri: str) -> str | None:
    """The Polaris StorageType whose prefixes ``uri`` starts with (FILE: any ``file:/``
    or ``/``, as Polaris's FILE check), if any."""
    written, rest = _written(uri)
    if uri.startswith("/") or (written == "file" and rest.startswith("/")):
        return "FILE"
    kind = SCHEMES.get(written, ("", None))[1]
    return kind if kind != "FILE" and rest.startswith("//") else None


def type_prefixes(kind: str) -> tuple[str, ...]:
    """The location prefixes Polaris's StorageType ``kind`` admits (``s3://``, ``s3a://``)."""
    return tuple(f"{s}://" for s, (_, t) in SCHEMES.items() if t == kind)


def azure_parts(authority: str) -> tuple[str, str, str]:
    """``(container, account, endpoint)`` of ``container@account.endpoint``, as
    Polaris's ``AzureLocation`` splits it; ValueError when a part is missing."""
    container, at, host = authority.partition("@")
    account, dot, endpoint = host.partition(".")
    if not (at and container and dot and account and endpoint):
        raise ValueError("not container@account.host")
    return container, account, endpoint


@dataclass(frozen=True, slots=True)
class Location:
    """A location taken apart; equal Locations are one location. ``store`` is the part
    of the authority compared (bucket, Azure's ``container@account``, host; empty
    for local files and a whole scheme), ``authority`` as written, for messages."""

    scheme: str
    store: str
    segments: tuple[str, ...]
    authority: str = field(default="", compare=False)

    def __str__(self) -> str:
        path = "/".join(self.segments)
        if self.scheme == "file":
            return f"file:///{path}"
        return f"{self.scheme}://{self.authority}" + (f"/{path}" if path else "")

    @property
    def path(self) -> str:
        """The absolute path of a local location."""
        return "/" + "/".join(self.segments)

    def contains(self, other: Location, *, strictly: bool = False) -> bool:
        """Whether ``other`` is this location or (``strictly``: only) lies under it;
        a whole scheme (``s3://``) contains all of it."""
        n = len(self.segments)
        return (
            other.scheme == self.scheme
            and (other.store == self.store or not (self.store or self.segments))
            and other.segments[:n] == self.segments
            and (len(other.segments) > n or not strictly)
        )


def parse_location(uri: str, *, directory: bool = False) -> Location:
    """``uri`` as a :class:`Location`, ValueError(reason) if it is none. ``directory``:
    trailing slashes do not count (a file's path keeps them, as an empty last name)."""
    scheme, rest = split_uri(uri)
    if not scheme:
        raise ValueError("not a URI or absolute path")
    if scheme == "file":
        if not rest.startswith("/"):
            raise ValueError("file URI with a host")
        authority, path = "", rest[1:]
    else:
        authority, _, path = rest.partition("/")
    store = authority
    if scheme == "abfs":
        # Azure's account (a DNS name) and container names know no case.
        store = authority.lower()
        if "@" in store:
            with suppress(ValueError):  # else compared as written
                container, account, _ = azure_parts(store)
                store = f"{container}@{account}"
    if directory:
        path = path.rstrip("/")
    return Location(scheme, store, tuple(path.split("/")) if path else (), authority)


# C0 and C1 controls and DEL: one regex search instead of a Python test per character.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A dot, slash or backslash percent-encoded: a client or store that decodes once reads
# another path than the text (``%2e%2e`` as ``..``, ``a%2fb`` as ``a/b``).
_ENCODED_RE = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
_TRICK_SEGMENTS = {"..": "'..' segment", ".": "'.' segment", "": "empty segment ('//')"}


def checked_location(uri: str, *, directory: bool = False) -> Location:
    """``uri`` as a Location that checking and deleting read alike, ValueError(reason)
    otherwise: a NUL or control character, a backslash, a percent-encoded dot, slash
    or backslash, a ``.``, ``..`` or empty segment, an object store without a bucket.
    ``directory``: as :func:`parse_location` (trailing slashes do not count)."""
    if "\x00" in uri:
        raise ValueError("NUL byte")
    if _CONTROL_RE.search(uri):
        raise ValueError("control character")
    if "\\" in uri:
        raise ValueError("backslash (some stores read it as '/')")
    encoded = _ENCODED_RE.search(uri)
    if encoded:
        raise ValueError(f"percent-encoded {encoded.group(0)!r} (a store may decode it)")
    loc = parse_location(uri, directory=directory)
    if loc.scheme != "file" and not loc.authority:
        raise ValueError("no bucket or host")
    if not _TRICK_SEGMENTS.keys().isdisjoint(loc.segments):
        # The first offending segment, in path order.
        raise ValueError(next(_TRICK_SEGMENTS[s] for s in loc.segments if s in _TRICK_SEGMENTS))
    return loc


def _directory(uri: str) -> Location | None:
    try:
        return parse_location(uri, directory=True)
    except ValueError:
        return None


def same_location(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one location (False when either is none)."""
    left, right = _directory(a), _directory(b)
    return left is not None and left == right


def location_within(uri: str, prefix: str) -> bool:
    """Whether ``uri`` is ``prefix`` or lies under it at a ``/`` boundary."""
    inner, outer = _directory(uri), _directory(prefix)
    return inner is not None and outer is not None and outer.contains(inner)


def normalize_uri(uri: str) -> str:
    """``uri`` in one spelling (``s3a://b/k/`` as ``s3://b/k``, ``/x`` as ``file:///x``)."""
    loc = _directory(uri)
    return uri if loc is None else str(loc)


def bucket_and_path(location: str, scheme: str, cloud: str) -> tuple[str, str]:
    """``(bucket, path)`` of an object-store ``location`` of ``scheme`` (``cloud`` names it
    in errors); the path without slashes at either end. StorageError otherwise."""
    got, rest = split_uri(location)
    if got != scheme:
        raise StorageError(f"not a {cloud} location: {location!r}")
    bucket, _, path = rest.partition("/")
    if not bucket:
        raise StorageError(f"no bucket in {location!r}")
    return bucket, path.strip("/")
