"""Delete files by literal path, reporting the outcome of every path.

Never through a call that expands globs (fsspec's and s3fs's ``rm`` would delete
``a1.parquet`` for ``a[1].parquet``):

- S3: one ``DeleteObjects`` per (bucket, up to 1000 keys), its per-key ``Errors`` read
  (s3fs's ``_bulk_delete`` drops them silently).
- Local: ``os.unlink`` relative to the parent opened without following a link below the
  table's root (``storage.local_walk``), so a directory swapped for a symlink after the
  guard's check fails the path; directories are refused. With ``sidecar_check``, each
  path's Hadoop ``.<name>.crc`` sidecar goes too when the check admits it.
- Others: ``fs.rm_file(path)``.

On a store that keeps deleted objects (``RetentionProbe``, asked before the first delete
per bucket) deletions are reported ``retained`` or ``retention_unknown``, never freed.
No request names a version: only the current one is ever deleted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.local_walk import ParentDir, TrustedRoots, UnsafeComponent
from polaris_pipeline.storage.options import is_s3
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.retention_probe import Retention
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.formatting import PATH_SAMPLE

MAX_KEYS_PER_REQUEST = 1000  # the S3 DeleteObjects limit

_GLOB_CHARS = frozenset("*?[")


@dataclass
class DeleteReport:
    """What happened to each path of a delete. ``bytes_freed`` is None when a deleted file's size
    was unknown (S3 sizes are not fetched: a request per key). ``requests``: DeleteObjects
    calls for S3, files elsewhere.
    """

    deleted: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    bytes_freed: int | None = 0
    requests: int = 0
    # Hadoop checksum sidecars, kept apart from ``deleted`` so file counts stay
    # those of the table; their bytes are in ``bytes_freed`` too.
    sidecars: list[str] = field(default_factory=list)
    sidecar_bytes: int = 0
    # The size of each deleted path (sidecars too) where the delete learnt it (a
    # local lstat), for the deletion record; S3's DeleteObjects says none.
    sizes: dict[str, int] = field(default_factory=dict)
    # Deleted paths (also in ``deleted``) whose store keeps their bytes (versioning,
    # soft delete), and those whose store would not say whether it does. Their bytes
    # are never in ``bytes_freed``; ``bytes_retained`` is None when a kept object's
    # size was not known.
    retained: list[str] = field(default_factory=list)
    retention_unknown: list[str] = field(default_factory=list)
    bytes_retained: int | None = 0

    @property
    def ok(self) -> bool:
        """No path failed (missing paths are fine: files are shared across snapshots)."""
        return not self.failed

    @property
    def freed(self) -> list[str]:
        """The deleted paths whose bytes are freed: neither kept by their store nor on a
        store that would not say whether it keeps them."""
        not_freed = {*self.retained, *self.retention_unknown}
        return [uri for uri in self.deleted if uri not in not_freed]

    def sample_failed_into(self, sample: dict[str, str]) -> None:
        """Add this delete's failures to ``sample`` while it holds fewer than
        ``PATH_SAMPLE`` (the caller counts them all)."""
        room = max(0, PATH_SAMPLE - len(sample))
        sample.update(list(self.failed.items())[:room])

    def _add_bytes(self, n: int | None) -> None:
        if n is None or self.bytes_freed is None:
            self.bytes_freed = None
        else:
            self.bytes_freed += n


def is_crc_sidecar_name(name: str) -> bool:
    """Whether a file name is Hadoop's checksum-file form ``.NAME.crc``."""
    return len(name) > len("..crc") and name.startswith(".") and name.endswith(".crc")


def crc_sidecar(uri: str) -> str | None:
    """The Hadoop checksum sidecar of the local file ``uri``: ``<dir>/.<name>.crc``.

    Hadoop's local filesystem (Polaris's FileIO for ``file:``) writes one beside every file and
    deletes it with the file. None for other schemes and for a checksum file itself. It keeps
    the URI's own spelling, so the guard judges it exactly as it judged the file.
    """
    scheme, _ = split_uri(uri)
    if scheme != "file":
        return None
    head, sep, name = uri.rpartition("/")
    if not sep or not name or is_crc_sidecar_name(name):
        return None
    return f"{head}/.{name}.crc"


