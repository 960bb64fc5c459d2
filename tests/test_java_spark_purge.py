"""Purging tables written by Iceberg's own Java library (Spark 3.5, Iceberg 1.10.2).

pyiceberg wrote every other table the tests purge; these come from the library
Polaris itself runs, through Hadoop's local file system as a Polaris on ``file:``
storage writes them: v2 merge-on-read position deletes, v3 deletion vectors,
Puffin table statistics, partition statistics, several snapshots and metadata
files, and a ``.NAME.crc`` checksum beside every file. After the sweep no file
of the dropped table is left, sidecars included, while the live neighbour whose
location starts with the same characters (``t2`` / ``t2_live``) keeps every byte.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.storage.delete import is_crc_sidecar_name
from polaris_pipeline.storage.uri import split_uri
from tests.support.cleanup_sweep import assert_all_ok, sweep
from tests.support.iceberg import Warehouse
from tests.support.java import WrittenTable, write_iceberg_tables

pytestmark = pytest.mark.slow

TABLES = (("t2", 2), ("t3", 3), ("t2_live", 2))
# The Hadoop catalog's pointer to the current metadata file: no metadata file
# names it, and a table held by Polaris has none, so the fixture removes it.
VERSION_HINT = "version-hint.text"


@pytest.fixture(scope="module")
def spark_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WrittenTable]:
    root = tmp_path_factory.mktemp("spark")
    tables = write_iceberg_tables(root / "wh", TABLES)
    for table in tables.values():
        metadata = Path(split_uri(table.location)[1]) / "metadata"
        (metadata / VERSION_HINT).unlink()
        (metadata / f".{VERSION_HINT}.crc").unlink()
    return tables


def _files(location: str) -> dict[str, str]:
    """Every file under ``location``: path -> sha256 of its bytes."""
    root = Path(split_uri(location)[1])
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _metadata(table: WrittenTable) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(Path(split_uri(table.metadata_location)[1]).read_text())
    return loaded


@pytest.mark.parametrize("name", ["t2", "t3"])
def test_sweep_purges_a_java_written_table_and_its_sidecars(
    spark_tables: dict[str, WrittenTable], local_warehouse: Warehouse, name: str
) -> None:
    table, live = spark_tables[name], spark_tables["t2_live"]
    assert live.location.startswith(spark_tables["t2"].location)  # a prefix, not a parent
    before, live_before = _files(table.location), _files(live.location)
    names = [Path(p).name for p in before]
    sidecars = {p for p in before if is_crc_sidecar_name(Path(p).name)}
    # The table really holds what this test is about.
    metadata = _metadata(table)
    assert metadata["format-version"] == int(name[1])
    assert metadata["statistics"] and metadata["partition-statistics"]
    assert any(n.endswith(".stats") for n in names)
    assert any(n.startswith("partition-stats-") for n in names)
    if name == "t3":  # deletion vectors live in Puffin files beside the data
        assert any(n.endswith("-deletes.puffin") for n in names)
    else:  # position delete files
        assert any(n.endswith("-deletes.parquet") for n in names)
    assert len(sidecars) * 2 == len(before)  # one sidecar for every file

    spec = built_tasks.DropSpec(
        namespace=("db",),
        name=name,
        metadata_location=table.metadata_location,
        location=table.location,
    )
    runs = sweep(local_warehouse, built_tasks.task_row(built_tasks.drop_task(spec)))

    assert_all_ok(runs)
    left = _files(table.location)
    assert not {p for p in left if p not in sidecars}, "table files left behind"
    assert not left, "Hadoop checksum sidecars left behind"
    assert _files(live.location) == live_before
