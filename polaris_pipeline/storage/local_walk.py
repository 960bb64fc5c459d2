"""Open a local file's parent directory without following a symbolic link below a trusted root.

A directory inside a table can be swapped for a symlink after the guard's check, so a
delete never goes by the path string: it opens the deepest trusted root holding the path
(the table's roots, resolved at the delete's start: a link above a root, such as
``/tmp -> /private/tmp``, is the operator's and is followed), then each directory below
with ``O_NOFOLLOW``, and unlinks relative to the last. A swapped component raises
:class:`UnsafeComponent`. With no root holding the path the walk starts at ``/``, following
no link at all.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from typing import Self

from polaris_pipeline.storage.uri import split_uri

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Every component below the trusted root: a symlink fails with ELOOP instead of being followed.
_BELOW_ROOT_FLAGS = _DIR_FLAGS | os.O_NOFOLLOW
_NOT_NAMES = frozenset(("", ".", ".."))


class UnsafeComponent(Exception):
    """A directory on a local path is a symlink, not a directory, or a dot segment."""


def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")[1:]) if path.startswith("/") else ()


def _not_a_directory(name: str, dir_fd: int) -> str:
    try:
        link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        link = False
    if link:
        return f"directory {name!r} on its path is a symbolic link (never followed)"
    return f"{name!r} on its path is not a directory"


class TrustedRoots:
    """Local directories a walk may start from, each resolved once, here: ``roots`` (URIs or
    absolute paths; other schemes ignored), each kept with its spelling (to match a path spelt
    alike) and its real path (what is opened).
    """

    def __init__(self, roots: Iterable[str] = ()) -> None:
        anchors: dict[tuple[str, ...], str] = {}
        for root in roots:
            scheme, path = split_uri(root)
            parts = tuple(p for p in _parts(path) if p) if scheme == "file" else ()
            if parts:
                anchors.setdefault(parts, os.path.realpath("/" + "/".join(parts)))
        # Deepest first: the nearest root wins.
        self._anchors = sorted(anchors.items(), key=lambda a: len(a[0]), reverse=True)

    def start(self, parts: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """``(real directory to open, components below it)`` for the directory ``parts``."""
        for root, real in self._anchors:
            if parts[: len(root)] == root:
                return real, parts[len(root) :]
        return "/", parts


class ParentDir:
    """The open parent directory of a local path, walked from a trusted root; a context
    manager that closes it. ``name`` is the file's name within it."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name

    @classmethod
    def open(cls, path: str, roots: TrustedRoots) -> Self:
        """The parent of the absolute local ``path``.

        Raises FileNotFoundError when a directory on the way is missing,
        :class:`UnsafeComponent` when one is a symlink or not a directory (or the path
        has a dot or empty segment below its root), another OSError otherwise.
        """
        parts = _parts(path)
        if not parts or parts[-1] in _NOT_NAMES:
            raise UnsafeComponent(f"{path!r} names no file")
        start, below = roots.start(parts[:-1])
        bad = next((p for p in below if p in _NOT_NAMES), None)
        if bad is not None:
            raise UnsafeComponent(f"the path has a {bad!r} segment")
        fd = os.open(start, _DIR_FLAGS)
        try:
            for name in below:
                try:
                    child = os.open(name, _BELOW_ROOT_FLAGS, dir_fd=fd)
                except OSError as e:
                    # Linux says ENOTDIR for a link opened with O_DIRECTORY, others ELOOP.
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise UnsafeComponent(_not_a_directory(name, fd)) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, parts[-1])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
