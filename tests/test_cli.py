"""The operator CLI, against real metastores and local files."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from polaris_pipeline.cli import main
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.tasks import batch_task, seed

POLICY_FLAGS = ["--grace-ms", "0"]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def url_of(store: Metastore) -> str:
    return store.url.render_as_string(hide_password=False)


def test_init_metastore_creates_then_finds(metastore_url: str) -> None:
    code, out = run("init-metastore", "--metastore", metastore_url)
    assert code == 0 and out.startswith("created Polaris entities table")
    code, out = run("init-metastore", "--metastore", metastore_url)
    assert code == 0 and out.startswith("found existing")


def test_tasks_list_table_and_json(metastore: Metastore) -> None:
    seed(metastore, "r1", 2)
    seed(metastore, "r2", 1)
    metastore.lease_available("exec-A", 1, realms=["r2"])
    url = url_of(metastore)
    code, out = run("tasks", "list", "--metastore", url, *POLICY_FLAGS)
    assert code == 0
    header, rule, *rows = out.splitlines()
    assert header.split() == [
        "ID",
        "REALM",
        "TYPE",
        "NAME",
        "STATE",
        "ATTEMPTS",
        "EXECUTOR",
        "LAST",
        "ERROR",
    ]
    assert set(rule) == {"-", " "}
    # Columns are aligned: every row's STATE column starts where the header's does.
    col = header.index("STATE")
    states = [row[col:].split()[0] for row in rows[:3]]
    assert sorted(states) == ["leased", "orphaned", "orphaned"]
    assert "3 task(s), 1 leased, 2 orphaned" in out
    code, out = run("tasks", "list", "--metastore", url, "--realm", "r2", "--json", *POLICY_FLAGS)
    docs = json.loads(out)
    assert code == 0 and len(docs) == 1
    assert docs[0]["realm"] == "r2" and docs[0]["state"] == "leased"
    assert docs[0]["executor"] == "exec-A" and docs[0]["type"] == "batch_file_cleanup"
    code, out = run(
        "tasks", "list", "--metastore", url, "--state", "orphaned", "--json", *POLICY_FLAGS
    )
    assert {d["realm"] for d in json.loads(out)} == {"r1"}


def test_tasks_show_and_requeue(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1, extra={Prop.STATUS: "dead", Prop.ERROR: "gave up"})
    url = url_of(metastore)
    code, out = run(
        "tasks", "show", str(task.id), "--realm", "r1", "--metastore", url, *POLICY_FLAGS
    )
    doc = json.loads(out)
    assert code == 0 and doc["state"] == "dead" and doc["last_error"] == "gave up"
    assert json.loads(doc["data"])["type"] == "TABLE_METADATA"
    code, out = run(
        "tasks", "requeue", str(task.id), "--realm", "r1", "--metastore", url, *POLICY_FLAGS
    )
    assert code == 0 and "now orphaned" in out
    code, _ = run("tasks", "show", "999", "--realm", "r1", "--metastore", url)
    assert code == 2


def test_sweep_deletes_batch_files_and_summarises(metastore: Metastore, tmp_path: Path) -> None:
    table = tmp_path / "wh" / "ns" / "t"
    (table / "metadata").mkdir(parents=True)
    files = [table / "metadata" / f"{i}.avro" for i in range(3)]
    for f in files:
        f.write_bytes(b"x" * 100)
    keep = table / "metadata" / "keep.avro"
    keep.write_bytes(b"k")
    location = {"storageLocation": f"file://{table}"}
    metastore.insert_tasks([batch_task("r1", [str(f) for f in files], internal=location)])
    outside = batch_task("r1", [str(tmp_path / "elsewhere.txt")], internal=location)
    (tmp_path / "elsewhere.txt").write_text("precious")
    metastore.insert_tasks([outside])
    url = url_of(metastore)

    code, out = run("sweep", "--metastore", url, "--once", "--dry-run", *POLICY_FLAGS)
    assert code == 0 and "nothing was changed" in out
    assert out.count("  delete  ") == 3 and "REFUSE" in out
    assert all(f.exists() for f in files)

    code, out = run("sweep", "--metastore", url, "--once", "--json", *POLICY_FLAGS)
    summary = json.loads(out)
    assert code == 1  # the refused task failed
    assert summary["done"] == 1 and summary["failed"] == 1
    assert summary["files_deleted"] == 3 and summary["bytes_freed"] == 300
    assert summary["paths_refused"] == 1
    assert not any(f.exists() for f in files) and keep.exists()
    assert (tmp_path / "elsewhere.txt").read_text() == "precious"
    row = metastore.get_task("r1", outside.id)
    assert row is not None and "guard refused" in (row.last_error or "")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tasks", "list", "--metastore", "nonsense"], "not a SQLAlchemy URL"),
        (["tasks", "list", "--metastore", "mysql://x/y"], "unsupported metastore backend"),
        (
            ["tasks", "list", "--metastore", "postgresql://u:topsecret@127.0.0.1:1/db"],
            "metastore postgresql+psycopg://u:***@127.0.0.1:1/db",
        ),
    ],
)
def test_errors_are_one_line_without_traceback(argv: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "polaris_pipeline.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("polaris-pipeline: error:") and message in lines[0]
    assert "Traceback" not in proc.stderr and "topsecret" not in proc.stderr


def test_missing_schema_is_a_clear_error(
    metastore_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("tasks", "list", "--metastore", metastore_url)
    assert code == 2
    assert "run `polaris-pipeline init-metastore`" in capsys.readouterr().err


def test_every_command_has_help_with_an_example() -> None:
    for argv in (
        ["--help"],
        ["init-metastore", "--help"],
        ["tasks", "list", "--help"],
        ["tasks", "show", "--help"],
        ["tasks", "requeue", "--help"],
        ["sweep", "--help"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "polaris_pipeline.cli", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0
        assert "Example: polaris-pipeline" in proc.stdout, argv
