"""The ``PolarisSweeper`` Component, loaded from a ``defs.yaml`` the way ``dg`` loads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, EnvVar, SensorResult, build_sensor_context
from dagster.components.testing import create_defs_folder_sandbox

from polaris_pipeline.dagster import PolarisSweeper
from polaris_pipeline.dagster.backlog import no_dead_tasks, no_stale_orphans
from polaris_pipeline.dagster.contract import JOB_NAME
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import URL_ENV
from tests.support.dagster import NESTED_IN, deployed_section
from tests.support.tasks import seed

ATTRIBUTES: dict[str, Any] = {
    "metastore": {
        "url": "{{ env.POLARIS_METASTORE_URL }}",
        "realms": ["POLARIS"],
        "grace_ms": 0,
    },
    "sweeper": {"interval_seconds": 5, "jitter": 0.1, "max_runs_per_tick": 7},
    "executor": "in_process",
}
# The same, as flat keys outside the blocks: refused.
FLAT_ATTRIBUTES: dict[str, Any] = {
    "metastore_url": "{{ env.POLARIS_METASTORE_URL }}",
    "realms": ["POLARIS"],
    "grace_ms": 0,
    "sweep": {"interval_seconds": 5, "jitter": 0.1, "max_runs_per_tick": 7},
    "executor": "in_process",
}
DEFS_YAML: dict[str, Any] = {
    "type": "polaris_pipeline.dagster.PolarisSweeper",
    "attributes": ATTRIBUTES,
}


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
def test_defs_yaml_gives_the_sweeper_the_jobs_and_the_checks(
    metastore: Metastore, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = metastore.url.render_as_string(hide_password=False)
    monkeypatch.setenv(URL_ENV, url)
    seed(metastore, "POLARIS", 3, create_timestamp=metastore.now_ms() - 60_000)
    seed(metastore, "OTHER", 2, create_timestamp=metastore.now_ms() - 60_000)

    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=PolarisSweeper, defs_yaml_contents=DEFS_YAML
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            assert isinstance(component, PolarisSweeper)
            assert component.metastore is not None
            assert component.metastore.realms == ["POLARIS"]
            assert defs.resolve_job_def(JOB_NAME).executor_def.name == "in_process"
            check_keys = set(defs.resolve_asset_graph().asset_check_keys)
            assert {no_dead_tasks.check_key, no_stale_orphans.check_key} <= check_keys
            resources = dict(defs.resources or {})
            # The template resolved to the URL, but the resource names the variable:
            # the UI's resource page never shows the URL.
            assert resources["metastore"].url == EnvVar(URL_ENV)
            assert resources["sweeper"].max_runs_per_tick == 7
            assert resources["sweeper"].interval_seconds == 5
            sensor = defs.resolve_sensor_def(SENSOR_NAME)
            with build_sensor_context(instance=instance, resources=resources) as context:
                result = sensor(context)
    assert isinstance(result, SensorResult)
    realms = {r.tags["polaris/realm"] for r in result.run_requests or []}
    assert realms == {"POLARIS"}  # the component's realms, not every realm
    assert len(result.run_requests or []) == 3


def test_a_mistyped_attribute_is_refused() -> None:
    bad = {**DEFS_YAML, "attributes": {**ATTRIBUTES, "realm": ["POLARIS"]}}
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(component_cls=PolarisSweeper, defs_yaml_contents=bad)
        with (
            pytest.raises(Exception) as error,
            sandbox.load_component_and_build_defs(defs_path=defs_path),
        ):
            pass
    causes = []
    cause: BaseException | None = error.value
    while cause is not None:
        causes.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    assert any("realm" in text and "extra" in text.lower() for text in causes), causes


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dg_project"


def _dg(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dg = Path(sys.executable).parent / "dg"
    return subprocess.run(
        [str(dg), *args], cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_dg_lists_the_component_and_checks_the_example_project(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(EXAMPLE / "src"),
        URL_ENV: f"sqlite:///{tmp_path / 'polaris.db'}",
        "DAGSTER_HOME": str(tmp_path),
    }
    listed = _dg("list", "components", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    keys = {entry["key"] for entry in json.loads(listed.stdout)["items"]}
    assert "polaris_pipeline.dagster.PolarisSweeper" in keys
    checked = _dg("check", "defs", "--use-active-venv", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
def test_the_polaris_release_reaches_the_resource_and_the_sensor_logs_it(
    metastore: Metastore,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The release and a realm's own reach the lease policy; each tick that selects work
    logs the release each realm's rows are written for, and why."""
    monkeypatch.setenv(URL_ENV, metastore.url.render_as_string(hide_password=False))
    seed(metastore, "POLARIS", 1, create_timestamp=metastore.now_ms() - 60_000)
    seed(metastore, "TEST", 1, create_timestamp=metastore.now_ms() - 60_000)
    attributes = {
        **ATTRIBUTES,
        "metastore": {
            **ATTRIBUTES["metastore"],
            "realms": ["POLARIS", "TEST"],
            "polaris_version": "1.7.0",
            "realm_overrides": {"TEST": {"polaris_version": "1.4.1"}},
        },
    }
    yaml = {**DEFS_YAML, "attributes": attributes}
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=PolarisSweeper, defs_yaml_contents=yaml
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_, defs):
            resources = dict(defs.resources or {})
            policy = resources["metastore"].policy()
            sensor = defs.resolve_sensor_def(SENSOR_NAME)
            with build_sensor_context(instance=instance, resources=resources) as context:
                # The sensor's logger is Dagster's own, outside logging's tree: listen to it.
                context.log.addHandler(caplog.handler)
                sensor(context)
    assert policy.for_realm("POLARIS").polaris_version == "1.7"
    assert policy.for_realm("TEST").polaris_version == "1.4.1"
    lines = [r.getMessage() for r in caplog.records if "Polaris release:" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert "POLARIS: Polaris 1.7 (configured (metastore.polaris_version))" in lines[0]
    assert "TEST: Polaris 1.4.1 (configured for the realm)" in lines[0]


@pytest.mark.parametrize("value", [1.7, "1.x"])
def test_a_release_that_is_not_quoted_text_is_refused(
    value: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path / 'polaris.db'}")
    metastore = {**ATTRIBUTES["metastore"], "polaris_version": value}
    bad = {**DEFS_YAML, "attributes": {**ATTRIBUTES, "metastore": metastore}}
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(component_cls=PolarisSweeper, defs_yaml_contents=bad)
        with (
            pytest.raises(Exception) as error,
            sandbox.load_component_and_build_defs(defs_path=defs_path),
        ):
            pass
    causes = []
    cause: BaseException | None = error.value
    while cause is not None:
        causes.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    # YAML's 1.7 is a number (1.10 would be 1.1): refused as not a string.
    expected = "string" if isinstance(value, float) else "not a Polaris release"
    assert any("polaris_version" in t and expected in t for t in causes), causes


def _load_resources(attributes: dict[str, Any]) -> dict[str, Any]:
    yaml = {**DEFS_YAML, "attributes": attributes}
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=PolarisSweeper, defs_yaml_contents=yaml
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_, defs):
            return dict(defs.resources or {})


