"""Every field of every section, set through each front door, gives equal objects.

The table below holds a value for every field of every section (the test fails when a
section gains a field the table lacks), and each door is asked for the section it
builds: the environment (and the code location built from it), the CLI's ``--set`` and
its generated flags, the resources, ``build_defs`` and the component's YAML. A field that
one door cannot set fails the comparison for that door. The guard section is the
metastore resource's ``guard`` block (``NESTED_IN``); the others are resources.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import pytest
import yaml
from dagster import EnvVar
from dagster.components.core.component_tree import ComponentTree

from polaris_pipeline.cli.context import settings_for
from polaris_pipeline.cli.parser import build_parser
from polaris_pipeline.dagster import PolarisSweeper, build_defs
from polaris_pipeline.dagster.definitions import deployment_from_env
from polaris_pipeline.dagster.resources import PolarisMetastoreResource
from polaris_pipeline.settings import MetastoreSection, PipelineSettings, Section
from polaris_pipeline.settings.env import SECTIONS, env_variable, read_section
from polaris_pipeline.tasks.model import TaskPolicy
from tests.support.dagster import NESTED_IN, deployed_section

# section -> cases, each case field -> (value, the text a variable or --set gives).
# Storage has two cases: a file, or the same rules inline (one source at a time).
VALUES: dict[str, list[dict[str, tuple[Any, str]]]] = {
    "metastore": [
        {
            "url": ("sqlite:////tmp/doors.db", "sqlite:////tmp/doors.db"),
            "realms": (["POLARIS", "TEST"], "POLARIS,TEST"),
            "lease_timeout_ms": (60000, "60000"),
            "grace_ms": (1000, "1000"),
            "max_attempts": (4, "4"),
            "metadata_batch_size": (7, "7"),
            "polaris_version": ("1.7", "1.7"),
            "unreferenced": ("delete", "delete"),
            "realm_overrides": (
                {"TEST": {"lease_timeout_ms": 1000}},
                '{"TEST": {"lease_timeout_ms": 1000}}',
            ),
            "hold_days": (2.0, "2"),
            "catalog_hold_days": ({"finance": 30.0}, '{"finance": 30}'),
            "task_events": ("always", "always"),
            "executor_prefix": ("site-b", "site-b"),
        }
    ],
    "storage": [
        {
            "config_path": ("/etc/pp/storage.yaml", "/etc/pp/storage.yaml"),
            "deletion_record": ("file:///var/log/pp/", "file:///var/log/pp/"),
        },
        {
            "locations": (
                [{"prefix": "s3://b/wh/", "options": {"anon": True}}],
                '[{"prefix": "s3://b/wh/", "options": {"anon": true}}]',
            ),
            "allowed_prefixes": (["s3://b/wh/"], '["s3://b/wh/"]'),
        },
    ],
    "sweeper": [
        {
            "interval_seconds": (30.0, "30"),
            "jitter": (0.5, "0.5"),
            "max_runs_per_tick": (10, "10"),
            "max_pending_runs": (20, "20"),
            "autostart": (False, "false"),
        }
    ],
    "backlog": [
        {
            "max_orphan_age_seconds": (120.0, "120"),
            "many_attempts": (4, "4"),
            "freshness_intervals": (5.0, "5"),
            "sample_size": (2, "2"),
            "report_interval_seconds": (15.0, "15"),
        }
    ],
    "retention": [
        {
            "success_days": (14, "14"),
            "failure_days": (90, "90"),
            "batch_size": (250, "250"),
            "dry_run": (True, "true"),
            "cron": ("*/15 * * * *", "*/15 * * * *"),
        }
    ],
    "leaks": [
        {
            "max_bytes": (1024, "1024"),
            "catalogs": (["wh", "lake"], "wh,lake"),
            "cron": ("0 5 * * *", "0 5 * * *"),
            "min_age_days": (30.0, "30"),
            "auto_reclaim_catalogs": (["wh"], "wh"),
        }
    ],
    "alerts": [
        {
            "webhook_allow_http_insecure": (True, "true"),
            "smtp_starttls": (True, "true"),
            "smtp_login_insecure": (True, "true"),
            "webhook_url": ("http://hooks.example/T0", "http://hooks.example/T0"),
            "email_to": (["ops@example.com"], "ops@example.com"),
            "email_from": ("pp@example.com", "pp@example.com"),
            "smtp_host": ("mail.example.com", "mail.example.com"),
            "smtp_port": (587, "587"),
            "smtp_user": ("pp", "pp"),
            "smtp_password": ("pw", "pw"),
            "ui_url": ("https://dagster.example.com", "https://dagster.example.com"),
        }
    ],
    "executor": [
        {
            "task_executor": ("celery", "celery"),
            "celery_broker": ("pyamqp://u:pw@rabbit//", "pyamqp://u:pw@rabbit//"),
            "celery_backend": ("redis://r/1", "redis://r/1"),
            "celery_queue": ("q", "q"),
            "io_base_dir": ("/shared/steps", "/shared/steps"),
        }
    ],
    "guard": [{"bound_s": (2.5, "2.5")}],
    "restore": [
        {
            "rest_uri": ("https://polaris/api/catalog", "https://polaris/api/catalog"),
            "catalog": ("lake", "lake"),
            "client_id": ("root", "root"),
            "client_secret": ("s3cret", "s3cret"),
            "scope": ("PRINCIPAL_ROLE:x", "PRINCIPAL_ROLE:x"),
        }
    ],
}

# The blocks of PipelineSettings: what the CLI and the code location are built from.
BLOCKS = list(PipelineSettings.model_fields)
# Every section the CLI must reach (by --set, and a flag where a command has one): all
# but the executor's, which only a Dagster deployment's steps use. Named here, not read
# from PipelineSettings, so a section dropped from the CLI's settings fails.
CLI_SECTIONS = [section for section in VALUES if section != "executor"]
# The blocks a deployment has (build_defs' keywords and the component's blocks, or
# nested in one: NESTED_IN): every block of PipelineSettings but the alerts (no resource).
RESOURCES = [*(b for b in BLOCKS if b != "alerts")]
# Fields a deployment holds as a reference to the variable that gives them (EnvVar): the
# UI shows the variable's name, never the value.
AS_VARIABLE = {"metastore": {"url"}, "restore": {"client_secret"}}
# Fields no variable sets: the inline storage rules are YAML or Python.
NO_VARIABLE = {("storage", "locations"), ("storage", "allowed_prefixes")}

CASES = [(section, index) for section, cases in VALUES.items() for index in range(len(cases))]


def _expected(section: str, index: int) -> Section:
    values = {field: value for field, (value, _) in VALUES[section][index].items()}
    return SECTIONS[section][0](**values)


def _dump(section: Any, exclude: set[str] | None = None) -> dict[str, Any]:
    return json.loads(json.dumps(section.model_dump(exclude=exclude), default=str))


def test_the_table_has_every_field_of_every_section() -> None:
    """A new field (or section) fails here until the table, and so every door, has it."""
    assert set(VALUES) == set(SECTIONS)
    for section, (section_type, _) in SECTIONS.items():
        fields = {field for case in VALUES[section] for field in case}
        assert fields == set(section_type.model_fields), section
    # Every value differs from its default: a door that drops a field is seen.
    for section, index in CASES:
        default = SECTIONS[section][0]()
        for field in VALUES[section][index]:
            expected = getattr(_expected(section, index), field)
            assert expected != getattr(default, field), (section, field)


@pytest.mark.parametrize(("section", "index"), CASES)
def test_the_environment(section: str, index: int) -> None:
    case = VALUES[section][index]
    env = {
        name: text
        for field, (_, text) in case.items()
        if (name := env_variable(section, field)) is not None
    }
    unset = {(section, field) for field in case if env_variable(section, field) is None}
    assert unset <= NO_VARIABLE
    if unset:
        pytest.skip("no variable sets these fields (the inline storage rules)")
    assert read_section(section, env) == _expected(section, index)
    if section in BLOCKS:
        assert getattr(PipelineSettings.from_env(env), section) == _expected(section, index)
    if section in RESOURCES:
        deployed = deployed_section(deployment_from_env(env).resources, section)
        # The code location names the URL's (the secret's) variable, never the value.
        by_variable = AS_VARIABLE.get(section, set())
        for field in by_variable:
            assert getattr(deployed, field) == EnvVar(str(env_variable(section, field)))
        exclude = by_variable | _nested_blocks(section)
        assert _dump(deployed, exclude) == _dump(_expected(section, index), by_variable)


def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("POLARIS_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("section", "index"), [c for c in CASES if c[0] in CLI_SECTIONS])
def test_the_command_line(section: str, index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_environment(monkeypatch)
    argv = ["sweep"]
    for field, (_, text) in VALUES[section][index].items():
        argv += ["--set", f"{section}.{field}={text}"]
    settings = settings_for(build_parser().parse_args(argv))
    assert getattr(settings, section) == _expected(section, index)


def _setting_flags() -> list[tuple[tuple[str, ...], str, str, str, str]]:
    """Every generated setting flag of every command: (command, flag, section, field,
    help)."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.dest.startswith("setting:"):
                section, field = action.dest.removeprefix("setting:").split(".")
                help_text = str(action.help)
                found.append((path, action.option_strings[0], section, field, help_text))

    walk(build_parser(), ())
    return found