def bulk_delete(
    resolver: StorageResolver,
    uris: Sequence[str],
    *,
    chunk_size: int = MAX_KEYS_PER_REQUEST,
    check: Callable[[], None] | None = None,
    sidecar_check: Callable[[str], bool] | None = None,
    report: DeleteReport | None = None,
    local_roots: Sequence[str] = (),
) -> DeleteReport:
    """Delete ``uris`` (literal paths a ``PathGuard`` admitted), returning each one's outcome.

    Never raises for one path: its error goes to ``failed``, masked. ``check()`` runs before
    each request (S3) or file and may raise to stop at once (a lapsed lease deletes nothing
    more); ``report``, filled in place, still says what went before. ``sidecar_check`` admits
    a local file's checksum sidecar (none touched without it), looked for also when the file
    was already missing: a crash between the two unlinks leaves only the sidecar.
    ``local_roots`` start a local delete's walk (``storage.local_walk``).
    """
    guard_step = check or (lambda: None)
    if not 1 <= chunk_size <= MAX_KEYS_PER_REQUEST:
        raise ValueError(f"chunk_size must be between 1 and {MAX_KEYS_PER_REQUEST}")
    report = report if report is not None else DeleteReport()
    trusted = TrustedRoots(local_roots)
    # Group by filesystem (and bucket, for S3), keeping first-seen order; the same
    # URI given twice is deleted once.
    groups: dict[tuple[int, str], tuple[AbstractFileSystem, list[tuple[str, str]]]] = {}
    for uri in dict.fromkeys(uris):
        try:
            fs, path = resolver.filesystem(uri)
        except StorageError as e:
            report.failed[uri] = str(e)
            continue
        # The bucket (S3, GCS) or container (Azure): where versioning is decided.
        bucket = "" if isinstance(fs, LocalFileSystem) else path.split("/", 1)[0]
        groups.setdefault((id(fs), bucket), (fs, []))[1].append((uri, path))

    for (_, bucket), (fs, items) in groups.items():
        # Asked before the bucket's first delete, once per bucket for the resolver.
        retention = resolver.retention.retention(fs, bucket)
        deleted_before, freed_before = len(report.deleted), report.bytes_freed
        if is_s3(fs):
            for start in range(0, len(items), chunk_size):
                guard_step()
                _delete_s3_chunk(resolver, fs, bucket, items[start : start + chunk_size], report)
        elif isinstance(fs, LocalFileSystem):
            for uri, path in items:
                guard_step()
                _delete_local(resolver, trusted, sidecar_check, uri, path, report)
        else:
            for uri, path in items:
                guard_step()
                _delete_other(resolver, fs, uri, path, report)
        if retention is not Retention.FREED:
            # Nothing here was freed: whatever sizes the deletes counted are kept bytes.
            gone = report.deleted[deleted_before:]
            kept = report.retained if retention is Retention.KEPT else report.retention_unknown
            kept.extend(gone)
            report.bytes_freed = freed_before
            if gone and retention is Retention.KEPT:
                report.bytes_retained = None
    return report


# -- S3 ------------------------------------------------------------------------------


def _delete_s3_chunk(
    resolver: StorageResolver,
    fs: Any,
    bucket: str,
    chunk: list[tuple[str, str]],
    report: DeleteReport,
) -> None:
    # Several URIs can name one key (s3:// and s3a://); each is reported.
    by_key: dict[str, list[str]] = {}
    for uri, path in chunk:
        key = path.split("/", 1)[1] if "/" in path else ""
        if not key:
            report.failed[uri] = "no object key (a bucket is never deleted)"
            continue
        by_key.setdefault(key, []).append(uri)
    if not by_key:
        return

    report.requests += 1
    try:
        # call_s3 is s3fs's public synchronous entry to its aiobotocore client; it
        # adds s3fs's retries and request-wide options (RequestPayer, SSE...).
        response = fs.call_s3(
            "delete_objects",
            Bucket=bucket,
            Delete={"Objects": [{"Key": k} for k in by_key], "Quiet": False},
        )
    except FileNotFoundError:
        # NoSuchBucket: nothing under it exists any more.
        for uris in by_key.values():
            report.missing.extend(uris)
        return
    except Exception as e:
        reason = f"DeleteObjects failed: {resolver.describe(e)}"
        for uris in by_key.values():
            for uri in uris:
                report.failed[uri] = reason
        return
    finally:
        # Whatever the outcome, listings cached for these paths may be stale now.
        for key in by_key:
            fs.invalidate_cache(f"{bucket}/{key}")

    answered: set[str] = set()
    for error in response.get("Errors", []):
        key = error.get("Key", "")
        if key not in by_key:
            continue
        answered.add(key)
        code = error.get("Code", "Error")
        if code == "NoSuchKey":
            report.missing.extend(by_key[key])
            continue
        reason = resolver.redact(f"{code}: {error.get('Message', '')}".rstrip(": "))
        for uri in by_key[key]:
            report.failed[uri] = reason
    deleted_any = False
    for item in response.get("Deleted", []):
        key = item.get("Key", "")
        if key in by_key and key not in answered:
            answered.add(key)
            # S3 reports a key that did not exist as deleted; without a size check
            # beforehand the two cannot be told apart, so both count as deleted.
            report.deleted.extend(by_key[key])
            deleted_any = True
    for key, uris in by_key.items():
        if key not in answered:
            for uri in uris:
                report.failed[uri] = "DeleteObjects reported no result for this key"
    if deleted_any:
        report._add_bytes(None)


