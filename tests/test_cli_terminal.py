"""The CLI as an operator sees it on a terminal: a real pseudo-terminal, a real sweep.

``polaris-pipeline sweep`` over a task with thousands of local files must show
progress while it deletes (only on a terminal) and end with a summary; piped,
the same sweep prints no progress at all. Every option of every command has
help text, and every command's help ends with an example.
"""

from __future__ import annotations

import argparse
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from polaris_pipeline.cli import build_parser
from polaris_pipeline.metastore import Metastore
from tests.support.tasks import batch_task

FILES = 5000
OLD_MS = 10 * 60_000
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CLI = [sys.executable, "-m", "polaris_pipeline.cli"]


def _seed(tmp_path: Path) -> tuple[str, list[Path], int]:
    """A SQLite metastore with one orphaned batch task naming FILES real files."""
    table = tmp_path / "wh" / "ns" / "t"
    (table / "metadata").mkdir(parents=True)
    files = []
    for i in range(FILES):
        f = table / "metadata" / f"snap-{i:05d}.avro"
        f.write_bytes(b"x" * 100)
        files.append(f)
    url = f"sqlite:///{tmp_path}/polaris.db"
    store = Metastore(url)
    store.init_schema()
    task = batch_task(
        "POLARIS",
        [str(f) for f in files],
        internal={"storageLocation": f"file://{table}"},
        create_timestamp=store.now_ms() - OLD_MS,
    )
    store.insert_tasks([task])
    store.dispose()
    return url, files, task.id


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}


def _run_in_pty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal; all it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=_env(), close_fds=True
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def _visible(screen: str) -> str:
    """What stays on the terminal: per line, the text after the last carriage return."""
    lines = ANSI.sub("", screen).replace("\r\n", "\n").split("\n")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in lines)


def test_sweep_shows_progress_on_a_terminal_and_a_summary(tmp_path: Path) -> None:
    url, files, task_id = _seed(tmp_path)
    code, screen = _run_in_pty([*CLI, "sweep", "--metastore", url, "--grace-ms", "0", "--once"])

    assert code == 0, screen
    # Progress: the same line rewritten in place (\r, erase to end of line), counting up.
    updates = re.findall(
        rf"\r  POLARIS/{task_id}: batch files (\d+)/{FILES} \((\d+)%\)\x1b\[K", screen
    )
    counts = [int(done) for done, _ in updates]
    assert len(counts) >= 3, screen
    assert counts == sorted(counts) and counts[-1] == FILES
    assert [int(p) for _, p in updates][-1] == 100
    assert "\r  sweeping sqlite:///" in screen  # shown before the first file goes
    # Then the progress line is erased, and the task's line and the summary follow.
    text = _visible(screen)
    assert re.search(rf"^done\s+POLARIS/{task_id} .*deleted {FILES}$", text, re.M), text
    assert (
        f"swept 1 task(s): 1 done, 0 failed, 0 dead, 0 lease lost; {FILES} file(s) deleted, "
        "488.3 KiB freed, 0 path(s) refused" in text
    )
    assert not any(f.exists() for f in files)
    store = Metastore(url)
    try:
        assert store.list_tasks() == []
    finally:
        store.dispose()


def test_piped_sweep_prints_no_progress(tmp_path: Path) -> None:
    url, files, task_id = _seed(tmp_path)
    proc = subprocess.run(
        [*CLI, "sweep", "--metastore", url, "--grace-ms", "0", "--once"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress, no escape codes in logs
    assert "\r" not in proc.stdout and "\x1b" not in proc.stdout
    assert f"POLARIS/{task_id}" in proc.stdout and f"{FILES} file(s) deleted" in proc.stdout
    assert not any(f.exists() for f in files)


def test_tasks_list_on_a_terminal_is_an_aligned_table(tmp_path: Path) -> None:
    url, _, task_id = _seed(tmp_path)
    code, screen = _run_in_pty([*CLI, "tasks", "list", "--metastore", url, "--grace-ms", "0"])
    assert code == 0, screen
    header, rule, row, *_ = screen.replace("\r\n", "\n").splitlines()
    assert header.startswith("ID ") and "STATE" in header and "LAST ERROR" in header
    assert row.startswith(str(task_id))
    assert row[header.index("STATE") :].split()[0] == "orphaned"
    assert row[header.index("REALM") :].split()[0] == "POLARIS"
    assert set(rule) == {"-", " "}


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, (*path, name))
    return out


def test_every_option_of_every_command_has_help_and_every_command_an_example() -> None:
    parsers = _parsers(build_parser())
    assert {" ".join(p) for p, _ in parsers} == {
        "",
        "init-metastore",
        "tasks",
        "tasks list",
        "tasks show",
        "tasks requeue",
        "sweep",
    }
    for path, parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help.strip(), (path, action.dest)
        proc = subprocess.run(
            [*CLI, *path, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**_env(), "COLUMNS": "100"},
        )
        assert proc.returncode == 0
        examples = proc.stdout.split("Example: ", 1)[1].splitlines()
        # Example lines are printed whole (never wrapped mid-option), so they paste.
        for line in examples:
            command = line.strip()
            assert command.startswith("polaris-pipeline" + (f" {path[0]}" if path else "")), line
            assert all(not word.endswith("-") for word in command.split()), line
        # Every option the command has is shown with its help text.
        for action in parser._actions:
            for flag in action.option_strings:
                assert flag in proc.stdout, (path, flag)
