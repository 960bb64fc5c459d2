"""``polaris-pipeline tasks run ID``: one task now, as an operator, through ``Runner.start``."""

from __future__ import annotations

import json
from pathlib import Path

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.cli import POLICY_FLAGS, run, url_of
from tests.support.iceberg import Warehouse

OLD_MS = 3_600_000


def _batch(metastore: Metastore, tmp_path: Path, **extra: str) -> tuple[int, list[Path]]:
    table = tmp_path / "wh" / "ns" / "t"
    (table / "metadata").mkdir(parents=True)
    files = [table / "metadata" / f"{i}.avro" for i in range(2)]
    for f in files:
        f.write_bytes(b"x" * 10)
    task = batch_task(
        "r1",
        [str(f) for f in files],
        internal={"storageLocation": f"file://{table}"},
        extra=extra,
        create_timestamp=metastore.now_ms() - OLD_MS,
    )
    metastore.insert_tasks([task])
    return task.id, files


def test_a_dead_task_is_retried_now_and_its_files_deleted(
    metastore: Metastore, tmp_path: Path
) -> None:
    task_id, files = _batch(
        metastore, tmp_path, **{Prop.STATUS: "dead", Prop.ATTEMPT_COUNT: "8", Prop.ERROR: "x"}
    )
    code, out = run("tasks", "run", str(task_id), "--metastore", url_of(metastore), *POLICY_FLAGS)
    assert code == 0, out
    assert "operator" in out.splitlines()[0]  # the start decision says it is a retry
    assert "ran 1 task(s): 1 done" in out
    assert not any(f.exists() for f in files)
    assert metastore.get_task("r1", task_id) is None


def test_a_task_another_holder_leases_is_left_alone(metastore: Metastore, tmp_path: Path) -> None:
    now = metastore.now_ms()
    task_id, files = _batch(
        metastore,
        tmp_path,
        **{Prop.EXECUTOR: "someone-else", Prop.START_TIME: str(now), Prop.ATTEMPT_COUNT: "1"},
    )
    before = metastore.get_task("r1", task_id)
    code, out = run(
        "tasks", "run", str(task_id), "--metastore", url_of(metastore), "--json", *POLICY_FLAGS
    )
    doc = json.loads(out)
    assert code == 1
    assert doc["started"] is False and doc["action"] == "held"
    assert "someone-else" in doc["message"]
    assert all(f.exists() for f in files)
    assert metastore.get_task("r1", task_id) == before  # not even its version moved


def test_a_task_within_the_grace_period_is_refused(metastore: Metastore, tmp_path: Path) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    table.mkdir(parents=True)
    victim = table / "f.avro"
    victim.write_bytes(b"x")
    task = batch_task("r1", [str(victim)], internal={"storageLocation": f"file://{table}"})
    metastore.insert_tasks([task])  # created now: Polaris may still be running it
    code, out = run(
        "tasks", "run", str(task.id), "--metastore", url_of(metastore), "--grace-ms", "600000"
    )
    assert code == 1 and out.startswith("not run: ")
    assert victim.exists() and metastore.get_task("r1", task.id) is not None


def test_a_dropped_table_runs_with_its_children_stage_by_stage(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    table = built_tables.build_table(local_warehouse.catalog, ("ns", "dropped"), appends=2)
    files = [p for p in Path(table.location().removeprefix("file://")).rglob("*") if p.is_file()]
    assert files
    task = built_tasks.drop_table_task(
        table, realm_id="POLARIS", create_timestamp=metastore.now_ms() - OLD_MS
    )
    metastore.insert_tasks([task])

    code, out = run(
        "tasks", "run", str(task.id), "--metastore", url_of(metastore), "--json", *POLICY_FLAGS
    )
    doc = json.loads(out)
    assert code == 0, out
    assert doc["started"] is True and doc["action"] == "leased"
    roles = [o["role"] for o in doc["outcomes"]]
    assert roles[0] == "root" and roles.count("child") == len(roles) - 1 >= 2
    assert doc["files_deleted"] == len(files)
    assert not any(p.exists() for p in files)
    assert metastore.list_tasks() == []