# -- local files ---------------------------------------------------------------------


def _delete_local(
    resolver: StorageResolver,
    roots: TrustedRoots,
    sidecar_check: Callable[[str], bool] | None,
    uri: str,
    path: str,
    report: DeleteReport,
) -> None:
    """Unlink ``path`` (and its admitted sidecar) relative to its parent directory,
    opened without following a link below its trusted root (``local_walk``)."""
    try:
        parent = ParentDir.open(path, roots)
    except FileNotFoundError:
        # No parent directory: neither the file nor its sidecar is there.
        report.missing.append(uri)
        return
    except UnsafeComponent as e:
        report.failed[uri] = f"not deleted: {e}"
        return
    except OSError as e:
        report.failed[uri] = _os_reason(resolver, e)
        return
    with parent:
        try:
            if _unlink(resolver, uri, parent.fd, parent.name, report, regular_only=False):
                report.deleted.append(uri)
        except FileNotFoundError:
            report.missing.append(uri)
        # A file that could not be deleted keeps its checksum too. A sidecar is looked
        # for whether its file was deleted or found missing: a crash between the two
        # unlinks leaves only the sidecar, and the retry must finish it.
        if sidecar_check is not None and uri not in report.failed:
            _delete_sidecar(resolver, uri, parent, report, sidecar_check)


def _unlink(
    resolver: StorageResolver,
    uri: str,
    dir_fd: int,
    name: str,
    report: DeleteReport,
    *,
    regular_only: bool,
) -> bool:
    """Unlink ``name`` in the directory ``dir_fd`` (``uri`` in ``report``) after an lstat;
    its size counted in ``report``. False when it failed (in ``report.failed``: a
    directory too) or, with ``regular_only``, is anything but a regular file (left
    alone). FileNotFoundError when it is gone."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise
    except OSError as e:
        report.failed[uri] = _os_reason(resolver, e)
        return False
    if regular_only and not stat.S_ISREG(st.st_mode):
        return False
    if stat.S_ISDIR(st.st_mode):
        report.failed[uri] = "is a directory (directories are never deleted)"
        return False
    report.requests += 1
    try:
        # unlink removes a symlink itself, never its target.
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        report.failed[uri] = _os_reason(resolver, e)
        return False
    report.sizes[uri] = st.st_size
    report._add_bytes(st.st_size)
    return True


def present_crc_sidecar(uri: str) -> str | None:
    """``crc_sidecar(uri)`` when it exists as a regular file (what Hadoop writes): what a
    dry run lists. A directory or a symlink by that name is not a sidecar and is never
    deleted.
    """
    sidecar = crc_sidecar(uri)
    if sidecar is None:
        return None
    try:
        st = os.lstat(split_uri(sidecar)[1])
    except OSError:
        return None
    return sidecar if stat.S_ISREG(st.st_mode) else None


def _delete_sidecar(
    resolver: StorageResolver,
    uri: str,
    parent: ParentDir,
    report: DeleteReport,
    sidecar_check: Callable[[str], bool],
) -> None:
    sidecar = crc_sidecar(uri)
    if sidecar is None:
        return
    name = f".{parent.name}.crc"
    try:
        st = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or not sidecar_check(sidecar):
        return
    # Only a regular file: one replaced since it was looked up is not ours to delete.
    with suppress(FileNotFoundError):
        if _unlink(resolver, sidecar, parent.fd, name, report, regular_only=True):
            report.sidecars.append(sidecar)
            report.sidecar_bytes += report.sizes[sidecar]


def _os_reason(resolver: StorageResolver, e: OSError) -> str:
    # strerror without the filename: the report is keyed by the path already.
    return resolver.redact(f"{type(e).__name__}: {e.strerror or e}")


# -- other filesystems ---------------------------------------------------------------


def _delete_other(
    resolver: StorageResolver,
    fs: AbstractFileSystem,
    uri: str,
    path: str,
    report: DeleteReport,
) -> None:
    if _GLOB_CHARS.intersection(path) and _rm_file_may_glob(fs):
        report.failed[uri] = (
            f"{type(fs).__name__} has no literal single-file delete; "
            "refusing a path with glob characters"
        )
        return
    report.requests += 1
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        report.missing.append(uri)
    except Exception as e:
        report.failed[uri] = resolver.describe(e)
    else:
        report.deleted.append(uri)
        report._add_bytes(None)


def _rm_file_may_glob(fs: AbstractFileSystem) -> bool:
    # AsyncFileSystem's default _rm_file calls _rm, which expands globs; only an
    # implementation's own _rm_file is trusted to take the path literally.
    return isinstance(fs, AsyncFileSystem) and type(fs)._rm_file is AsyncFileSystem._rm_file
