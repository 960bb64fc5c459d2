"""What the unreferenced phase of one table found and did (a leaf: values only).

``UnreferencedReport`` is made once, frozen; the listing adds up an
``UnreferencedTally`` while it runs and freezes it (as ``CleanupTally`` does for
``CleanupResult``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from polaris_pipeline.tasks.formatting import PATH_SAMPLE, retention_text


@dataclass(frozen=True)
class UnreferencedReport:
    """One table prefix after its referenced purge: what is there, what went or would go.

    ``refusal``: the whole prefix was refused for safety (an overlap, a root, no
    recorded location); ``error``: the phase failed (a listing or the metastore).
    What each does to the task: ``unreferenced/listing.py``.
    """

    mode: str
    dry_run: bool = False
    prefix: str | None = None
    refusal: str | None = None
    error: str | None = None
    listed: int = 0
    deleted: int = 0
    bytes_deleted: int | None = 0
    # Of ``deleted``: kept by the store's versioning or soft delete (their bytes in
    # ``bytes_retained``, never in ``bytes_deleted``), or where it would not say.
    retained: int = 0
    bytes_retained: int | None = 0
    retention_unknown: int = 0
    would_delete: int = 0
    would_bytes: int = 0
    missing: int = 0
    kept_newer: int = 0  # last modified after the drop (or no time given): kept
    refused_paths: int = 0  # refused one by one by the table's guard: kept
    referenced: int = 0  # dry run: listed, but the referenced plan deletes them
    failures: int = 0  # deletes that failed; ``failed`` holds the first few
    failed: Mapping[str, str] = field(default_factory=dict)
    directories_removed: int = 0
    # Paths that went (or, in report mode and a dry run, would go); the first PATH_SAMPLE
    # only, unless the caller asked for all of them (a dry run's plan).
    paths: tuple[str, ...] = ()
    more_paths: int = 0
    kept_sample: tuple[str, ...] = ()  # "path: why"

    def to_record(self) -> dict[str, Any]:
        """Every field as plain JSON, under its name: what a step's record stores."""
        return {**asdict(self), **{name: list(getattr(self, name)) for name in _SEQUENCES}}

    @classmethod
    def from_record(cls, record: object) -> UnreferencedReport | None:
        """What ``to_record`` wrote (unknown keys dropped); None for anything else."""
        if not isinstance(record, Mapping) or not isinstance(record.get("mode"), str):
            return None
        values = {f.name: record[f.name] for f in fields(cls) if f.name in record}
        return cls(**_frozen_values(values))

    @property
    def deleting(self) -> bool:
        """Whether files were deleted (``delete`` mode, not a dry run) or only listed."""
        return self.mode == "delete" and not self.dry_run

    @property
    def files(self) -> int:
        """Files deleted (delete mode) or that would go (report mode, dry run)."""
        return self.deleted if self.deleting else self.would_delete

    @property
    def bytes(self) -> int | None:
        return self.bytes_deleted if self.deleting else self.would_bytes

    @property
    def left(self) -> int:
        """Objects still under the prefix once the phase is over: what a deleting phase
        kept or failed to delete, everything listed otherwise (the referenced plan's own
        files excepted in a dry run). A purge Polaris or we reported done is only done
        when this is 0 (issue 38: leaks hide behind reported success)."""
        if self.deleting:
            return self.kept_newer + self.refused_paths + self.failures
        if self.dry_run and self.mode == "delete":
            # What the run would leave: the files that would go are counted gone.
            return self.listed - self.referenced - self.would_delete
        return self.listed - self.referenced

    @property
    def predicted(self) -> bool:
        """Whether ``left`` is what a run would leave, not what is there now: a dry run
        in which files would go (the referenced plan's, or this phase's)."""
        return self.dry_run and (
            self.referenced > 0 or (self.mode == "delete" and self.would_delete > 0)
        )

    def summary(self) -> str:
        """``unreferenced: N files, B bytes deleted / would go, K kept as newer than the drop``."""
        from_here = f" under {self.prefix}" if self.prefix else ""
        if self.refusal:
            return f"unreferenced{from_here}: refused, {self.refusal}"
        if self.error:
            return f"unreferenced{from_here}: failed after {self.listed} listed, {self.error}"
        verb = "deleted" if self.deleting else "would go"
        size = "unknown bytes" if self.bytes is None else f"{self.bytes} bytes"
        text = (
            f"unreferenced{from_here}: {self.files} files, {size} {verb}, "
            f"{self.kept_newer} kept as newer than the drop"
        )
        if self.refused_paths:
            text += f", {self.refused_paths} refused by the guard"
        if self.failures:
            text += f", {self.failures} failed"
        if self.deleting and (self.retained or self.retention_unknown):
            kept = retention_text(self.retained, self.bytes_retained, self.retention_unknown)
            text += f"; {kept}"
        left = self.left
        if self.predicted:  # nothing was deleted: what the run would leave, said as such
            text += (
                "; the prefix would then be empty"
                if left == 0
                else f"; {left} object(s) would be left under it"
            )
        else:
            text += "; the prefix is empty" if left == 0 else f"; {left} object(s) left under it"
        return text


# The report's fields that hold a sequence: a tuple in the report, a list in a tally.
_SEQUENCES = ("paths", "kept_sample")


def _frozen_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each sequence a tuple and the failures a new dict."""
    out = dict(values)
    for name in _SEQUENCES:
        if name in out:
            out[name] = tuple(out[name])
    if "failed" in out:
        out["failed"] = dict(out["failed"])
    return out


@dataclass
class UnreferencedTally:
    """The report while the phase runs, added to in place: ``UnreferencedReport``'s
    fields (their meaning and defaults are there). ``start`` one, ``freeze`` it once."""

    mode: str
    dry_run: bool
    prefix: str | None
    refusal: str | None
    error: str | None
    listed: int
    deleted: int
    bytes_deleted: int | None
    retained: int
    bytes_retained: int | None
    retention_unknown: int
    would_delete: int
    would_bytes: int
    missing: int
    kept_newer: int
    refused_paths: int
    referenced: int
    failures: int
    failed: dict[str, str]
    directories_removed: int
    paths: list[str]
    more_paths: int
    kept_sample: list[str]

    @classmethod
    def start(cls, mode: str, dry_run: bool) -> UnreferencedTally:
        """An empty tally: nothing listed yet."""
        report = asdict(UnreferencedReport(mode=mode, dry_run=dry_run))
        return cls(**{**report, **{name: list(report[name]) for name in _SEQUENCES}})

    def freeze(self) -> UnreferencedReport:
        """The report as it stands, made once: later additions do not reach it."""
        return UnreferencedReport(**_frozen_values(asdict(self)))

    @property
    def deleting(self) -> bool:
        """Whether files are deleted (``delete`` mode, not a dry run) or only listed."""
        return self.mode == "delete" and not self.dry_run

    def add_paths(self, paths: list[str], cap: int = PATH_SAMPLE) -> None:
        """Keep ``paths`` while ``paths`` holds fewer than ``cap``; count the rest."""
        room = max(0, cap - len(self.paths))
        self.paths.extend(paths[:room])
        self.more_paths += max(0, len(paths) - room)
