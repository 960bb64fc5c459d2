"""Dagster fixtures shared by the tests of the code location."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from resources import clear_metastore_cache, clear_storage_cache


@pytest.fixture(autouse=True)
def _fresh_resource_caches() -> Iterator[None]:
    """Resources cache engines per process; a test must not see the previous test's."""
    yield
    clear_metastore_cache()
    clear_storage_cache()


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[DagsterInstance]:
    """A real Dagster instance on SQLite storage in a temporary DAGSTER_HOME."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    with DagsterInstance.local_temp(str(home), overrides={"telemetry": {"enabled": False}}) as inst:
        yield inst


def child_summaries(result: Any, node: str) -> list[dict[str, Any]]:
    """Per-task summaries of a child stage's steps (each step runs a group of children)."""
    groups = result.output_for_node(node)
    return [task for group in groups.values() for task in group["tasks"]]
