"""The deletion record: one JSON Lines file per attempt saying what it deleted.

Polaris keeps no trace of what a purge deleted and Dagster keeps only counts. With the
``deletion_record`` setting (an fsspec URI prefix) each attempt that deletes anything
writes ``<prefix>/<realm>/<task id>/attempt-<n>-<executor>-<timestamp>.jsonl``, each
reclaim of a leaked root ``<prefix>/<realm>/reclaims/<catalog>/reclaim-<timestamp>.jsonl``
(header ``"kind": "reclaim"``):

- a ``header`` line, flushed before the first delete: a record that cannot be written
  stops the attempt before anything is deleted;
- one ``path`` line per path (``deleted``, ``already gone``, ``refused`` with its reason,
  ``failed`` with its error; size when known; chunk end time), written after each chunk,
  so a crash leaves every chunk done before it;
- a ``footer`` line (totals, status), written before the row is completed or failed.

A purge ended because its table came back writes ``restore-<timestamp>.json`` there
instead (``write_restore_record``). Only paths and redacted error texts go in, never an
option or credential. Local files are appended and fsync'd per chunk; object stores have
no append, so the object is rewritten whole per chunk (still readable after a crash).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.delete import DeleteReport
from polaris_pipeline.tasks.formatting import json_id

if TYPE_CHECKING:
    from polaris_pipeline.storage.resolve import StorageResolver
    from polaris_pipeline.tasks.model import TaskRow

DELETED = "deleted"
ALREADY_GONE = "already gone"
REFUSED = "refused"
FAILED = "failed"
RESULTS = (DELETED, ALREADY_GONE, REFUSED, FAILED)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def safe_name(text: str) -> str:
    """``text`` as one path segment: anything but letters, digits, ``.``, ``_``, ``-`` is ``_``."""
    return _UNSAFE.sub("_", text).strip("._") or "_"


def _unique_stamp(started: datetime) -> str:
    """``<timestamp>-<rand>`` of a record's file name: when it started, and a random
    part keeping apart two records started in the same microsecond."""
    return f"{started.strftime('%Y%m%dT%H%M%S%fZ')}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class RecordHeader:
    """Who is deleting what: the record's first line."""

    realm_id: str
    task_id: int
    task_name: str | None
    task_type: str | None
    attempt: int
    executor_id: str
    run_id: str | None = None

    def file_name(self, started: datetime) -> str:
        """``<realm>/<task id>/attempt-<n>-<executor>-<timestamp>-<rand>.jsonl``.

        The random part keeps two records of one attempt apart (a table's attempt
        and its unreferenced phase, when both delete within the same microsecond).
        """
        return (
            f"{safe_name(self.realm_id)}/{self.task_id}/attempt-{self.attempt}-"
            f"{safe_name(self.executor_id)}-{_unique_stamp(started)}.jsonl"
        )

    def fields(self) -> dict[str, Any]:
        """The header line's fields after ``record``."""
        return _header_fields(self)


@dataclass(frozen=True)
class ReclaimHeader:
    """A reclaim of one leaked table root, not a task attempt: the record's first line."""

    realm_id: str
    catalog: str
    catalog_id: int
    root: str
    min_age_days: float
    run_id: str | None = None

    def file_name(self, started: datetime) -> str:
        """``<realm>/reclaims/<catalog>/reclaim-<timestamp>-<rand>.jsonl`` (a task id is a
        number: ``reclaims`` never meets a task's directory)."""
        return (
            f"{safe_name(self.realm_id)}/reclaims/{safe_name(self.catalog)}/"
            f"reclaim-{_unique_stamp(started)}.jsonl"
        )

    def fields(self) -> dict[str, Any]:
        """The header line's fields after ``record``."""
        return {"kind": "reclaim", **_header_fields(self)}


# Entity ids use all 63 bits: written as strings, as the CLI's --json writes them, since
# a JSON number past 2**53 loses digits in jq 1.6 and in every reader of doubles.
_ID_FIELDS = ("task_id", "catalog_id")


def _header_fields(header: RecordHeader | ReclaimHeader) -> dict[str, Any]:
    """Every field of ``header`` in its order, ``realm_id`` written as ``realm`` and
    ids as strings (``tasks.formatting.json_id``)."""
    fields = dataclasses.asdict(header)
    for key in _ID_FIELDS:
        if key in fields:
            fields[key] = json_id(fields[key])
    return {"realm": fields.pop("realm_id"), **fields}


