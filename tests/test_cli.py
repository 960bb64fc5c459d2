"""The operator CLI, against real metastores and local files."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from sqlalchemy import text

from builders.tasks import batch_task
from polaris_pipeline.cli import main
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, Prop
from polaris_pipeline.tasks.release import TESTED_RELEASES, PolarisRelease
from tests.support.cli import POLICY_FLAGS, run, url_of
from tests.support.iceberg import recorded_drop_task
from tests.support.tasks import seed

_COUNTDOWN = re.compile(r"in \d+[dhms](\d+[hms])?,")


def _without_countdowns(text: str) -> str:
    return _COUNTDOWN.sub("in …,", text)


ENV_VARS = (
    "POLARIS_METASTORE_URL",
    "POLARIS_PIPELINE_REALMS",
    "POLARIS_PIPELINE_LEASE_TIMEOUT_MS",
    "POLARIS_PIPELINE_GRACE_MS",
    "POLARIS_PIPELINE_MAX_ATTEMPTS",
    "POLARIS_PIPELINE_STORAGE_CONFIG",
    "COLUMNS",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def states(url: str, *flags: str) -> dict[str, str]:
    """Task id -> state, as ``tasks list --json`` gives them."""
    code, out = run("tasks", "list", "--metastore", url, "--json", *flags)
    assert code == 0, out
    return {d["id"]: d["state"] for d in json.loads(out)}


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
        "TABLE",
        "STATE",
        "ATT",
        "NEXT",
        "NAME",
        "EXECUTOR",
        "LAST",
        "ERROR",
    ]
    assert set(rule) == {"-", " "}
    # Columns are aligned: every row's STATE column starts where the header's does.
    col = header.index("STATE")
    assert sorted(row[col:].split()[0] for row in rows[:3]) == ["leased", "orphaned", "orphaned"]
    assert all(row[header.index("TABLE") :].startswith("ns.t ") for row in rows[:3])
    assert "3 task(s), 1 leased, 2 orphaned" in out
    code, out = run("tasks", "list", "--metastore", url, "--realm", "r2", "--json", *POLICY_FLAGS)
    docs = json.loads(out)
    assert code == 0 and len(docs) == 1
    assert docs[0]["realm"] == "r2" and docs[0]["state"] == "leased"
    assert docs[0]["executor"] == "exec-A" and docs[0]["type"] == "batch_file_cleanup"
    assert docs[0]["table"] == "ns.t" and isinstance(docs[0]["id"], str)
    code, out = run(
        "tasks", "list", "--metastore", url, "--state", "orphaned", "--json", *POLICY_FLAGS
    )
    assert {d["realm"] for d in json.loads(out)} == {"r1"}


def test_tasks_show_human_and_json_and_requeue(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1, extra={Prop.STATUS: "dead", Prop.ERROR: "gave up"})
    url = url_of(metastore)
    code, out = run("tasks", "show", str(task.id), "--metastore", url, *POLICY_FLAGS)
    assert code == 0, out
    fields = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in out.splitlines()}
    assert fields["task"] == f"r1/{task.id} {task.name}"
    assert fields["type"] == "batch_file_cleanup" and fields["table"] == "ns.t"
    assert fields["files"] == "0 in the batch" and fields["state"].startswith("dead")
    assert fields["last error"] == "gave up"
    code, out = run("tasks", "show", str(task.id), "--realm", "r1", "--metastore", url, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["state"] == "dead" and doc["last_error"] == "gave up"
    assert json.loads(doc["data"])["type"] == "TABLE_METADATA"
    assert doc["payload"]["table"] == "ns.t" and doc["payload"]["batch_files"] == 0
    code, out = run("tasks", "requeue", str(task.id), "--metastore", url, *POLICY_FLAGS)
    assert code == 0 and f"requeued task {task.id} in realm 'r1': now orphaned" in out
    code, _ = run("tasks", "show", "999", "--realm", "r1", "--metastore", url)
    assert code == 2


def test_requeue_refuses_an_override_no_refusal_asked_for_and_a_pending_task(
    metastore: Metastore, capsys: pytest.CaptureFixture[str]
) -> None:
    (dead,) = seed(metastore, "r1", 1, extra={Prop.STATUS: "dead", Prop.ERROR: "gave up"})
    url = url_of(metastore)
    before = metastore.get_task("r1", dead.id)
    code, _ = run("tasks", "requeue", str(dead.id), "--metastore", url, "--allow-shared-location")
    err = capsys.readouterr().err
    assert code == 2 and "was not refused for sharing its location; not requeued" in err, err
    assert metastore.get_task("r1", dead.id) == before  # no override left on the row

    # Never attempted and within its grace period: Polaris may be running it in-process.
    (fresh,) = seed(metastore, "r1", 1)
    before = metastore.get_task("r1", fresh.id)
    code, _ = run("tasks", "requeue", str(fresh.id), "--metastore", url, "--grace-ms", "600000")
    err = capsys.readouterr().err
    assert code == 2 and f"task r1/{fresh.id}" in err and "is pending" in err, err
    assert re.search(r"grace period ends in (59\d|600)s", err) and "--force" in err, err
    assert metastore.get_task("r1", fresh.id) == before  # entity_version not bumped
    code, out = run(
        "tasks", "requeue", str(fresh.id), "--metastore", url, "--grace-ms", "600000", "--force"
    )
    assert code == 0 and f"requeued task {fresh.id}" in out, out


def test_tasks_show_without_realm_refuses_an_id_in_two_realms(
    metastore: Metastore, capsys: pytest.CaptureFixture[str]
) -> None:
    (a,) = seed(metastore, "r1", 1)
    twin = NewTask("r2", a.id, a.name, a.properties, a.internal_properties)
    metastore.insert_tasks([twin])
    url = url_of(metastore)
    code, _ = run("tasks", "show", str(a.id), "--metastore", url)
    err = capsys.readouterr().err
    assert code == 2 and f"task id {a.id} is in several realms (r1, r2): pass --realm" in err
    code, out = run("tasks", "show", str(a.id), "--realm", "r2", "--metastore", url, "--json")
    assert code == 0 and json.loads(out)["realm"] == "r2"
    code, _ = run("tasks", "show", "12345", "--metastore", url)
    assert code == 2 and "no task 12345 in realms [r1, r2]" in capsys.readouterr().err


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

    code, out = run("sweep", "--metastore", url, "--dry-run", *POLICY_FLAGS)
    # The dry run counts the task the guard would fail, and exits as the sweep would.
    assert code == 1, out
    assert (
        "dry run: 2 task(s), 3 file(s) would be deleted, 1 task(s) would fail "
        "(an error or a refused path); nothing was changed"
    ) in out
    assert out.count("  delete  ") == 3 and "REFUSE" in out
    assert all(f.exists() for f in files)
    code, out = run("sweep", "--metastore", url, "--dry-run", "--json", *POLICY_FLAGS)
    assert code == 1 and json.loads(out)["would_fail"] == 1

    code, out = run("sweep", "--metastore", url, "--json", *POLICY_FLAGS)
    summary = json.loads(out)
    assert code == 1  # the refused task failed
    assert summary["done"] == 1 and summary["failed"] + summary["dead"] == 1
    assert summary["roots"]["tasks"] == 2 and summary["children"]["tasks"] == 0
    assert summary["files_deleted"] == 3 and summary["bytes_freed"] == 300
    assert summary["paths_refused"] == 1
    refused = [o for o in summary["outcomes"] if o["paths_refused"]]
    assert [o["id"] for o in refused] == [str(outside.id)]
    assert refused[0]["cause"].startswith("guard refused 1 path(s)")
    assert not any(f.exists() for f in files) and keep.exists()
    assert (tmp_path / "elsewhere.txt").read_text() == "precious"
    row = metastore.get_task("r1", outside.id)
    assert row is not None and "guard refused" in (row.last_error or "")


# -- settings: the environment, then the flags ---------------------------------------------


def _aged_task(store: Metastore, realm: str, **props: str) -> NewTask:
    task = batch_task(realm, extra=props, create_timestamp=store.now_ms() - 3_600_000)
    store.insert_tasks([task])
    return task


def test_cli_honours_grace_and_flag_beats_it(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fresh,) = seed(metastore, "r1", 1)  # created now, never leased
    url = url_of(metastore)
    assert states(url)[str(fresh.id)] == "pending"  # default grace: the lease timeout
    monkeypatch.setenv("POLARIS_PIPELINE_GRACE_MS", "0")
    assert states(url)[str(fresh.id)] == "orphaned"
    assert states(url, "--grace-ms", "3600000")[str(fresh.id)] == "pending"


def test_cli_honours_max_attempts_and_flag_beats_it(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = _aged_task(metastore, "r1", **{Prop.ATTEMPT_COUNT: "3"})
    url = url_of(metastore)
    assert states(url)[str(tried.id)] == "orphaned"  # default: 8 attempts
    monkeypatch.setenv("POLARIS_PIPELINE_MAX_ATTEMPTS", "3")
    assert states(url)[str(tried.id)] == "dead"
    assert states(url, "--max-attempts", "4")[str(tried.id)] == "orphaned"


def test_cli_honours_lease_timeout_and_flag_beats_it(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = str(metastore.now_ms() - 120_000)
    held = _aged_task(
        metastore,
        "r1",
        **{Prop.EXECUTOR: "polaris-1", Prop.START_TIME: started, Prop.ATTEMPT_COUNT: "1"},
    )
    url = url_of(metastore)
    assert states(url)[str(held.id)] == "leased"  # default: 300 s
    monkeypatch.setenv("POLARIS_PIPELINE_LEASE_TIMEOUT_MS", "60000")
    assert states(url)[str(held.id)] == "orphaned"
    assert states(url, "--lease-timeout-ms", "600000")[str(held.id)] == "leased"


def test_cli_honours_realms_in_list_and_sweep(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _aged_task(metastore, "r1")
    other = _aged_task(metastore, "r2")
    url = url_of(metastore)
    monkeypatch.setenv("POLARIS_PIPELINE_REALMS", "r1")
    assert set(states(url)) == {str(mine.id)}
    assert set(states(url, "--realm", "r2")) == {str(other.id)}
    code, out = run("sweep", "--metastore", url, "--json")
    assert code == 0, out
    assert [o["id"] for o in json.loads(out)["outcomes"]] == [str(mine.id)]
    # The other realm's task is untouched: the host is restricted to r1.
    assert metastore.get_task("r2", other.id) is not None
    assert metastore.get_task("r1", mine.id) is None


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "POLARIS_PIPELINE_MAX_ATTEMPTS",
            "eight",
            "POLARIS_PIPELINE_MAX_ATTEMPTS='eight': Input should be a valid integer",
        ),
        (
            "POLARIS_PIPELINE_LEASE_TIMEOUT_MS",
            "-1",
            "POLARIS_PIPELINE_LEASE_TIMEOUT_MS='-1': lease",
        ),
        ("POLARIS_PIPELINE_REALMS", ",", "POLARIS_PIPELINE_REALMS=',': names nothing"),
    ],
)
def test_a_bad_variable_is_one_line_and_exit_2(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    proc = subprocess.run(
        [sys.executable, "-m", "polaris_pipeline.cli", "tasks", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, name: value, "POLARIS_METASTORE_URL": f"sqlite:///{tmp_path}/x.db"},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"polaris-pipeline: error: {message}"), lines


# -- read-only commands and hostile input ------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tasks", "list", "--metastore", "nonsense"], "not a SQLAlchemy URL"),
        (["tasks", "list", "--metastore", "sqlite://relative"], "names a host"),
        (["tasks", "list", "--metastore", "postgresql://u:pw@h:port/db"], "not a SQLAlchemy URL"),
        (["tasks", "show", "1", "--metastore", "sqlite://"], "in-memory SQLite"),
        (["tasks", "list", "--metastore", "mysql://x/y"], "unsupported metastore backend"),
        # Polaris's NoSQL persistence is named, with why it cannot be leased.
        (
            ["tasks", "list", "--metastore", "mongodb://u:topsecret@h/polaris"],
            "a mongodb URL, not a relational Polaris metastore: Polaris's NoSQL persistence "
            "(MongoDB) cannot be leased from outside: its tasks are binary objects with no row "
            "to compare-and-set, and its own loadTasks stores no lease",
        ),
        (["sweep", "--metastore", "mongodb+srv://h/p"], "NoSQL persistence (MongoDB)"),
        (
            ["tasks", "list", "--metastore", "postgresql://u:topsecret@127.0.0.1:1/db"],
            "metastore postgresql+psycopg://u:***@127.0.0.1:1/db",
        ),
        # A flag's bad value is argparse's (tests/test_cli_setting_flags.py); --set's is
        # read with the settings.
        (
            ["tasks", "list", "--set", "metastore.lease_timeout_ms=0"],
            "--set metastore.lease_timeout_ms 0: lease timeout",
        ),
    ],
)
def test_errors_are_one_line_without_traceback(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process: an exception that escaped main() would fail the test by itself.
    code, out = run(*argv)
    assert code == 2 and out == ""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("polaris-pipeline: error:") and message in lines[0]
    assert "topsecret" not in lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["tasks", "list"],
        ["tasks", "show", "1"],
        ["sweep", "--dry-run"],
    ],
)
def test_read_only_commands_never_create_a_sqlite_file(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "typo.db"
    code, out = run(*argv, "--metastore", f"sqlite:///{db}")
    assert code == 2 and out == ""
    assert f"no SQLite metastore at {db}: the file does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_read_only_commands_change_no_row(metastore: Metastore, tmp_path: Path) -> None:
    """A dry run and the listings leave every row as it was (entity_version included)."""
    task = _aged_task(metastore, "r1")
    url = url_of(metastore)

    table = "polaris_schema.entities" if metastore.dialect == "postgresql" else "entities"

    def rows() -> list[tuple[object, ...]]:
        with metastore.engine.connect() as conn:
            return [
                tuple(r) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY realm_id, id"))
            ]

    before = rows()
    for argv in (
        ["tasks", "list"],
        ["tasks", "show", str(task.id)],
        ["sweep", "--dry-run"],
        ["sweep", "--dry-run", "--json"],
    ):
        code, out = run(*argv, "--metastore", url)
        assert code == 0, (argv, out)
    assert rows() == before


def test_a_dry_run_that_finds_nothing_says_why(metastore: Metastore) -> None:
    now = metastore.now_ms()
    seed(metastore, "r1", 1)  # pending within the default grace
    _aged_task(metastore, "r1", **{Prop.NEXT_ATTEMPT: str(now + 600_000), Prop.ATTEMPT_COUNT: "1"})
    _aged_task(
        metastore,
        "r1",
        **{Prop.EXECUTOR: "polaris-1", Prop.START_TIME: str(now), Prop.ATTEMPT_COUNT: "1"},
    )
    _aged_task(metastore, "r1", **{Prop.STATUS: "dead"})
    role = recorded_drop_task("file:///wh/x/metadata/v1.json", realm_id="r1")
    entity = {**json.loads(role.properties[Prop.DATA]), "typeCode": 2}  # a dropped principal

    def compact(doc: object) -> str:  # as Polaris's Jackson writes it
        return json.dumps(doc, separators=(",", ":"))

    metastore.insert_tasks(
        [dataclasses.replace(role, properties={**role.properties, Prop.DATA: compact(entity)})]
    )
    code, out = run("sweep", "--dry-run", "--metastore", url_of(metastore))
    assert code == 0
    assert "dry run: 0 task(s), 0 file(s) would be deleted; nothing was changed" in out
    reason = out.strip().splitlines()[-1]
    assert reason.startswith("nothing is available in any realm: 1 leased (the first lease")
    assert "1 backing off (the first retry is in 9m" in reason
    assert "1 pending within grace (the first grace period ends in 4m" in reason
    assert "1 dead" in reason and reason.count("Z)") == 3
    assert "1 unhandled (never run; `tasks discard` removes them)" in reason
    code, out = run("sweep", "--dry-run", "--json", "--metastore", url_of(metastore))
    doc = json.loads(out)
    # The two commands run a moment apart: the countdowns ("in 4m59s") may differ by a
    # second; every absolute time and every other word must not.
    assert doc["tasks"] == []
    assert _without_countdowns(doc["nothing_available"]) == _without_countdowns(reason)


def test_missing_schema_hint_on_sqlite_offers_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")  # an existing file, no tables
    code, _ = run("tasks", "list", "--metastore", f"sqlite:///{db}")
    assert code == 2
    err = capsys.readouterr().err
    assert "no Polaris entities table in sqlite:///" in err
    assert "run `polaris-pipeline init-metastore`" in err
    assert "NoSQL persistence (MongoDB) cannot be leased from outside" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
def test_missing_schema_hint_on_postgresql_names_the_schema_and_never_init(
    metastore_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("tasks", "list", "--metastore", metastore_url)
    assert code == 2
    err = capsys.readouterr().err
    assert "no Polaris entities table polaris_schema.entities in postgresql" in err
    assert "USAGE on schema polaris_schema" in err and "init-metastore" not in err
    # A database without Polaris's tables may be the sign of a NoSQL Polaris: say why not.
    assert "no row to compare-and-set, and its own loadTasks stores no lease" in err
    assert len(err.strip().splitlines()) == 1


def test_every_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["--help"],
        ["init-metastore", "--help"],
        ["grant-role", "--help"],
        ["tasks", "list", "--help"],
        ["tasks", "show", "--help"],
        ["tasks", "requeue", "--help"],
        ["sweep", "--help"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        assert "Example: polaris-pipeline" in capsys.readouterr().out, argv


def test_sweep_says_which_failures_are_permanent(metastore: Metastore) -> None:
    """A payload that cannot heal is dead at once, and the sweep's line and JSON say so;
    a transient failure keeps its backoff and says nothing of the kind."""
    old = metastore.now_ms() - 3_600_000
    broken = batch_task("POLARIS", create_timestamp=old)
    broken = dataclasses.replace(broken, properties={**broken.properties, Prop.DATA: "{not json"})
    metastore.insert_tasks([broken])

    code, out = run("sweep", "--metastore", url_of(metastore))
    assert code != 0
    [line] = [ln for ln in out.splitlines() if str(broken.id) in ln]
    assert line.startswith("dead") and "permanent failure, not retried" in line

    again = batch_task("POLARIS", create_timestamp=old)
    again = dataclasses.replace(again, properties={**again.properties, Prop.DATA: "{not json"})
    metastore.insert_tasks([again])
    code, out = run("sweep", "--json", "--metastore", url_of(metastore))
    [doc] = [d for d in json.loads(out)["outcomes"] if d["id"] == str(again.id)]
    assert doc["status"] == "dead" and doc["permanent"] is True
    code, out = run("tasks", "show", str(again.id), "--metastore", url_of(metastore))
    assert code == 0 and "permanent: retrying cannot heal it" in out


def test_an_untested_polaris_release_is_accepted_with_a_warning_naming_the_tested_ones(
    metastore: Metastore, capsys: pytest.CaptureFixture[str]
) -> None:
    url = url_of(metastore)
    code, _ = run("tasks", "list", "--metastore", url, "--polaris-version", "9.9")
    err = capsys.readouterr().err
    assert code == 0
    assert err == (
        "polaris-pipeline: warning: Polaris 9.9 is newer than the releases tested "
        "(1.0, 1.4.1, 1.6, 1.7): the rows written follow 1.7's rules, which 9.9 may have "
        "changed\n"
    )
    code, _ = run("tasks", "list", "--metastore", url, "--polaris-version", "1.7.2")
    assert code == 0 and capsys.readouterr().err == ""


def test_a_variable_under_the_prefix_that_names_no_setting_is_warned_of_without_v(
    tmp_path: Path,
) -> None:
    """The warning is logged, and the CLI's log is silent without -v: a typo of a variable
    would set nothing, and the operator would never hear of it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    Metastore(f"sqlite:///{tmp_path}/polaris.db").init_schema()
    proc = subprocess.run(
        [sys.executable, "-m", "polaris_pipeline.cli", "tasks", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **env,
            "POLARIS_METASTORE_URL": f"sqlite:///{tmp_path}/polaris.db",
            "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECOND": "30",
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        "polaris-pipeline: warning: POLARIS_PIPELINE_SWEEPER_INTERVAL_SECOND names no setting "
        "of polaris-pipeline and is ignored (did you mean "
        "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS?)\n"
    )


def test_storage_rules_set_inline_are_the_commands_storage_config(
    metastore: Metastore, capsys: pytest.CaptureFixture[str]
) -> None:
    """--set storage.allowed_prefixes and storage.locations are the storage config, as the
    resource's inline rules are: not ignored for want of a file."""
    url = url_of(metastore)
    code, _ = run("sweep", "--metastore", url, "--set", 'storage.allowed_prefixes=["/wh"]')
    assert code == 0
    assert "no allowed_prefixes" not in capsys.readouterr().err
    code, _ = run("sweep", "--metastore", url, "--set", 'storage.locations=[{"prefx": "/wh"}]')
    assert code == 2
    assert "locations[0]: unknown key 'prefx' (did you mean prefix?)" in capsys.readouterr().err


def test_a_sweep_deletes_nothing_outside_the_allowed_prefixes_set_inline(tmp_path: Path) -> None:
    """The attack the ignored --set opened: a file inside its own table, but outside the
    prefixes the operator allowed on the command line, was deleted."""
    store = Metastore(f"sqlite:///{tmp_path}/polaris.db")
    store.init_schema()
    table = tmp_path / "other" / "ns" / "t"
    table.mkdir(parents=True)
    (table / "data.parquet").write_text("kept")
    location = {"storageLocation": f"file://{table}"}
    task = batch_task("r1", [str(table / "data.parquet")], internal=location)
    store.insert_tasks([task])
    url = url_of(store)
    store.dispose()
    allowed = json.dumps([str(tmp_path / "wh")])
    code, _ = run(
        "sweep",
        "--metastore",
        url,
        "--grace-ms",
        "0",
        "--set",
        f"storage.allowed_prefixes={allowed}",
    )
    assert code == 1
    assert (table / "data.parquet").read_text() == "kept"


def test_the_tested_releases_are_those_whose_classes_the_compatibility_tests_load() -> None:
    listed = Path(__file__).parent / "polaris" / "releases"
    releases = [
        PolarisRelease.parse(line.split()[0])
        for line in listed.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert tuple(releases) == TESTED_RELEASES


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"polaris-pipeline {version('polaris-pipeline')}\n"


def test_a_failure_is_said_once_on_stdout_and_logged_on_stderr_only_with_v(
    tmp_path: Path,
) -> None:
    """Without -v stderr has no log: the outcome line says the failure (it said it twice)."""
    store = Metastore(f"sqlite:///{tmp_path}/polaris.db")
    store.init_schema()
    (tmp_path / "elsewhere.txt").write_text("precious")
    location = {"storageLocation": f"file://{tmp_path}/wh/ns/t"}
    task = batch_task("r1", [str(tmp_path / "elsewhere.txt")], internal=location)
    store.insert_tasks([task])
    url = url_of(store)
    store.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    cli = [sys.executable, "-m", "polaris_pipeline.cli"]
    sweep = ["sweep", "--metastore", url, "--grace-ms", "0"]
    quiet = subprocess.run([*cli, *sweep], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 1 and f"r1/{task.id}" in quiet.stdout
    assert str(task.id) not in quiet.stderr, quiet.stderr  # only the storage warning
    # Refused permanently at once: requeue it for the -v run.
    assert run("tasks", "requeue", str(task.id), "--metastore", url)[0] == 0
    loud = subprocess.run(
        [*cli, "-v", *sweep], capture_output=True, text=True, env=env, timeout=120
    )
    assert loud.returncode == 1 and f"r1/{task.id}" in loud.stdout
    assert re.search(rf"WARNING .*task r1/{task.id} .* failed \(attempt 1\)", loud.stderr)
