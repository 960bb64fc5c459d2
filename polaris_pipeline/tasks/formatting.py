"""How numbers, times and tasks are written for people: one formatter each.

Polaris names a batch child ``<parent>_[<every file>]_<uuid>`` and a manifest child
``<parent>_<manifest path>_<uuid>``: raw names run to kilobytes, so a line shows
``short_task_name``. JSON (the CLI's ``--json``) writes ids as strings and every
time twice (``json_id``, ``add_json_times``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

ELLIPSIS = "…"
# Paths a report keeps of each kind (deleted, failed, refused, kept) for its lines and
# metadata; its counts stay exact.
PATH_SAMPLE = 20
# A name longer than this (and not one of Polaris's child shapes) is cut in the middle.
MAX_NAME = 48

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_BATCH_NAME = re.compile(rf"^(?P<parent>.*?)_\[(?P<files>.*)\]_(?P<uuid>{_UUID})$", re.DOTALL)
_MANIFEST_NAME = re.compile(
    rf"^(?P<parent>[^_/]+_[^_/]+)_(?P<path>.+)_(?P<uuid>{_UUID})$", re.DOTALL
)


def format_bytes(n: int | None, *, exact: bool = False) -> str:
    """``n`` bytes in binary units; ``unknown`` for None.

    ``exact``: the count in bytes beside a rounded size (``488.3 KiB (500000 bytes)``),
    for a log line someone may compare with a storage listing.
    """
    if n is None:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{size:.0f} {unit}"
            rounded = f"{size:.1f} {unit}"
            return f"{rounded} ({n} bytes)" if exact else rounded
        size /= 1024
    raise AssertionError("unreachable")


def _moment(ms: int | None) -> datetime | None:
    """Epoch milliseconds (to the second) in UTC; None for None or a number off the calendar.

    A row may hold any 18-digit number as a time: that gives None rather than an error.
    """
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms // 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def iso_utc(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 in UTC with milliseconds; None when not a time.

    Where the millisecond value is shown beside it (the CLI's tables and JSON).
    """
    moment = _moment(ms)
    if moment is None or ms is None:
        return None
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def iso_utc_seconds(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 in UTC to the second (``2026-12-01T10:05:40+00:00``);
    None when not a time. For sentences and run metadata, where milliseconds are noise."""
    moment = _moment(ms)
    return None if moment is None else moment.isoformat(timespec="seconds")


def format_duration(ms: int) -> str:
    """A span as its two largest units: ``45s``, ``4m30s``, ``2h05m``, ``3d04h``."""
    seconds = max(0, ms) // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def relative_time(ms: int | None, now_ms: int) -> str:
    """``in 4m30s`` or ``4m30s ago`` (empty for None)."""
    if ms is None:
        return ""
    if ms >= now_ms:
        return f"in {format_duration(ms - now_ms)}"
    return f"{format_duration(now_ms - ms)} ago"


def purges_after(held_until_ms: int | None) -> str:
    """A held task's one line: ``purges after 2026-12-13T10:00:00Z`` (``tasks/hold.py``)."""
    return f"purges after {iso_utc_seconds(held_until_ms) or 'unknown'}"


def truncate(text: str | None, width: int) -> str:
    """``text`` on one line (line breaks and tabs become spaces, runs of spaces stay, so
    aligned text keeps its columns), cut to ``width`` characters with an ellipsis."""
    if not text:
        return ""
    flat = re.sub(r"[\r\n\t\v\f]", " ", text)
    if width <= 0:
        return ""
    return flat if len(flat) <= width else flat[: width - 1] + ELLIPSIS


def _middle_cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 3
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head) :]


def _count_listed(files: str) -> int:
    # Java's List.toString joins with ", "; a path holding ", " itself is rare
    # enough that the count is only a label, never used to decide anything.
    return 0 if not files.strip() else files.count(", ") + 1


def short_task_name(name: str) -> str:
    """A task name fit for a line: child names lose their file list or manifest path.

    ``entityCleanup_42_[s3://b/a.avro, s3://b/b.avro]_<uuid>`` becomes
    ``entityCleanup_42_[2 files]_1b4e28ba``; a manifest child keeps the manifest's
    file name; any other name is cut in the middle to ``MAX_NAME`` characters.
    """
    flat = " ".join(name.split())
    batch = _BATCH_NAME.match(flat)
    if batch:
        n = _count_listed(batch["files"])
        files = f"{n} file" if n == 1 else f"{n} files"
        parent = _middle_cut(batch["parent"], MAX_NAME - 8)
        return f"{parent}_[{files}]_{batch['uuid'][:8]}"
    manifest = _MANIFEST_NAME.match(flat)
    if manifest and len(flat) > MAX_NAME:
        base = manifest["path"].rstrip("/").rsplit("/", 1)[-1]
        base = _middle_cut(base, MAX_NAME // 2)
        return f"{manifest['parent']}_{ELLIPSIS}/{base}_{manifest['uuid'][:8]}"
    return _middle_cut(flat, MAX_NAME)


def task_label(realm_id: str, task_id: int, name: str) -> str:
    """``POLARIS/4711 entityCleanup_42``: how a task is named on one line."""
    return f"{realm_id}/{task_id} {short_task_name(name)}"


def quoted_task_label(realm_id: str, task_id: int, name: str) -> str:
    """``POLARIS/4711 'entityCleanup_42'``: a task in a log line, its name cut and quoted."""
    return f"{realm_id}/{task_id} {short_task_name(name)!r}"


def error_cause(error: str | None, realm_id: str, task_id: int, name: str) -> str:
    """A recorded error without its leading ``task <label>: ``, later full labels shortened:
    beside the task's own row it repeats, and a batch child's name (its file list) hides the cause.
    """
    if not error:
        return ""
    text = " ".join(error.split())
    full = f"{realm_id}/{task_id} {name!r}"
    for prefix in (f"task {full}: ", f"{full}: "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    else:
        # The stored text may have been abbreviated (a bounded error): drop up to the
        # first "': " after the task's id.
        lead = re.match(rf"^task {re.escape(realm_id)}/{task_id} (['\"]).*?\1: ", text)
        if lead:
            text = text[lead.end() :]
    return text.replace(full, task_label(realm_id, task_id, name))


def realms_text(realms: Iterable[str] | None) -> str:
    """``realms [A, B]``: the realms looked in; ``any realm`` for None (no realm filter)."""
    if realms is None:
        return "any realm"
    return f"realms [{', '.join(realms)}]"


def json_id(value: int | None) -> str | None:
    """An entity id for JSON: a string, since ids use all 63 bits and doubles keep 53."""
    return None if value is None else str(value)


def add_json_times(doc: dict[str, Any], **times: int | None) -> None:
    """Each time twice: ``<name>_ms`` (epoch milliseconds) and ``<name>`` (ISO 8601, UTC)."""
    for key, ms in times.items():
        doc[f"{key}_ms"] = ms
        doc[key] = iso_utc(ms)


def retention_text(retained: int, bytes_retained: int | None, unknown: int) -> str:
    """The one wording of deleted files whose bytes were not freed; empty when none."""
    parts: list[str] = []
    if retained:
        size = "their bytes" if bytes_retained is None else format_bytes(bytes_retained)
        parts.append(
            f"{retained} object(s) deleted; {size} kept by the bucket's versioning "
            "until its lifecycle expires them"
        )
    if unknown:
        parts.append(f"{unknown} object(s) deleted; bytes kept or freed: unknown")
    return "; ".join(parts)