SETTING_FLAGS = _setting_flags()


def test_the_commands_that_run_guard_checks_take_the_guard_s_bound() -> None:
    """The guard's bound is a setting these commands use: each has its flag."""
    guarded = {path for path, _, section, _, _ in SETTING_FLAGS if section == "guard"}
    assert guarded == {("sweep",), ("tasks", "run"), ("tasks", "restore"), ("leaks",)}


@pytest.mark.parametrize(("path", "flag", "section", "field", "help_text"), SETTING_FLAGS)
def test_each_generated_flag(
    path: tuple[str, ...],
    flag: str,
    section: str,
    field: str,
    help_text: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sets its field as the table's text says, with its field's help."""
    _no_environment(monkeypatch)
    [case] = [case for case in VALUES[section] if field in case]
    value, text = case[field]
    argv = [*path, *(["1"] if path[-1] in ("show", "requeue", "run", "restore") else [])]
    settings = settings_for(build_parser().parse_args([*argv, flag, text]))
    assert getattr(getattr(settings, section), field) == value
    description = SECTIONS[section][0].model_fields[field].description
    assert description and help_text.startswith(description.replace("%", "%%"))


def _nested_blocks(section: str) -> set[str]:
    """The blocks of other sections inside ``section``'s resource."""
    return {name for name, outer in NESTED_IN.items() if outer == section}


def _resource(section: str, index: int) -> Any:
    resource_type = type(deployed_section(deployment_from_env({}).resources, section))
    values = {field: value for field, (value, _) in VALUES[section][index].items()}
    return resource_type(**values)


@pytest.mark.parametrize(("section", "index"), [c for c in CASES if c[0] in RESOURCES])
def test_the_resources_and_build_defs(section: str, index: int) -> None:
    expected = _dump(_expected(section, index))
    resource = _resource(section, index)
    assert _dump(resource, _nested_blocks(section)) == expected
    if section in NESTED_IN:
        # Given as the block of the resource it is nested in.
        outer = {"url": "sqlite:////tmp/doors.db", section: resource}
        given: dict[str, Any] = {NESTED_IN[section]: PolarisMetastoreResource(**outer)}
    else:
        given = {section: resource}
    defs = build_defs(**given)
    deployed = deployed_section(defs.resources or {}, section)
    assert _dump(deployed, _nested_blocks(section)) == expected


@pytest.mark.parametrize(("section", "index"), [c for c in CASES if c[0] in [*RESOURCES, "alerts"]])
def test_the_component_yaml(section: str, index: int) -> None:
    block = {field: value for field, (value, _) in VALUES[section][index].items()}
    attributes: dict[str, Any] = {"metastore": {"url": "sqlite:////tmp/doors.db"}}
    if section in NESTED_IN:
        attributes[NESTED_IN[section]][section] = block
    else:
        attributes[section] = {**attributes.get(section, {}), **block}
    component = PolarisSweeper.resolve_from_yaml(yaml.safe_dump(attributes))
    expected = _dump(_expected(section, index))
    blocks = {key: getattr(component, key) for key in attributes}
    assert _dump(deployed_section(blocks, section), _nested_blocks(section)) == expected
    if section in RESOURCES:
        defs = component.build_defs(ComponentTree.for_test().load_context)
        deployed = deployed_section(defs.resources or {}, section)
        assert _dump(deployed, _nested_blocks(section)) == expected


# The metastore section's fields that say where and as whom, not how tasks are run.
NOT_POLICY = {"url", "realms", "executor_prefix"}


def test_every_policy_field_of_the_metastore_section_reaches_the_task_policy() -> None:
    """TaskPolicy is the section resolved: a field it drops fails here, and its defaults
    are the section's (no second list)."""
    assert TaskPolicy.from_section(MetastoreSection()) == TaskPolicy()
    for field, (value, _) in VALUES["metastore"][0].items():
        if field in NOT_POLICY:
            continue
        policy = TaskPolicy.from_section(MetastoreSection(**{field: value}))
        assert policy != TaskPolicy(), field