# A value other than the default for every field of every section: the component sets
# each (the blocks are the resources), and a section's new field must be added here.
EVERY_SETTING: dict[str, dict[str, Any]] = {
    "metastore": {
        "url": "sqlite:///every.db",
        "realms": ["POLARIS", "TEST"],
        "lease_timeout_ms": 60_000,
        "grace_ms": 1_000,
        "max_attempts": 3,
        "metadata_batch_size": 4,
        "polaris_version": "1.6",
        "unreferenced": "delete",
        "realm_overrides": {"TEST": {"lease_timeout_ms": 5_000, "unreferenced": "off"}},
        "task_events": "always",
        "executor_prefix": "site-b",
        "hold_days": 7.0,
        "catalog_hold_days": {"finance": 30.0},
    },
    "storage": {
        "config_path": None,
        "locations": [{"prefix": "file:///wh", "options": {}}],
        "allowed_prefixes": ["file:///wh"],
        "deletion_record": "file:///var/log/pp/",
    },
    "sweeper": {
        "interval_seconds": 5.0,
        "jitter": 0.5,
        "max_runs_per_tick": 7,
        "max_pending_runs": 9,
        "autostart": False,
    },
    "backlog": {
        "max_orphan_age_seconds": 120.0,
        "many_attempts": 2,
        "freshness_intervals": 4.0,
        "sample_size": 3,
        "report_interval_seconds": 30.0,
    },
    "retention": {
        "success_days": 14,
        "failure_days": 90,
        "batch_size": 50,
        "dry_run": True,
        "cron": "*/15 * * * *",
    },
    "alerts": {
        "webhook_allow_http_insecure": True,
        "webhook_url": "http://127.0.0.1:9/hook",
        "email_to": ["ops@example.com"],
        "email_from": "pp@example.com",
        "smtp_host": "mail.example.com",
        "smtp_port": 587,
        "smtp_user": "pp",
        "smtp_password": "not-shown",
        "smtp_starttls": True,
        "smtp_login_insecure": True,
        "ui_url": "https://dagster.example.com",
    },
    "leaks": {
        "max_bytes": 1024,
        "catalogs": ["wh"],
        "cron": "0 5 * * *",
        "min_age_days": 30.0,
        "auto_reclaim_catalogs": ["wh"],
    },
    "guard": {"bound_s": 2.5},
    "restore": {
        "rest_uri": "https://polaris.example.com/api/catalog",
        "catalog": "lake",
        "client_id": "pp",
        "client_secret": "s3cret",
        "scope": "PRINCIPAL_ROLE:x",
    },
}


