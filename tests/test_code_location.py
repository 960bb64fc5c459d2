"""This repository's code location (``definitions.py``), composed from its own modules
(``resources``, ``jobs``, ``sensors``, ``assets``), is what ``build_defs_from_env()`` gives
under the same environment: the same names, statuses, schedules and resources."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from dagster import DefaultSensorStatus, Definitions

from polaris_pipeline.dagster import build_defs_from_env

# The modules that read the environment when imported, dependencies first.
LOCATION_MODULES = (
    "resources.location",
    "jobs.location",
    "sensors.location",
    "assets.location",
    "definitions",
)

ENVIRONMENT = {
    "POLARIS_PIPELINE_REALMS": "POLARIS,TEST",
    "POLARIS_PIPELINE_GRACE_MS": "1234",
    "POLARIS_PIPELINE_UNREFERENCED": "report",
    "POLARIS_PIPELINE_SWEEPER_AUTOSTART": "false",
    "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "7",
    "POLARIS_PIPELINE_RETENTION_CRON": "15 3 * * *",
    # A notifier for the alert sensors: built from the same settings in both.
    "POLARIS_PIPELINE_ALERT_WEBHOOK_URL": "https://hooks.example.invalid/T0/B0/x",
}


def _location_defs(monkeypatch: pytest.MonkeyPatch) -> Definitions:
    """``definitions.defs`` imported afresh under the current environment; the modules
    other tests imported are put back afterwards."""
    for name in LOCATION_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    defs = importlib.import_module("definitions").defs
    assert isinstance(defs, Definitions)
    return defs


def _shape(defs: Definitions) -> dict[str, Any]:
    repo = defs.get_repository_def()
    return {
        "jobs": sorted(j.name for j in repo.get_all_jobs()),
        "sensors": sorted((s.name, s.default_status) for s in repo.sensor_defs),
        "schedules": sorted(
            (s.name, s.cron_schedule, s.default_status) for s in repo.schedule_defs
        ),
        "assets": sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()),
        "checks": sorted(str(k) for k in repo.asset_graph.asset_check_keys),
        "resources": sorted((defs.resources or {}).keys()),
    }


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("POLARIS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("POLARIS_METASTORE_URL", f"sqlite:///{tmp_path}/unused.db")
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("environment")
def test_the_code_location_is_build_defs_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    location = _location_defs(monkeypatch)
    library = build_defs_from_env()
    assert _shape(location) == _shape(library)
    # The environment reached both (not merely the defaults): alerts, schedule, realms.
    shape = _shape(location)
    assert any(name == "polaris_run_failure_alert" for name, _ in shape["sensors"])
    assert ("polaris_task_sweeper", DefaultSensorStatus.STOPPED) in shape["sensors"]
    assert any(cron == "15 3 * * *" for _, cron, _ in shape["schedules"])
    # The backlog's four, held_tables_restorable and the leak report's one.
    assert len(shape["checks"]) == 6
    # The resources are the same objects' configuration, key by key.
    location_resources = location.resources or {}
    for key, resource in (library.resources or {}).items():
        assert location_resources[key] == resource, key
    assert location_resources["metastore"].realms == ["POLARIS", "TEST"]
    assert location_resources["metastore"].grace_ms == 1234


@pytest.mark.usefixtures("environment")
def test_the_code_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read when it loads: the sweeper autostarts here, and was STOPPED above."""
    monkeypatch.setenv("POLARIS_PIPELINE_SWEEPER_AUTOSTART", "true")
    location = _shape(_location_defs(monkeypatch))
    assert location == _shape(build_defs_from_env())
    assert ("polaris_task_sweeper", DefaultSensorStatus.RUNNING) in location["sensors"]


@pytest.mark.parametrize("package", ["assets", "jobs", "resources", "sensors"])
def test_each_top_level_package_defines_nothing_but_its_location(package: str) -> None:
    """No re-export list: the package holds ``location``, and no other name imports."""
    module = importlib.import_module(package)
    public = [n for n in vars(module) if not n.startswith("_")]
    assert set(public) <= {"location"}  # location: once something imported it
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nothing'"):
        module.nothing  # noqa: B018
