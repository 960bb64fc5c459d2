"""The CLI as an operator sees it on a terminal: a real pseudo-terminal, a real sweep.

Every terminal here is 100 columns wide (set on the pseudo-terminal, no
``$COLUMNS``), as an operator's tmux pane. ``polaris-pipeline sweep`` over a
task with thousands of local files must show progress while it deletes (only
on a terminal), erase it, and end with a summary; piped, the same sweep prints
no progress at all. ``tasks list`` and ``tasks show`` fit the width, name the
table and cut batch children's names. Every option of every command has help
text, and every command's help ends with an example.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

import pytest

from builders.tasks import batch_task
from polaris_pipeline.cli.output import TerminalProgress
from polaris_pipeline.cli.parser import build_parser
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.config import UNBOUNDED_WARNING
from polaris_pipeline.tasks.model import Prop
from polaris_pipeline.tasks.ref import Lease
from tests.support.iceberg import recorded_drop_task

FILES = 5000
WIDTH = 100
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
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("POLARIS_") and k not in ("COLUMNS", "LINES")
    }


def _run_in_pty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal; all it wrote."""
    master, slave = pty.openpty()
    # rows, columns, x pixels, y pixels: the size the program finds with TIOCGWINSZ.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, WIDTH, 0, 0))
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
    code, screen = _run_in_pty([*CLI, "sweep", "--metastore", url, "--grace-ms", "0"])

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
    # Each progress line stays short of the width: a wrapped line cannot be taken back.
    transient = re.findall(r"\r(  [^\r\n\x1b]*)\x1b\[K", screen)
    assert transient and all(len(t) < WIDTH for t in transient)
    # Then the progress line is erased, and the task's line and the summary follow.
    # The warning that no allowed_prefixes bound the deletes (no storage config here):
    # once, at the start; the terminal wraps it.
    warning = f"polaris-pipeline: warning: {UNBOUNDED_WARNING}"
    assert screen.count(warning) == 1
    text = _visible(screen.replace(warning, ""))
    # At 100 columns the name gives way (the id stays whole), not what was done.
    line = rf"^done {{7}}POLARIS/{task_id} entityCleanup_1_batch_\d+…  ns\.t  deleted {FILES} "
    assert re.search(line + r"\(488\.3 KiB\)$", text, re.M), text
    assert "\nswept 1 task(s): 1 done\n" in text
    assert (
        f"\n  {FILES} file(s) deleted, 0 already gone, 0 refused, 488.3 KiB freed; children: none\n"
        in text
    )
    assert "batch files" not in text  # the progress line was erased, not left behind
    assert all(len(row) <= WIDTH for row in text.splitlines()), text
    assert not any(f.exists() for f in files)
    store = Metastore(url)
    try:
        assert store.list_tasks() == []
    finally:
        store.dispose()


