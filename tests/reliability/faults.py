"""A local filesystem that fails on purpose, and a resolver that serves ``file://`` with it.

``FaultyFileSystem`` is an fsspec filesystem of our own (protocol ``faulty``) that
wraps the local filesystem and applies a fault plan to ``info``, ``open`` and
``rm_file``. It is deliberately *not* a ``LocalFileSystem`` subclass, so the
engine's ``bulk_delete`` deletes through ``fs.rm_file`` (its path for filesystems
other than local and S3) and sees every injected error.

The plan is a JSON file, re-read when it changes, holding a list of rules::

    {"op": "rm_file", "match": "/data/", "kind": "permission",
     "times": null, "while_exists": "/tmp/x/fault-on", "seconds": 0}

- ``op``: ``rm_file`` | ``info`` | ``open``; ``match``: a substring of the path;
- ``kind``: ``permission`` (PermissionError), ``eio`` (OSError EIO), ``partial``
  (the file *is* deleted, then a TimeoutError is raised: the store acted but the
  answer was lost), ``delay`` (sleep ``seconds``, then act normally);
- ``times``: fail only the first N calls per path (null: every call);
- ``while_exists``: the rule applies only while that file exists, so a test clears
  the fault by deleting it.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import split_uri


class FaultPlan:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._rules: list[dict[str, Any]] = []
        self._counts: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()
        self.injected = 0

    def _reload(self) -> None:
        if not self.path:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._rules = []
            return
        # write_plan replaces the file, so a new inode says it changed.
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp != self._stamp:
            with open(self.path, encoding="utf-8") as f:
                self._rules = json.load(f)
            self._stamp = stamp

    def apply(self, op: str, path: str) -> str | None:
        """Raise or sleep per the plan; return "partial" when the caller must fail after acting."""
        with self._lock:
            self._reload()
            hit: tuple[int, dict[str, Any]] | None = None
            for i, rule in enumerate(self._rules):
                if rule.get("op") != op or rule.get("match", "") not in path:
                    continue
                guard = rule.get("while_exists")
                if guard and not os.path.exists(guard):
                    continue
                times = rule.get("times")
                n = self._counts.get((i, path), 0)
                if times is not None and n >= times:
                    continue
                self._counts[(i, path)] = n + 1
                hit = (i, rule)
                break
        if hit is None:
            return None
        _, rule = hit
        self.injected += 1
        kind = rule["kind"]
        if kind == "delay":
            time.sleep(float(rule.get("seconds", 0.1)))
            return None
        if kind == "permission":
            raise PermissionError(errno.EACCES, "Permission denied (injected)", path)
        if kind == "eio":
            raise OSError(errno.EIO, "Input/output error (injected)", path)
        if kind == "partial":
            return "partial"
        raise ValueError(f"unknown fault kind {kind!r}")


class FaultyFileSystem(AbstractFileSystem):
    """The local filesystem behind a fault plan (see the module docstring)."""

    protocol = "faulty"
    root_marker = "/"

    def __init__(self, plan: FaultPlan | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan or FaultPlan(os.environ.get("PP_REL_FAULT_PLAN"))
        self.local = LocalFileSystem()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        scheme, rest = split_uri(path)
        return rest if scheme in ("file", "faulty") else path

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.plan.apply("info", path)
        return self.local.info(path, **kwargs)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        self.plan.apply("open", path)
        return self.local.open(path, mode, **kwargs)

    def rm_file(self, path: str) -> None:
        verdict = self.plan.apply("rm_file", path)
        self.local.rm_file(path)
        if verdict == "partial":
            raise TimeoutError("delete acknowledged too late (injected; the file is gone)")


class FaultyResolver(StorageResolver):
    """A StorageResolver that serves local files through :class:`FaultyFileSystem`."""

    def __init__(self, config: StorageConfig | None = None, plan_path: str | None = None) -> None:
        super().__init__(config)
        self.faulty = FaultyFileSystem(FaultPlan(plan_path))

    def filesystem(self, uri: str) -> tuple[AbstractFileSystem, str]:
        scheme, rest = split_uri(uri)
        if scheme == "file":
            if not rest.startswith("/"):
                raise StorageError(f"not a local absolute path: {uri!r}")
            return self.faulty, rest
        return super().filesystem(uri)


def write_plan(path: str | os.PathLike[str], rules: list[dict[str, Any]]) -> None:
    """Write a fault plan atomically (the worker re-reads it when it changes)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(rules, f)
    os.replace(tmp, path)
