"""The journal of every destructive action a sweeper process takes, and its analysis.

Each worker process appends JSON lines to its own journal file, flushed line by
line so a ``kill -9`` loses at most the line being written:

- ``lease``: a lease granted to the process (realm, task, attempt, executor, start_ms
  on the database clock);
- ``exec``: the runner starts executing a lease;
- ``begin`` / ``end``: one path about to be deleted / its result (``deleted``,
  ``missing`` or ``failed``), written around the engine's own delete call, so a
  ``begin`` is on disk before the file can be gone;
- ``outcome``: what the runner made of the attempt;
- ``error`` and ``exit``: process-level events.

Times are ``time.monotonic_ns()``: one clock for every process of the machine, and
not moved by a faked wall clock (faketime is run with monotonic left alone).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Journal:
    """Append-only JSON-lines writer, safe across threads, flushed per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
        self._lock = threading.Lock()

    def write(self, ev: str, **fields: Any) -> None:
        fields["ev"] = ev
        fields.setdefault("t", time.monotonic_ns())
        fields["pid"] = os.getpid()
        line = json.dumps(fields, default=str) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def load(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Every event of the given journals (missing files count as empty), by time."""
    events: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            continue
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # a line cut by kill -9
    events.sort(key=lambda e: e["t"])
    return events


@dataclass(frozen=True)
class Deletion:
    """One delete attempt: who held which task, which path, when, and what happened."""

    realm: str
    task: int
    attempt: int
    executor: str
    uri: str
    t0: int
    t1: int | None  # None: the process died before it could say
    result: str | None
    pid: int

    @property
    def holder(self) -> tuple[str, int]:
        return (self.executor, self.attempt)


def deletions(events: Iterable[dict[str, Any]]) -> list[Deletion]:
    """Pair each ``begin`` with the ``end`` of the same process and path."""
    pending: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    out: list[Deletion] = []
    for e in events:
        if e["ev"] == "begin":
            pending[(e["pid"], e["uri"])].append(e)
        elif e["ev"] == "end":
            queue = pending.get((e["pid"], e["uri"]))
            if not queue:
                continue
            b = queue.pop(0)
            out.append(_deletion(b, e["t"], e.get("res")))
    for queue in pending.values():
        out.extend(_deletion(b, None, None) for b in queue)
    out.sort(key=lambda d: d.t0)
    return out


def _deletion(begin: dict[str, Any], t1: int | None, result: str | None) -> Deletion:
    return Deletion(
        realm=begin["realm"],
        task=int(begin["task"]),
        attempt=int(begin["attempt"]),
        executor=begin["executor"],
        uri=begin["uri"],
        t0=int(begin["t"]),
        t1=t1,
        result=result,
        pid=int(begin["pid"]),
    )


def concurrent_holders(dels: Iterable[Deletion]) -> list[str]:
    """Tasks on which two holders (executor, attempt) deleted during overlapping spans.

    A holder's span on a task runs from its first delete's begin to its last
    delete's end (its begin, when the process died before the end).
    """
    spans: dict[tuple[str, int], dict[tuple[str, int], list[int]]] = defaultdict(dict)
    for d in dels:
        span = spans[(d.realm, d.task)].setdefault(d.holder, [d.t0, d.t1 or d.t0])
        span[0] = min(span[0], d.t0)
        span[1] = max(span[1], d.t1 or d.t0)
    problems: list[str] = []
    for (realm, task), holders in spans.items():
        ordered = sorted(holders.items(), key=lambda kv: kv[1][0])
        latest_end, latest_holder = -1, None
        for holder, (start, end) in ordered:
            if latest_holder is not None and start < latest_end:
                problems.append(
                    f"{realm}/{task}: {holder} began deleting at {start} while "
                    f"{latest_holder} was still deleting (until {latest_end})"
                )
            if end > latest_end:
                latest_end, latest_holder = end, holder
    return problems


def holders_per_task(dels: Iterable[Deletion]) -> dict[tuple[str, int], set[tuple[str, int]]]:
    out: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
    for d in dels:
        out[(d.realm, d.task)].add(d.holder)
    return out


def of_kind(events: Iterable[dict[str, Any]], ev: str) -> list[dict[str, Any]]:
    return [e for e in events if e["ev"] == ev]
