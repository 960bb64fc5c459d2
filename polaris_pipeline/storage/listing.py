"""Everything under one prefix, listed in pages: bounded in memory whatever its size.

fsspec's ``find``/``ls`` return everything at once, so ``list_prefix`` pages itself:
S3 by ``ListObjectsV2`` through ``call_s3``; local files one ``os.scandir`` at a time,
never following a symlink (a symlinked directory is listed as the link, which a delete
unlinks, never its target); GCS and Azure one ``ls`` level at a time, its cache dropped.
Each URI is the prefix as the catalog wrote it plus the relative path, so the guard
judges it in the prefix's spelling. A failing listing raises ``StorageError`` there:
earlier pages were whole, nothing after is yielded.

``list_directory`` yields one level (files and ``SubDirectory``), for walks that must
not descend into some subtrees (the leak report's, around live tables).
``remove_empty_directories`` removes a local prefix's empty directories bottom up.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.options import is_s3
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import split_uri

PAGE_SIZE = 1000  # ListObjectsV2's largest page; one delete request per page
# The keys a listing's entry may carry its last-modified time under, by store.
_MTIME_KEYS = ("LastModified", "last_modified", "updated", "mtime", "timeCreated", "created")


@dataclass(frozen=True, slots=True)
class ListedObject:
    uri: str
    size: int | None
    # Milliseconds since the epoch; None when the store gave none (then kept).
    mtime_ms: int | None


@dataclass(frozen=True, slots=True)
class SubDirectory:
    """A directory (an S3 common prefix) directly in a listed directory."""

    uri: str


def _join(prefix_uri: str, relative: str) -> str:
    return f"{prefix_uri.rstrip('/')}/{relative}"


def list_prefix(
    resolver: StorageResolver,
    prefix_uri: str,
    *,
    page_size: int = PAGE_SIZE,
    seen_on_error: bool = False,
) -> Iterator[list[ListedObject]]:
    """Pages of every object under ``prefix_uri`` (a directory: never the prefix itself).

    ``seen_on_error``: when the listing fails, the short page listed before the
    failure is yielded first, then the error raised (for counting, never deleting).
    """
    size = max(1, page_size)
    fs, path = resolver.filesystem(prefix_uri)
    base = path.rstrip("/")
    if not base:
        raise StorageError("refusing to list a bucket or filesystem root")
    objects: Iterator[ListedObject]
    if isinstance(fs, LocalFileSystem):
        # A prefix that is a file is an error here, not an empty directory.
        objects = _walk(
            lambda uri, path: _local_level(resolver, uri, path, gone=FileNotFoundError),
            prefix_uri,
            base,
        )
    elif is_s3(fs):
        if "/" not in base:
            raise StorageError("refusing to list a whole bucket")
        listed = _s3_level(resolver, fs, prefix_uri, base, size, recursive=True)
        objects = (obj for obj in listed if isinstance(obj, ListedObject))
    else:
        objects = _walk(lambda uri, path: _ls_level(resolver, fs, uri, path), prefix_uri, base)
    page: list[ListedObject] = []
    try:
        for obj in objects:
            page.append(obj)
            if len(page) >= size:
                yield page
                page = []
    except StorageError:
        if seen_on_error and page:
            yield page  # a report counts what it saw; a delete never gets here (the default)
        raise
    if page:
        yield page


def list_directory(
    resolver: StorageResolver, directory_uri: str
) -> Iterator[ListedObject | SubDirectory]:
    """The files and subdirectories directly in ``directory_uri``, one level only.

    Nothing when the directory does not exist. A listing that fails raises
    ``StorageError`` where it failed: what was yielded before it stands.
    """
    fs, path = resolver.filesystem(directory_uri)
    base = path.rstrip("/")
    if isinstance(fs, LocalFileSystem):
        yield from _local_level(resolver, directory_uri, base or "/")
    elif is_s3(fs):
        yield from _s3_level(resolver, fs, directory_uri, base, PAGE_SIZE)
    else:
        yield from _ls_level(resolver, fs, directory_uri, base)


def _walk(
    level: Callable[[str, str], Iterator[ListedObject | SubDirectory]],
    prefix_uri: str,
    base: str,
) -> Iterator[ListedObject]:
    """Every object under ``base`` (the path of ``prefix_uri``), depth first, by the
    one-level listings ``level(directory_uri, directory_path)`` gives."""
    root = prefix_uri.rstrip("/")
    pending = [root]  # directories still to list, as URIs under the prefix
    while pending:
        directory_uri = pending.pop()
        for entry in level(directory_uri, base + directory_uri[len(root) :]):
            if isinstance(entry, SubDirectory):
                pending.append(entry.uri)
            else:
                yield entry


def _local_level(
    resolver: StorageResolver,
    directory_uri: str,
    base: str,
    *,
    gone: type[OSError] | tuple[type[OSError], ...] = (FileNotFoundError, NotADirectoryError),
) -> Iterator[ListedObject | SubDirectory]:
    """One ``os.scandir``, never following a symlink; nothing more once it raises ``gone``
    (the directory went away)."""
    try:
        with os.scandir(base) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                uri = _join(directory_uri, entry.name)
                if stat.S_ISDIR(st.st_mode):
                    yield SubDirectory(uri)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    yield ListedObject(uri, st.st_size, st.st_mtime_ns // 1_000_000)
    except gone:
        return
    except OSError as e:
        raise StorageError(
            f"listing {resolver.redact(base)} failed: {type(e).__name__}: {e.strerror or e}"
        ) from None


def _s3_level(
    resolver: StorageResolver,
    fs: Any,
    directory_uri: str,
    base: str,
    page_size: int,
    *,
    recursive: bool = False,
) -> Iterator[ListedObject | SubDirectory]:
    """The keys directly under the directory ``base`` and its common prefixes, or with
    ``recursive`` every key under it (one flat listing, no common prefixes)."""
    bucket, _, key = base.partition("/")
    start = f"{key}/" if key else ""
    delimiter = {} if recursive else {"Delimiter": "/"}
    for response in _s3_pages(resolver, fs, bucket, start, page_size, **delimiter):
        for common in response.get("CommonPrefixes", []):
            name = common.get("Prefix", "")[len(start) :].strip("/")
            if name:
                yield SubDirectory(_join(directory_uri, name))
        for item in response.get("Contents", []):
            full = item.get("Key", "")
            name = full[len(start) :]
            # Not the directory's own marker object, nor (one level) a deeper key.
            if full.startswith(start) and name and (recursive or "/" not in name):
                uri = _join(directory_uri, name)
                yield ListedObject(uri, item.get("Size"), _ms(item.get("LastModified")))


def _s3_pages(
    resolver: StorageResolver, fs: Any, bucket: str, start: str, page_size: int, **more: str
) -> Iterator[dict[str, Any]]:
    """The ``list_objects_v2`` responses for keys under ``start``; none when the bucket
    is gone (NoSuchBucket: nothing is left)."""
    token: str | None = None
    while True:
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": start, "MaxKeys": page_size, **more}
        if token:
            args["ContinuationToken"] = token
        try:
            response = fs.call_s3("list_objects_v2", **args)
        except FileNotFoundError:
            return
        except Exception as e:
            raise StorageError(
                f"listing s3://{bucket}/{start} failed: {resolver.describe(e)}"
            ) from None
        yield response
        token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
        if not token:
            return


def _ls_level(
    resolver: StorageResolver, fs: AbstractFileSystem, directory_uri: str, base: str
) -> Iterator[ListedObject | SubDirectory]:
    """One ``fs.ls`` of the directory ``base``; nothing when it is gone."""
    try:
        entries = fs.ls(base, detail=True)
    except FileNotFoundError:
        return
    except Exception as e:
        raise StorageError(
            f"listing {resolver.redact(base)} failed: {resolver.describe(e)}"
        ) from None
    finally:
        # The listing cache would otherwise keep every directory listed.
        fs.invalidate_cache(base)
    for entry in entries:
        name = str(entry.get("name", "")).rstrip("/")
        if name == base or not name.startswith(base + "/"):
            continue  # the directory itself (a marker object), or not under it
        uri = _join(directory_uri, name[len(base) + 1 :])
        if entry.get("type") == "directory":
            yield SubDirectory(uri)
        else:
            mtime = next((entry[k] for k in _MTIME_KEYS if entry.get(k) is not None), None)
            yield ListedObject(uri, entry.get("size"), _ms(mtime))


def _ms(value: Any) -> int | None:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 1000)
    if isinstance(value, str) and value.strip():
        try:
            return int(
                datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp() * 1000
            )
        except ValueError:
            return None
    return None


# -- local files ---------------------------------------------------------------------


def remove_empty_directories(prefix_uri: str) -> int:
    """Remove the empty directories under a local prefix, bottom up, then the prefix
    itself when empty; returns how many. Never follows a symlink, not even one swapped
    in during the walk: each directory is removed relative to its parent's handle
    (``os.fwalk``, which checks every directory it opens is the one it listed); a
    directory that is not empty (or fails) stays."""
    scheme, path = split_uri(prefix_uri)
    if scheme != "file" or not path.rstrip("/"):
        return 0
    base = path.rstrip("/")
    removed = 0
    for _, subdirectories, _, dir_fd in os.fwalk(base, topdown=False, follow_symlinks=False):
        for name in subdirectories:
            try:
                os.rmdir(name, dir_fd=dir_fd)
            except OSError:
                continue
            removed += 1
    try:
        os.rmdir(base)
    except OSError:
        return removed
    return removed + 1