def test_piped_sweep_prints_no_progress(tmp_path: Path) -> None:
    url, files, task_id = _seed(tmp_path)
    proc = subprocess.run(
        [*CLI, "sweep", "--metastore", url, "--grace-ms", "0"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # No progress, no escape codes in logs: only the warning that no allowed_prefixes
    # bound the deletes (no storage config here), once.
    assert proc.stderr.splitlines() == [f"polaris-pipeline: warning: {UNBOUNDED_WARNING}"]
    assert "\r" not in proc.stdout and "\x1b" not in proc.stdout
    assert f"POLARIS/{task_id}" in proc.stdout and f"{FILES} file(s) deleted" in proc.stdout
    # Piped: nothing is cut to a width (there is none).
    assert f"done       POLARIS/{task_id} entityCleanup_1_batch_{task_id}  ns.t" in proc.stdout
    assert not any(f.exists() for f in files)


def _screen_lines(screen: str) -> list[str]:
    return ANSI.sub("", screen).replace("\r\n", "\n").splitlines()


def _backlog(tmp_path: Path) -> tuple[str, dict[str, int]]:
    """What an operator finds: a dropped table, its batch children, a retry, a dead task."""
    url = f"sqlite:///{tmp_path}/polaris.db"
    store = Metastore(url)
    store.init_schema()
    now = store.now_ms()
    old = now - OLD_MS
    root = recorded_drop_task(
        "s3://lake/wh/sales/payments/metadata/00003.metadata.json",
        namespace=("sales",),
        name="payments",
        internal_properties={"storageLocation": "s3://lake/wh/sales/payments"},
    )
    root = dataclasses.replace(root, create_timestamp=old)
    files = [f"s3://lake/wh/ns/t/metadata/snap-{i:04d}-{uuid.uuid4()}.avro" for i in range(30)]
    child = batch_task(
        "POLARIS",
        files,
        name=f"{root.name}_[{', '.join(files)}]_{uuid.uuid4()}",
        create_timestamp=old,
    )
    retry = batch_task("POLARIS", files[:3], create_timestamp=old)
    label = f"POLARIS/{retry.id} {retry.name!r}"
    retry = dataclasses.replace(
        retry,
        properties={
            **retry.properties,
            Prop.ATTEMPT_COUNT: "2",
            Prop.STATUS: "failed",
            Prop.NEXT_ATTEMPT: str(now + 300_000),
            Prop.ERROR: f"task {label}: PermissionError: Access Denied for s3://lake/wh/ns/t",
        },
    )
    dead = dataclasses.replace(
        batch_task(
            "POLARIS",
            files[3:5],
            extra={Prop.STATUS: "dead", Prop.ATTEMPT_COUNT: "8", Prop.ERROR: "gave up"},
            create_timestamp=old,
        ),
        id=3008983788998583856,
    )
    store.insert_tasks([root, child, retry, dead])
    store.dispose()
    ids = {"root": root.id, "child": child.id, "retry": retry.id, "dead": dead.id}
    return url, ids


def test_tasks_list_fits_100_columns_with_table_next_and_cause(tmp_path: Path) -> None:
    url, ids = _backlog(tmp_path)
    code, screen = _run_in_pty([*CLI, "tasks", "list", "--metastore", url, "--grace-ms", "0"])
    assert code == 0, screen
    lines = _screen_lines(screen)
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    header, rule, *rows = lines
    # One realm throughout: its column is the first to give way, and the footer names it.
    assert header.split() == ["ID", "TYPE", "TABLE", "STATE", "ATT", "NEXT", "LAST", "ERROR"]
    assert set(rule) == {"-", " "}
    rows = rows[: rows.index("")]  # the footer follows a blank line
    by_id = {row.split()[0]: row for row in rows}
    assert set(by_id) == {str(i) for i in ids.values()}
    root = by_id[str(ids["root"])]
    assert root[header.index("TABLE") :].startswith("sales.payments ")
    assert root[header.index("STATE") :].split()[0] == "orphaned"
    assert by_id[str(ids["child"])][header.index("TABLE") :].startswith("ns.t ")
    retry = by_id[str(ids["retry"])]
    assert retry[header.index("STATE") :].split()[0] == "backing-off"
    assert re.match(r"in (4m5\d|5m00)s", retry[header.index("NEXT") :])
    # The error column shows the cause, not the task's label again.
    cause = retry[header.index("LAST ERROR") :]
    assert cause.startswith("PermissionErr")
    assert "task POLARIS/" not in screen
    # The batch child's thirty file names are nowhere: the name column or the label is cut.
    assert "snap-0001" not in screen
    assert "3 task(s)" not in screen and "4 task(s), 1 backing-off, 1 dead, 2 orphaned" in screen
    assert re.search(
        r"^not shown at 100 columns: .*REALM \(all POLARIS\).*\(--json has", screen, re.M
    )


def test_tasks_list_on_a_wide_terminal_shows_the_cut_batch_name(tmp_path: Path) -> None:
    url, ids = _backlog(tmp_path)
    env_cols = {"COLUMNS": "260"}
    proc = subprocess.run(
        [*CLI, "tasks", "list", "--metastore", url, "--grace-ms", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), **env_cols},
    )
    assert proc.returncode == 0, proc.stderr
    child = next(r for r in proc.stdout.splitlines() if r.startswith(str(ids["child"])))
    assert re.search(r"entityCleanup_\d+_\[30 files\]_[0-9a-f]{8}\b", child), child
    assert all(len(line) <= 260 for line in proc.stdout.splitlines())
    assert "not shown" not in proc.stdout


def test_tasks_show_on_a_terminal(tmp_path: Path) -> None:
    url, ids = _backlog(tmp_path)
    code, screen = _run_in_pty(
        [*CLI, "tasks", "show", str(ids["root"]), "--metastore", url, "--grace-ms", "0"]
    )
    assert code == 0, screen
    lines = _screen_lines(screen)
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    fields = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in lines}
    assert fields["type"] == "entity_cleanup_scheduler" and fields["table"] == "sales.payments"
    assert fields["metadata"] == "s3://lake/wh/sales/payments/metadata/00003.metadata.json"
    assert fields["state"] == "orphaned, 0 of 8 attempts"
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(10m0\ds ago\)", fields["created"]
    )
    code, screen = _run_in_pty([*CLI, "tasks", "show", str(ids["child"]), "--metastore", url])
    fields = {
        line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in _screen_lines(screen)
    }
    assert code == 0 and fields["files"] == "30 in the batch"
    assert re.fullmatch(
        rf"POLARIS/{ids['child']} entityCleanup_\d+_\[30 files\]_\w{{8}}", fields["task"]
    )


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, (*path, name))
    return out


@pytest.mark.slow
def test_every_option_of_every_command_has_help_and_every_command_an_example() -> None:
    parsers = _parsers(build_parser())
    # At least these (other commands are checked the same way below).
    assert {" ".join(p) for p, _ in parsers} >= {
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
        # Every option the command has is shown with its help text, except a deprecated
        # one (sweep --once), which is hidden.
        for action in parser._actions:
            for flag in action.option_strings:
                shown = action.help != argparse.SUPPRESS
                assert (flag in proc.stdout) == shown, (path, flag)


class _FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_progress_message_is_cut_short_of_the_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    stream = _FakeTerminal()
    progress = TerminalProgress(stream)
    lease = Lease("POLARIS", 3008983788998583856, "x", 1, 1, 0)
    progress(lease, 1, 3, "files of manifest file:///wh/" + "m" * 300 + ".avro")
    (segment,) = re.findall(r"\r(.*?)\x1b\[K", stream.getvalue())
    assert segment.startswith("  POLARIS/3008983788998583856: files of manifest")
    assert len(segment) == WIDTH - 1 and segment.endswith("…")