def _attributes(settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``settings`` as the component's attributes, each nested section in its block."""
    attributes: dict[str, Any] = {k: v for k, v in settings.items() if k not in NESTED_IN}
    for name, outer in NESTED_IN.items():
        attributes[outer] = {**attributes[outer], name: settings[name]}
    return attributes


def _block_values(resources: dict[str, Any], name: str) -> dict[str, Any]:
    """What the deployed resources hold of section ``name``, as its block spells it."""
    nested = {k for k, outer in NESTED_IN.items() if outer == name}
    dumped: dict[str, Any] = deployed_section(resources, name).model_dump(exclude=nested)
    return dumped


def test_every_setting_of_every_section_is_a_key_of_its_block(tmp_path: Path) -> None:
    from polaris_pipeline.settings import PipelineSettings

    sections = PipelineSettings.model_fields
    assert set(EVERY_SETTING) == set(sections)
    for name, values in EVERY_SETTING.items():
        section_type = sections[name].annotation
        assert section_type is not None
        assert set(values) == set(section_type.model_fields), name
        defaults = section_type().model_dump() if name != "metastore" else {}
        changed = {k for k, v in values.items() if defaults.get(k, object()) != v}
        assert changed >= set(values) - {"config_path"}, name  # each value is not the default
    resources = _load_resources({**_attributes(EVERY_SETTING), "executor": "in_process"})
    for name, values in EVERY_SETTING.items():
        if name == "alerts":
            continue  # not a resource: the alert sensors, below
        dumped = _block_values(resources, name)
        if name == "metastore":
            dumped["realm_overrides"] = {
                realm: {k: v for k, v in o.items() if v is not None}
                for realm, o in dumped["realm_overrides"].items()
            }
        assert dumped == values, name
    # The resources built the policy the runs lease under.
    policy = resources["metastore"].policy()
    assert policy.for_realm("TEST").lease_timeout_ms == 5_000
    assert policy.for_realm("TEST").unreferenced.value == "off"
    assert policy.for_realm("POLARIS").unreferenced.value == "delete"
    assert policy.hold_ms_for("POLARIS", "finance") == 30 * 86_400_000


def test_a_flat_key_outside_the_blocks_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No flat keys (``metastore_url``, ``sweep``, ...): every setting lives in its block."""
    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path / 'polaris.db'}")
    with pytest.raises(Exception) as error:
        _load_resources(FLAT_ATTRIBUTES)
    causes = []
    cause: BaseException | None = error.value
    while cause is not None:
        causes.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    assert any("metastore_url" in text and "extra" in text.lower() for text in causes), causes


@pytest.mark.parametrize(
    ("block", "bad", "field"),
    [
        ("metastore", {"lease_timeout_ms": 0}, "lease_timeout_ms"),
        ("metastore", {"realm_overrides": {"TEST": {"grace_ms": -1}}}, "grace_ms"),
        ("metastore", {"task_events": "sometimes"}, "task_events"),
        ("sweeper", {"jitter": 11}, "jitter"),
        ("retention", {"success_days": 0}, "success_days"),
        ("leaks", {"min_age_days": 0.5}, "min_age_days"),
        ("storage", {"deletion_record": "relative/path"}, "deletion_record"),
        ("storage", {"config_path": "/x.yaml", "allowed_prefixes": ["/x"]}, "either"),
    ],
)
def test_a_bad_value_in_a_block_is_refused_naming_its_field(
    block: str, bad: dict[str, Any], field: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path / 'polaris.db'}")
    attributes = {**ATTRIBUTES, block: {**ATTRIBUTES.get(block, {}), **bad}}
    with pytest.raises(Exception) as error:
        _load_resources(attributes)
    causes = []
    cause: BaseException | None = error.value
    while cause is not None:
        causes.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    assert any(field in text for text in causes), causes


def test_the_alerts_block_gives_the_alert_sensors_and_keeps_its_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from polaris_pipeline.dagster.alerts import CHECK_ALERT_NAME, RUN_ALERT_NAME

    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path / 'polaris.db'}")
    monkeypatch.setenv("HOOK_FOR_TEST", "https://hooks.example.com/T0/SECRET")

    def sensors(attributes: dict[str, Any]) -> set[str]:
        yaml = {**DEFS_YAML, "attributes": attributes}
        with create_defs_folder_sandbox() as sandbox:
            path = sandbox.scaffold_component(component_cls=PolarisSweeper, defs_yaml_contents=yaml)
            with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
                assert "SECRET" not in repr(component)
                return {s.name for s in defs.get_repository_def().sensor_defs}

    alerts = {"webhook_url": "{{ env.HOOK_FOR_TEST }}", "ui_url": "https://dagster.example.com"}
    assert {RUN_ALERT_NAME, CHECK_ALERT_NAME} <= sensors({**ATTRIBUTES, "alerts": alerts})
    assert not {RUN_ALERT_NAME, CHECK_ALERT_NAME} & sensors(ATTRIBUTES)
