"""What the oracle's test modules share (tests/test_polaris_oracle.py, the table shapes and
views; tests/test_polaris_oracle_faults.py, Polaris failing and the worker's executor): the
release whose handlers are served, its harness, and local file listings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.polaris_classes import InstallError, PolarisHarness, install

# The one release whose polaris-runtime-service (the handlers) Maven Central serves.
RELEASE = "1.4.1"
SCHEMA = 4  # the schema version 1.4.1 bootstraps
# builders.tables.build_table's keywords of the table with the most kinds of files.
DELETES_AND_STATISTICS: dict[str, Any] = {
    "partitioned": True,
    "with_deletes": True,
    "with_statistics": True,
}


def oracle_harness() -> PolarisHarness:
    """The release's installed harness (installed first when needed); fails the test with
    the installer's one line, or when the handlers are not there."""
    try:
        directory = install(RELEASE)
    except InstallError as exc:
        pytest.fail(str(exc), pytrace=False)
    found = PolarisHarness(RELEASE, directory)
    assert found.runtime_service, f"Polaris {RELEASE}'s polaris-runtime-service is not installed"
    return found


def files_under(root: Path) -> set[str]:
    """Every file under ``root``, as local paths."""
    return {str(Path(d) / f) for d, _, names in os.walk(root) for f in names}


def local_path(uri: str) -> str:
    """A ``file:`` URI's local path (other strings unchanged)."""
    return uri.removeprefix("file://") if uri.startswith("file:///") else uri.removeprefix("file:")
