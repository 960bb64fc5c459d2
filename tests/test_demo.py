"""The demo as a user runs it, and the code location as ``dagster`` loads it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from polaris_pipeline.metastore import Metastore

ROOT = Path(__file__).resolve().parent.parent
DAGSTER = str(Path(sys.executable).parent / "dagster")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    env.update(extra)
    return env


@pytest.mark.slow
def test_demo_recovers_orphans_and_leaves_live_work_alone(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "demo.py"],
        cwd=ROOT,
        env=_env(POLARIS_PIPELINE_DEMO_DIR=str(demo_dir), DAGSTER_HOME=str(tmp_path / "unused")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    print(out)
    assert proc.returncode == 0, proc.stderr[-3000:]

    # Recovered: the three orphaned tables, every one of their files.
    assert re.search(
        r"3 table\(s\) purged in 3 run\(s\): \d+ file\(s\) deleted, \d+ already gone, "
        r"0 refused, [\d.]+ KiB freed; children: [1-9]\d* done\n",
        out,
    )
    for name in ("sales.orders", "sales.events", "sales.customers"):
        assert re.search(rf"{re.escape(name)}\s+\d+ files before, 0 after: purged, task done", out)
    # Dead-lettered at once and recorded: the malformed task cannot heal (issue 13).
    assert "Refused and dead-lettered at once (a payload that cannot heal):" in out
    assert "entity cleanup data is not JSON" in out
    # Left alone: the live Polaris lease, the task within grace, the table never dropped.
    assert re.search(r"sales\.payments .*leased by a live Polaris \(polaris-server-1\)", out)
    assert re.search(r"sales\.clicks .*within the grace period", out)
    assert re.search(r"sales\.inventory\s+not dropped: (\d+)/\1 files untouched", out)
    assert "as expected." in out and "NOT as expected" not in out
    assert "dagster dev -w workspace.yaml" in out
    assert f"DAGSTER_HOME={demo_dir}/dagster_home" in out
    # `dagster dev` gets the storage config the demo's runs had: deletes stay in the warehouse.
    config = demo_dir / "storage.yaml"
    assert f"POLARIS_PIPELINE_STORAGE_CONFIG={config} " in out
    assert "allowed_prefixes" in config.read_text()

    # The leak the demo left (a dropped table's files, no task), found and reclaimed by the
    # very commands it prints.
    leaks, reclaim = [
        line.split()
        for line in out.splitlines()
        if line.strip().startswith(".venv/bin/polaris-pipeline leaks")
    ]
    cli = [sys.executable, "-m", "polaris_pipeline.cli"]
    found = subprocess.run(
        [*cli, *leaks[1:]], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stderr
    root = reclaim[-1]
    # A row, or one block per root where the terminal is too narrow for the whole row.
    row = re.search(rf"^  {re.escape(root)}\s+table\s+\d+", found.stdout, re.M)
    block = re.search(rf"ROOT\s+{re.escape(root)}\n\s+KIND\s+table\n\s+OBJECTS\s+\d+", found.stdout)
    assert row or block, found.stdout
    assert "\n1 leaked root(s)" in found.stdout
    done = subprocess.run(
        [*cli, *reclaim[1:]], env=_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and f"reclaim {root}: deleted " in done.stdout, done
    assert not any(p.is_file() for p in Path(root.removeprefix("file://")).rglob("*"))

    # The metastore the demo leaves behind agrees with what it printed.
    store = Metastore(f"sqlite:///{demo_dir}/polaris.db")
    try:
        tasks = {t.name: t for t in store.list_tasks()}
    finally:
        store.dispose()
    malformed = tasks.pop("entityCleanup_4711")
    assert malformed.status == "dead" and malformed.failure_permanent
    assert "not JSON" in (malformed.last_error or "")
    assert malformed.properties.get("lastAttemptRunId")
    live = [t for t in tasks.values() if t.executor_id == "polaris-server-1"]
    assert len(live) == 1 and live[0].attempt_count == 1
    fresh = [t for t in tasks.values() if t.executor_id is None]
    assert len(fresh) == 1
    assert len(tasks) == 2  # nothing else left: the orphans and all their children are done
    # The runs are in the Dagster instance the UI will open.
    assert (demo_dir / "dagster_home" / "dagster.yaml").exists()
    assert (demo_dir / "dagster_home" / "history" / "runs.db").exists()


@pytest.mark.slow
def test_code_location_validates(tmp_path: Path) -> None:
    """``dagster definitions validate``: with and without the metastore URL set."""
    for extra in ({}, {"POLARIS_METASTORE_URL": f"sqlite:///{tmp_path}/polaris.db"}):
        proc = subprocess.run(
            [DAGSTER, "definitions", "validate", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=_env(DAGSTER_HOME=str(tmp_path), **extra),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "All code locations passed validation" in proc.stderr + proc.stdout
