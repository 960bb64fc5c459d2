"""A pyiceberg ``InputFile`` over a ``StorageResolver``'s filesystem.

Kept apart from ``resolve`` so that importing the resolver does not import
pyiceberg (see ``StorageResolver.input_file``). Built on pyiceberg's base
``InputFile``, not its ``FsspecInputFile``: that module imports pyiceberg's REST
catalog too, about a tenth of a second of every table run's start. It reaches the
resolver only through ``FileReach``, so it imports nothing of ``resolve``.
"""

from __future__ import annotations

from typing import Protocol

from fsspec import AbstractFileSystem
from pyiceberg.io import InputFile, InputStream

from polaris_pipeline.errors import StorageError


class FileReach(Protocol):
    """What a file read needs of its ``StorageResolver``: a stat and the error text."""

    def size(self, uri: str) -> int | None: ...

    def exists(self, uri: str) -> bool: ...

    def redact(self, text: str) -> str: ...

    def describe(self, exc: BaseException) -> str: ...


class ResolvedInputFile(InputFile):
    """A pyiceberg ``InputFile`` read through ``fs`` whose ``location`` stays the original URI:
    pyiceberg reads ``location`` (a ``.gz.metadata.json`` suffix) where ``fs`` wants its own path.
    """

    def __init__(
        self, location: str, fs: AbstractFileSystem, path: str, resolver: FileReach
    ) -> None:
        super().__init__(location=location)
        self._fs = fs
        self._path = path
        self._resolver = resolver

    def __len__(self) -> int:
        size = self._resolver.size(self.location)
        if size is None:
            raise FileNotFoundError(2, "No such file", self.location)
        return size

    def exists(self) -> bool:
        return self._resolver.exists(self.location)

    def open(self, seekable: bool = True) -> InputStream:
        try:
            stream: InputStream = self._fs.open(self._path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(2, "No such file", self.location) from None
        except Exception as e:
            raise StorageError(
                f"cannot open {self._resolver.redact(self.location)}: {self._resolver.describe(e)}"
            ) from None
        return stream