class DeletionRecord:
    """One attempt's (or reclaim's) record under ``prefix``, opened at its first delete.
    ``resolver`` is the static storage config's: the record is the deployment's, never
    reached with a task's scoped credentials.
    """

    def __init__(
        self, prefix: str, resolver: StorageResolver, header: RecordHeader | ReclaimHeader
    ) -> None:
        self._resolver = resolver
        self.header = header
        self._started = datetime.now(UTC)
        self.uri = f"{prefix.rstrip('/')}/{header.file_name(self._started)}"
        self._fs: AbstractFileSystem | None = None
        self._path = ""
        self._local: IO[str] | None = None
        self._buffer: list[str] = []  # object stores: everything, rewritten at each flush
        # Paths found gone by a stat before any delete: written with the next chunk,
        # or not at all when the attempt deletes nothing.
        self._gone: list[dict[str, Any]] = []
        # A path is said gone once per record: a lookup and the sidecar pass that
        # follows it both find a missing local file.
        self._said_gone: set[str] = set()
        self._totals = {result: 0 for result in RESULTS}
        self._bytes = 0
        self._unsized = 0  # deleted paths whose size nobody said (S3)
        self.closed = False

    @property
    def opened(self) -> bool:
        """Whether the header was written (the attempt deleted, or began to)."""
        return self._fs is not None

    # -- lines -----------------------------------------------------------------------

    def open(self) -> None:
        """Write and flush the header, once; raises StorageError when it cannot."""
        if self._fs is not None:
            return
        if self.closed:
            raise StorageError(f"deletion record {self.shown_uri} is already closed")
        try:
            self._fs, self._path = self._resolver.filesystem(self.uri)
        except StorageError as e:
            raise StorageError(f"deletion record {self.shown_uri}: {e}") from None
        self._write(
            [
                {
                    "record": "header",
                    **self.header.fields(),
                    "started": self._started.isoformat().replace("+00:00", "Z"),
                }
            ],
            header=True,
        )

    def add_report(
        self,
        report: DeleteReport,
        sizes: Mapping[str, int | None] | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        """One line per path of a delete chunk, flushed; raises StorageError when it cannot."""
        self.open()
        at = _now()
        lines: list[dict[str, Any]] = []
        known = {**(sizes or {}), **report.sizes}
        for uri in report.deleted:
            lines.append(self._line(uri, DELETED, at, size=known.get(uri)))
        for uri in report.sidecars:
            lines.append(self._line(uri, DELETED, at, size=known.get(uri), sidecar=True))
        for uri in report.missing:
            if uri not in self._said_gone:
                lines.append(self._line(uri, ALREADY_GONE, at))
        for uri, error in report.failed.items():
            lines.append(self._line(uri, FAILED, at, error=error))
        self._write(lines, redact)

    def note_gone(self, uri: str) -> None:
        """``uri`` was already gone when looked up; written with the next lines."""
        if uri not in self._said_gone:
            self._gone.append(self._line(uri, ALREADY_GONE, _now()))

    def add_refusals(
        self, refusals: Iterable[tuple[str, str]], redact: Callable[[str], str] | None = None
    ) -> None:
        """``(path, reason)`` lines for paths the guard refused (the attempt deleted others)."""
        at = _now()
        self._write(
            [self._line(path, REFUSED, at, reason=reason) for path, reason in refusals], redact
        )

    def close(
        self,
        status: str,
        error: str | None = None,
        redact: Callable[[str], str] | None = None,
        restored_as: str | None = None,
    ) -> None:
        """The footer (totals, status, ended); nothing when nothing was opened.
        ``restored_as``: the live entity a purge stopped for (its table came back)."""
        if self.closed:
            return
        try:
            if self._fs is not None:
                footer = {
                    "record": "footer",
                    "status": status,
                    "error": error,
                    **({"restored_as": restored_as} if restored_as is not None else {}),
                    "totals": dict(self._totals),
                    # Of the deleted paths whose size is known; the others counted apart.
                    "bytes_deleted": self._bytes,
                    "deleted_without_size": self._unsized,
                    "ended": _now(),
                }
                self._write([footer], redact)
        finally:
            self.closed = True
            if self._local is not None:
                self._local.close()
                self._local = None

    # -- writing ---------------------------------------------------------------------

    def _line(self, uri: str, result: str, at: str, **extra: Any) -> dict[str, Any]:
        self._totals[result] += 1
        if result == ALREADY_GONE:
            self._said_gone.add(uri)
        if result == DELETED:
            size = extra.get("size")
            if isinstance(size, int):
                self._bytes += size
            else:
                self._unsized += 1
        line: dict[str, Any] = {"record": "path", "path": uri, "result": result}
        line.update({k: v for k, v in extra.items() if v is not None})
        line["at"] = at
        return line

    def _write(
        self,
        lines: list[dict[str, Any]],
        redact: Callable[[str], str] | None = None,
        *,
        header: bool = False,
    ) -> None:
        if self._gone and not header:
            lines, self._gone = [*self._gone, *lines], []
        if not lines:
            return
        text = "".join(self._encode(line, redact) for line in lines)
        fs = self._fs
        assert fs is not None
        try:
            if isinstance(fs, LocalFileSystem):
                if self._local is None:
                    os.makedirs(os.path.dirname(self._path), exist_ok=True)
                    # "x": a second writer of the same name is an error, never a mix.
                    self._local = open(self._path, "x", encoding="utf-8")  # noqa: SIM115
                self._local.write(text)
                self._local.flush()
                os.fsync(self._local.fileno())
            else:
                self._buffer.append(text)
                fs.pipe_file(self._path, "".join(self._buffer).encode("utf-8"))
        except Exception as e:
            raise StorageError(
                f"cannot write the deletion record {self.shown_uri}: "
                f"{self._resolver.describe(e)}; nothing more is deleted without it"
            ) from None

    def _encode(self, line: dict[str, Any], redact: Callable[[str], str] | None) -> str:
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
        # Paths and error texts only, but a task's session secret may appear in an
        # error from its filesystem: both resolvers mask what they know.
        text = self._resolver.redact(text)
        return (redact(text) if redact is not None else text) + "\n"

    @property
    def shown_uri(self) -> str:
        """The record's URI, credentials masked."""
        return self._resolver.redact(self.uri)


def write_restore_record(
    resolver: StorageResolver, prefix: str, task: TaskRow, fields: Mapping[str, Any]
) -> str:
    """The restore record of ``task`` under ``prefix`` (see the module docstring): when,
    which task, and what each writer knows (``fields``); its URI."""
    now = datetime.now(UTC)
    uri = (
        f"{prefix.rstrip('/')}/{safe_name(task.realm_id)}/{task.id}/"
        f"restore-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    )
    doc = {
        "record": "restore",
        "at": now.isoformat().replace("+00:00", "Z"),
        "realm": task.realm_id,
        "task_id": json_id(task.id),
        "task_name": task.name,
        **fields,
    }
    fs, path = resolver.filesystem(uri)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "w") as out:
        out.write(json.dumps(doc) + "\n")
    return uri
