"""The CLI's setting flags are generated from the schema: name, help, value and rule."""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path

import pytest

from polaris_pipeline.cli.context import open_metastore, settings_for
from polaris_pipeline.cli.parser import build_parser
from polaris_pipeline.settings import PipelineSettings, env_variable


def _subparser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return parser


def _setting_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest.startswith("setting:")}


def test_each_flag_s_help_is_its_field_s_description_and_variable() -> None:
    flags = _setting_flags(_subparser("sweep"))
    assert set(flags) == {
        "setting:metastore.url",
        "setting:metastore.realms",
        "setting:metastore.lease_timeout_ms",
        "setting:metastore.grace_ms",
        "setting:metastore.max_attempts",
        "setting:metastore.polaris_version",
        "setting:metastore.unreferenced",
        "setting:storage.config_path",
        "setting:storage.deletion_record",
        "setting:guard.bound_s",
    }
    for dest, action in flags.items():
        section, field = dest.removeprefix("setting:").split(".")
        info = PipelineSettings.section_type(section).model_fields[field]
        assert info.description and action.help
        assert action.help.startswith(info.description.replace("%", "%%")), dest
        assert f"${env_variable(section, field)}" in action.help
    # The names every example uses are kept.
    names = {a.option_strings[0] for a in flags.values()}
    assert {"--metastore", "--realm", "--storage-config", "--lease-timeout-ms"} <= names
    assert "--guard-bound-s" in names


def test_flags_set_their_fields_and_beat_set_and_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith("POLARIS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("POLARIS_PIPELINE_MAX_ATTEMPTS", "3")
    args = build_parser().parse_args(
        [
            "sweep",
            "--realm",
            "A",
            "--realm",
            "B,A",
            "--lease-timeout-ms",
            "60000",
            "--unreferenced",
            "delete",
            "--set",
            "metastore.lease_timeout_ms=1000",
            "--set",
            "metastore.grace_ms=5",
        ]
    )
    m = settings_for(args).metastore
    assert m.realms == ["A", "B"]
    assert m.lease_timeout_ms == 60000  # the flag beats --set
    assert m.grace_ms == 5 and m.max_attempts == 3 and m.unreferenced == "delete"
    args = build_parser().parse_args(["leaks", "--min-age-days", "30"])
    assert settings_for(args).leaks.min_age_days == 30.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sweep", "--max-attempts=0"], "argument --max-attempts: '0': max attempts must be"),
        (["sweep", "--grace-ms=2e3"], "argument --grace-ms: '2e3': Input should be a valid int"),
        (["leaks", "--min-age-days=0.5"], "minimum age in days must be at least 1, not 0.5"),
        (
            ["tasks", "list", "--lease-timeout-ms=99999999999999999999999"],
            "lease timeout ms must be at most 9223372036854775807",
        ),
    ],
)
def test_a_bad_flag_is_refused_by_its_field_s_rule(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert message in line


def test_the_guard_bound_flag_is_the_metastore_s_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every guard check of a command asks its store for the bound (Metastore.guard_bound_s)."""
    for name in list(os.environ):
        if name.startswith("POLARIS_"):
            monkeypatch.delenv(name)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    args = build_parser().parse_args(["sweep", "--metastore", url, "--guard-bound-s", "2.5"])
    sqlite3.connect(tmp_path / "m.db").close()
    for read_only in (False, True):
        store = open_metastore(settings_for(args), read_only=read_only)
        assert store.guard_bound_s == 2.5
        store.dispose()
