"""Polaris 1.4.1's own purge failing part-way, and our sweep finishing it (issue 48); and the
reliability worker's Polaris-style executor held to Polaris's own executor.

- Polaris's executor and handlers (tests/polaris/oracle) run a table's purge on storage that
  refuses every delete, or stop after 5 deletes; the rows they leave are written to the
  metastore as Polaris wrote them; then our CLI sweep (both faults) or our sensor and runs
  through a real ``dagster-daemon`` (one) finish: every file the metadata names is gone, the
  live neighbour keeps every file, no row is left.
- The same BATCH rows go to Polaris's executor and to tests/reliability/polaris_executor.py.

Apart from tests/test_polaris_oracle.py so that ``make test`` runs these tests on workers of
their own, beside that module's table shapes (which run on one worker).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterRunStatus
from sqlalchemy import create_engine, text

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.daemon import DaemonHarness
from builders.postgres import database_url, throwaway_database
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    TableIdentifier,
    encode_batch_cleanup,
)
from tests.reliability import journal as jr
from tests.reliability.worker import run_polaris
from tests.support.iceberg import Warehouse
from tests.support.metastore import pipeline_store
from tests.support.polaris_classes import PolarisHarness
from tests.support.polaris_oracle import (
    DELETES_AND_STATISTICS,
    RELEASE,
    SCHEMA,
    files_under,
    local_path,
    oracle_harness,
)
from tests.support.table_metadata import referenced_files

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def harness() -> PolarisHarness:
    return oracle_harness()


# Polaris's purge failing part-way: its storage refuses every delete, or its run stops
# after a few deletes (a crash). The oracle's argument for each.
FAULTS = {
    "storage refuses every delete": "refuse-deletes",
    "stopped after 5 deletes": "stop-after=5",
}
FAULT_REALM = "F"


@dataclass
class PolarisFailed:
    """A table Polaris 1.4.1's purge failed on, its rows left as Polaris left them."""

    url: str
    store: Metastore
    root: Path
    named: set[str]  # every file the table's metadata names
    neighbour: set[str]  # every file of the live neighbour ``t_2``

    def assert_finished(self) -> None:
        """Every file the metadata names is gone, the neighbour keeps every file, no row."""
        assert self.store.list_tasks([FAULT_REALM]) == []
        remaining = files_under(self.root)
        assert not self.named & remaining, sorted(self.named & remaining)
        assert self.neighbour <= remaining


@contextmanager
def _polaris_failed(
    harness: PolarisHarness, tmp_path: Path, fault: str, request: pytest.FixtureRequest
) -> Iterator[PolarisFailed]:
    """Polaris 1.4.1's executor and handlers fail part-way on a table with deletes and statistics
    (live neighbour ``t_2`` beside it); the rows they leave (those they created, and the parent
    unless its own run succeeded) are written to the metastore as Polaris wrote them."""
    request.node.user_properties.append(("polaris_release", RELEASE))
    root = tmp_path / "wh"
    uri = built_tables.local_warehouse_uri(root)
    catalog = built_tables.open_catalog(uri, tmp_path / "catalog.db", name="local")
    config = StorageConfig()
    warehouse = Warehouse("local", uri, catalog, config, StorageResolver(config))
    table = warehouse.build("t", **DELETES_AND_STATISTICS)
    named = {local_path(f) for f in referenced_files(table)}
    warehouse.build("t_2")
    location = Path(local_path(table.metadata.location))
    neighbour = {f for f in files_under(root) if not f.startswith(f"{location}/")}
    with throwaway_database("pp_polaris_oracle_faults") as name:
        url = database_url(name)
        store = pipeline_store(url, TaskPolicy(polaris_version=RELEASE), schema_version=SCHEMA)
        try:
            parent = dataclasses.replace(built_tasks.drop_table_task(table), realm_id=FAULT_REALM)
            store.insert_tasks([parent])
            answer = harness.purge(url, FAULT_REALM, FAULTS[fault])
            left = {row["id"]: row for row in answer["left"]}
            assert left, answer["runs"]  # the fault made Polaris leave work behind
            kinds = sorted(f"type {row['taskType']}" for row in left.values())
            request.node.user_properties.append(
                (
                    f"polaris_fact:oracle, Polaris failing ({fault}): rows it leaves",
                    f"{len(left)} ({', '.join(sorted(set(kinds)))}); parent "
                    + ("left" if parent.id in left else "done"),
                )
            )
            # The metastore as Polaris would have left it: children it created (with the
            # parent's internal properties, as its TableCleanupTaskHandler copies them),
            # the parent gone when its own run succeeded.
            store.insert_tasks(
                [
                    NewTask(
                        FAULT_REALM,
                        row["id"],
                        row["name"],
                        {"taskType": row["taskType"], "data": row["data"]},
                        dict(parent.internal_properties),
                    )
                    for task_id, row in left.items()
                    if task_id != parent.id
                ]
            )
            if parent.id not in left:
                engine = create_engine(url)
                with engine.begin() as conn:
                    conn.execute(
                        text(
                            "DELETE FROM polaris_schema.entities"
                            " WHERE realm_id = :realm AND id = :id"
                        ),
                        {"realm": FAULT_REALM, "id": parent.id},
                    )
                engine.dispose()
            yield PolarisFailed(url, store, root, named, neighbour)
        finally:
            store.dispose()


