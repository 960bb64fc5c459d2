"""Every command, every argument, hostile values: never a traceback.

The walk takes each (sub)command the parser has and each argument that takes a value,
and gives it each hostile value: an id past a Java long (SQLite cannot even bind it),
a negative number, an empty string, an unknown word. The parser either refuses it with
one line on stderr naming the command and the argument, exit 2, the metastore untouched;
or accepts it, and the command then ends with an exit code of its own, not an exception.
"""

from __future__ import annotations

import argparse
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from polaris_pipeline.cli import main
from polaris_pipeline.cli.parser import build_parser
from polaris_pipeline.metastore import Metastore
from tests.support.cli import url_of
from tests.support.tasks import batch_task

HOSTILE = ["99999999999999999999999", "-3", "", "nosuch"]
# Arguments whose values are the operator's free text (a realm, a catalog, a path,
# a URL): any value but an empty one is a name like another and reaches the command.
# Every other argument is a number or a word from a list: each hostile value is refused.
FREE_TEXT = {
    "--metastore",
    "--realm",
    "--catalog",
    "--storage-config",
    "--deletion-record",
    "--reclaim",
    "--rest-uri",
    "--as",
    "ROLE",
}


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.append((path, parser))
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def _cases() -> list[tuple[tuple[str, ...], str, str]]:
    cases = []
    for path, parser in _commands():
        for action in parser._actions:
            if action.nargs == 0 or action.help == argparse.SUPPRESS:
                continue
            name = action.option_strings[0] if action.option_strings else action.metavar
            if name in ("-h", None):
                continue
            cases += [(path, str(name), value) for value in HOSTILE]
    return cases


CASES = _cases()


def test_the_walk_covers_every_command() -> None:
    commands = {" ".join(path) for path, _, _ in CASES}
    assert commands == {
        "init-metastore",
        "tasks list",
        "tasks show",
        "tasks requeue",
        "tasks run",
        "tasks discard",
        "sweep",
        "leaks",
        "guard-indexes",
        "grant-role",
        "tasks restore",
    }


def _rows(database: Path) -> list[tuple[object, ...]]:
    """Every row of the metastore's ``entities``, read with the sqlite3 module: a
    Metastore per read cost the walk a third of its time."""
    with closing(sqlite3.connect(database)) as conn:
        return conn.execute("SELECT * FROM entities ORDER BY id").fetchall()


@dataclass(frozen=True)
class Seeded:
    url: str
    database: Path
    task_id: int


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """A metastore with one task (fresh: inside its grace period, so nothing runs it)."""
    directory: Path = tmp_path_factory.mktemp("bad_input")
    database = directory / "polaris.db"
    store = Metastore(f"sqlite:///{database}")
    store.init_schema()
    task = batch_task("POLARIS", [f"file://{directory}/nothing.parquet"])
    store.insert_tasks([task])
    url = url_of(store)
    store.dispose()
    assert len(_rows(database)) == 1  # the walk's "nothing changed" reads the real rows
    return Seeded(url, database, task.id)


@pytest.mark.parametrize(("path", "argument", "value"), CASES, ids=lambda v: str(v) or "''")
def test_no_traceback_for_any_input(
    seeded: Seeded,
    path: tuple[str, ...],
    argument: str,
    value: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, task_id = seeded.url, seeded.task_id
    positional = argument in ("ID", "ROLE")
    argv = [*path, value] if positional else [*path]
    by_id = (("tasks", "show"), ("tasks", "requeue"), ("tasks", "run"), ("tasks", "restore"))
    if path in by_id and not positional:
        argv.append(str(task_id))
    # grant-role connects to nothing: it takes no --metastore.
    if argument != "--metastore" and path not in (("init-metastore",), ("grant-role",)):
        argv += ["--metastore", url]
    if not positional:
        argv += [f"{argument}={value}"]
    before = _rows(seeded.database)
    capsys.readouterr()
    try:
        code = main(argv, out=None)
    except SystemExit as exc:
        code = int(exc.code or 0)
        refused = True
    else:
        refused = False
    err = capsys.readouterr().err
    if argument not in FREE_TEXT or value == "":
        assert refused, (argv, err)
    if refused:
        assert code == 2
        [line] = err.splitlines()  # one line
        assert line.startswith(f"polaris-pipeline {' '.join(path)}: error: argument {argument}")
        assert _rows(seeded.database) == before  # nothing changed
    else:
        assert code in (0, 1, 2), err
        assert "Traceback" not in err
