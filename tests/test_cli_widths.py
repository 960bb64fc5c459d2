"""``tasks list`` and ``leaks`` at every width an operator meets: no width (a terminal that
reports 0 columns, as under ``script`` or some CI runners), 40, 80 and 200 columns.

What must hold at each: every row is printed, and what an operator copies (a task id, a
leak root) is whole on one line; a table line fits the width, or the table falls back
to one record per block.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.cli import run, url_of
from tests.support.iceberg import Warehouse
from tests.support.leak_scene import build_scene
from tests.support.tasks import batch_task

CLI = [sys.executable, "-m", "polaris_pipeline.cli"]
LONG_ID = 3008983788998583856
ERROR = "PermissionError: Access Denied " + " ".join(f"for s3://lake/wh/ns/t/{i}" for i in range(9))


def _backlog(store: Metastore) -> list[int]:
    files = [f"s3://lake/wh/ns/t/data/{i}.parquet" for i in range(3)]
    tasks = [
        dataclasses.replace(batch_task("POLARIS", files), id=LONG_ID),
        batch_task("POLARIS", files[:1], extra={Prop.ERROR: ERROR}),
    ]
    store.insert_tasks(tasks)
    return [t.id for t in tasks]


def _roots(store: Metastore, wh: Warehouse) -> list[str]:
    build_scene(store, wh)
    code, out = run("leaks", "--metastore", url_of(store), "--json")
    assert code == 0, out
    return [r["root"] for c in json.loads(out)["catalogs"] for r in c["roots"]]


def _assert_whole(out: str, values: list[str], width: int | None) -> None:
    lines = out.splitlines()
    for value in values:
        assert any(value in line for line in lines), (value, out)
    if width is not None:
        # Longer than the width only to keep whole a word (a path, a name) that does not
        # fit beside its label.
        long = [line for line in lines if len(line) > width]
        assert all(any(len(w) > width - 20 for w in line.split()) for line in long), out


@pytest.mark.parametrize("width", [40, 80, 200])
def test_tasks_list_and_leaks_keep_ids_and_roots_whole(
    store: Metastore,
    local_warehouse: Warehouse,
    width: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = _backlog(store)
    roots = _roots(store, local_warehouse)
    assert len(roots) == 3
    monkeypatch.setenv("COLUMNS", str(width))
    code, out = run("tasks", "list", "--metastore", url_of(store), "--grace-ms", "0")
    assert code == 0, out
    _assert_whole(out, [str(i) for i in ids], width)
    code, out = run("leaks", "--metastore", url_of(store))
    assert code == 0, out
    _assert_whole(out, roots, width)
    if width == 200:  # wide enough for a table, with every root whole in its column
        assert "ROOT" in out.splitlines()[1] and not any(
            line.startswith("ROOT  ") for line in out.splitlines()
        )
    if width == 40:  # a root is longer than 40: one record per block, every value whole
        assert any(line.strip().startswith("ROOT ") for line in out.splitlines()), out


def _run_on_a_terminal_of_no_size(argv: list[str]) -> tuple[int, str]:
    """``argv`` on a pseudo-terminal that reports 0 rows and 0 columns."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout=60)
    os.close(master)
    return code, b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_terminal_of_no_width_prints_full_rows(
    store: Metastore, local_warehouse: Warehouse
) -> None:
    ids = _backlog(store)
    roots = _roots(store, local_warehouse)
    code, out = _run_on_a_terminal_of_no_size(
        [*CLI, "tasks", "list", "--metastore", url_of(store), "--grace-ms", "0"]
    )
    assert code == 0, out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for task_id in ids:
        assert "POLARIS" in rows[str(task_id)], out  # the row, not an empty line
    assert ERROR in out  # nothing cut: there is no width to cut to
    code, out = _run_on_a_terminal_of_no_size([*CLI, "leaks", "--metastore", url_of(store)])
    assert code == 0, out
    for root in roots:
        assert any(line.strip().startswith(root) for line in out.splitlines()), out