@pytest.mark.parametrize("fault", FAULTS)
def test_polaris_fails_and_our_sweeper_finishes(
    fault: str,
    harness: PolarisHarness,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    repo_bin: Path,
) -> None:
    """Polaris 1.4.1's executor and handlers fail part-way and leave rows (those it created, and the
    parent unless its own run succeeded), written to the metastore as Polaris wrote them; then
    our CLI sweep runs: every file the table's metadata names is gone, the live neighbour keeps
    every file, and no row is left."""
    with _polaris_failed(harness, tmp_path, fault, request) as failed:
        done = subprocess.run(
            [
                str(repo_bin / "polaris-pipeline"),
                "sweep",
                "--metastore",
                failed.url,
                "--realm",
                FAULT_REALM,
                "--grace-ms",
                "0",
                "--polaris-version",
                RELEASE,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        failed.assert_finished()


def test_polaris_fails_and_our_daemon_finishes(
    harness: PolarisHarness,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    start_daemon: Callable[..., DaemonHarness],
) -> None:
    """Polaris 1.4.1's executor and handlers stop after 5 deletes and leave their rows as Polaris
    wrote them; then our sensor and its runs, through a real ``dagster-daemon``, finish the
    purge: every file the table's metadata names is gone, the live neighbour keeps every file,
    no row is left, and every run succeeded."""
    with _polaris_failed(harness, tmp_path, "stopped after 5 deletes", request) as failed:
        daemon = start_daemon(
            metastore_url=failed.url,
            extra_env={"POLARIS_PIPELINE_POLARIS_VERSION": RELEASE},
        )
        daemon.wait_for(
            lambda: failed.store.count_tasks([FAULT_REALM]) == 0,
            timeout_s=300,
            what="the daemon's runs to finish every row Polaris left",
        )
        runs = daemon.wait_runs_finished(timeout_s=120)
        assert {r.status for r in runs} == {DagsterRunStatus.SUCCESS}, daemon.diagnose()
        failed.assert_finished()


@pytest.fixture
def repo_bin() -> Path:
    """The venv's scripts: the CLI beside the interpreter running the tests."""
    return Path(sys.executable).parent


# The same BATCH rows to Polaris's own executor and to the reliability worker's model of it.
EXECUTOR_ROWS = {  # kind -> (files, of which missing); None: data that is not JSON
    "some files missing": (3, 1),
    "every file missing": (2, 2),
    "every file present": (2, 0),
    "data that is not JSON": None,
}
EXECUTOR_FAULTS = {"no fault": None, "storage refuses every delete": "refuse-deletes"}


def _executor_rows(realm: str, directory: Path) -> list[NewTask]:
    """EXECUTOR_ROWS in ``realm``, their files under ``directory``, as 1.4.1 writes BATCH
    rows (no ``type``); each named by its kind's index."""
    rows = []
    for i, shape in enumerate(EXECUTOR_ROWS.values()):
        data = "{oops"
        if shape is not None:
            files = []
            for k in range(shape[0]):
                path = directory / f"r{i}" / f"f{k}.avro"
                path.parent.mkdir(parents=True, exist_ok=True)
                if k >= shape[1]:
                    path.write_bytes(b"x")
                files.append(f"file://{path}")
            payload = BatchCleanupPayload(TableIdentifier(("ns",), "t"), tuple(files))
            data = encode_batch_cleanup(payload, with_type=False)
        props = {Prop.TASK_TYPE: TaskType.BATCH_FILE_CLEANUP.code, Prop.DATA: data}
        internal = {"storageLocation": f"file://{directory}"}
        rows.append(NewTask(realm, new_entity_id(), f"batch_{i}", props, internal))
    return rows


@pytest.mark.parametrize("fault", EXECUTOR_FAULTS)
def test_the_workers_polaris_executor_leaves_what_polaris_leaves(
    fault: str, harness: PolarisHarness, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The reliability worker's Polaris-style executor (tests/reliability/polaris_executor.py)
    and Polaris 1.4.1's own executor and BATCH handler, on the same rows (files missing,
    present, all missing, undecodable data), with and without storage that refuses every
    delete: the same rows left, the same files deleted, the same number of delete calls
    (the existence check, 3 tries per delete)."""
    request.node.user_properties.append(("polaris_release", RELEASE))
    realms = {"polaris": "EP", "worker": "EW"}
    dirs = {who: tmp_path / who for who in realms}
    with throwaway_database("pp_polaris_oracle_executor") as name:
        url = database_url(name)
        store = pipeline_store(url, TaskPolicy(polaris_version=RELEASE), schema_version=SCHEMA)
        try:
            for who, realm in realms.items():
                store.insert_tasks(_executor_rows(realm, dirs[who]))
            before = {who: files_under(d) for who, d in dirs.items()}
            answer = harness.purge(url, realms["polaris"], EXECUTOR_FAULTS[fault])
            journal_path = tmp_path / "worker.jsonl"
            journal = jr.Journal(journal_path)
            cfg = {
                "url": url,
                "realms": [realms["worker"]],
                "refuse_deletes": EXECUTOR_FAULTS[fault] is not None,
                "idle_rounds": 1,
                "idle_s": 0,
            }
            assert run_polaris(cfg, journal) == 0
            journal.close()
            worker_left = sorted(t.name for t in store.list_tasks([realms["worker"]]))
        finally:
            store.dispose()
    polaris_left = sorted(row["name"] for row in answer["left"])
    kinds = {f"batch_{i}": kind for i, kind in enumerate(EXECUTOR_ROWS)}
    request.node.user_properties.append(
        (
            f"polaris_fact:oracle, Polaris's executor on BATCH rows ({fault}): rows it leaves",
            ", ".join(kinds[n] for n in polaris_left) or "none",
        )
    )
    gone = {
        who: {str(Path(f).relative_to(dirs[who])) for f in before[who] - files_under(dirs[who])}
        for who in realms
    }
    worker_calls = sum(1 for e in jr.load([journal_path]) if e["ev"] == "begin")
    assert worker_left == polaris_left
    assert gone["worker"] == gone["polaris"]
    assert worker_calls == answer["deleteCalls"]
