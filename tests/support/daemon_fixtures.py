"""Fixtures of the daemon tests: a PostgreSQL metastore, a warehouse of files, the daemon.

Registered in tests/conftest.py; the helpers are imported by the test modules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from builders.daemon import DaemonConfig, DaemonHarness
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, TaskPolicy
from tests.support.metastore import as_pipeline
from tests.support.pg_schema import drop_polaris_schema

# Lease timeout of the daemon tests: short, so a lapsed lease is seen in seconds.
LEASE_TIMEOUT_MS = 8_000


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The session's PostgreSQL database with an empty Polaris schema, as the pipeline
    connects to it (``as_pipeline``: the restricted role under ``PP_TEST_RESTRICTED_ROLE``)."""
    drop_polaris_schema(pg_database)
    store = Metastore(pg_database)
    store.init_schema()
    store.dispose()
    return as_pipeline(pg_database)


def metastore_for(url: str, lease_timeout_ms: int = LEASE_TIMEOUT_MS, **policy: Any) -> Metastore:
    """The test's own view of the metastore, with the daemon's lease policy."""
    return Metastore(
        url, policy=TaskPolicy(lease_timeout_ms=lease_timeout_ms, grace_ms=0, **policy)
    )


def write_storage_config(path: Path, allowed: list[str]) -> str:
    """A storage config file confining deletes to ``allowed``; returns its path."""
    path.write_text(yaml.safe_dump({"allowed_prefixes": allowed}), encoding="utf-8")
    return str(path)


def touch_files(directory: Path, n: int, *, scheme: str = "file") -> list[str]:
    """``n`` small files in ``directory``, as ``file:///abs/path`` URIs, or for another
    scheme ``<scheme>://abs/path`` (its first directory in the authority's place)."""
    directory.mkdir(parents=True, exist_ok=True)
    uris = []
    for i in range(n):
        path = directory / f"{i:05d}.parquet"
        path.write_bytes(b"PAR1")
        uris.append(f"file://{path}" if scheme == "file" else f"{scheme}:/{path}")
    return uris


def orphaned_batch_tasks(
    root: Path, realm: str, n: int, files_each: int
) -> tuple[list[NewTask], list[str]]:
    """``n`` orphaned BATCH tasks, each over ``files_each`` files of a table of its own
    under ``root``; returns the tasks (not inserted) and every file's URI."""
    tasks, every_file = [], []
    for i in range(n):
        location = root / "wh" / "ns" / f"t{i}"
        files = touch_files(location / "data", files_each)
        every_file += files
        tasks.append(batch_task(realm, files, internal={"storageLocation": f"file://{location}"}))
    return tasks, every_file


def existing(uris: list[str]) -> list[str]:
    """The URIs whose local file still exists."""
    return [u for u in uris if os.path.exists("/" + u.split("://", 1)[1].lstrip("/"))]


def starts_a_daemon(item: pytest.Item) -> bool:
    """Whether the test uses ``start_daemon`` (the fixture below): such a test is slow."""
    return "start_daemon" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Marked here, before ``-m`` deselects: a daemon test its module forgot to mark
    # would otherwise run in ``make test-fast`` (a minute of the edit loop, once seen).
    for item in items:
        if starts_a_daemon(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonHarness]]:
    """``start_daemon(metastore_url=..., **DaemonConfig fields)``; stopped on teardown."""
    started: list[DaemonHarness] = []

    def start(**config: Any) -> DaemonHarness:
        harness = DaemonHarness(tmp_path / f"dagster_home_{len(started)}", DaemonConfig(**config))
        started.append(harness)
        return harness.start()

    yield start
    for harness in started:
        harness.stop()
