"""This repository's code location (``definitions.py``), composed from its own modules
(``resources``, ``jobs``, ``sensors``, ``assets``): what it holds under an environment,
and that it reads the environment when it loads."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest
from dagster import DefaultScheduleStatus, DefaultSensorStatus, Definitions

from polaris_pipeline.dagster import TASK_EXECUTOR_ENV
from tests.support.code_location import import_location

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
    defs = import_location(monkeypatch).defs
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


# What this deployment's location holds under ENVIRONMENT: every job, sensor, schedule,
# asset, check and resource by name, so a piece dropped from one of its modules, or one
# the environment did not reach, fails here.
JOBS = [
    "__ASSET_JOB",
    "polaris_leak_reclaim_job",
    "polaris_leak_report_job",
    "polaris_realm_backfill_job",
    "polaris_restore_table_job",
    "polaris_run_retention_job",
    "polaris_task_job",
]
SENSORS = [
    ("polaris_check_failure_alert", DefaultSensorStatus.RUNNING),  # the webhook is set
    ("polaris_run_failure_alert", DefaultSensorStatus.RUNNING),
    ("polaris_run_report", DefaultSensorStatus.RUNNING),
    ("polaris_sweeper_watch", DefaultSensorStatus.RUNNING),
    ("polaris_task_sweeper", DefaultSensorStatus.STOPPED),  # SWEEPER_AUTOSTART=false
]
SCHEDULES = [
    ("polaris_leak_report_schedule", "0 4 * * 0", DefaultScheduleStatus.STOPPED),
    ("polaris_run_retention", "15 3 * * *", DefaultScheduleStatus.RUNNING),  # retention set
]
CHECKS = [
    "leaked_bytes_below_threshold",
    "held_tables_restorable",
    "no_dead_tasks",
    "no_failing_tasks",
    "no_stale_orphans",
    "sweeper_is_sweeping",
]


@pytest.mark.usefixtures("environment")
def test_the_code_location_holds_the_deployment_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    location = _location_defs(monkeypatch)
    shape = _shape(location)
    assert shape["jobs"] == JOBS
    assert shape["sensors"] == SENSORS
    assert shape["schedules"] == SCHEDULES
    assert shape["assets"] == ["polaris_leaked_roots", "polaris_task_backlog"]
    assert sorted(check.rsplit("name='", 1)[1].rstrip("')") for check in shape["checks"]) == sorted(
        CHECKS
    )
    assert shape["resources"] == [
        "backlog",
        "leaks",
        "metastore",
        "restore",
        "retention",
        "storage",
        "sweeper",
    ]
    resources = location.resources or {}
    assert resources["metastore"].realms == ["POLARIS", "TEST"]
    assert resources["metastore"].grace_ms == 1234
    assert resources["metastore"].unreferenced == "report"
    assert resources["retention"].success_days == 7


@pytest.mark.usefixtures("environment")
def test_the_code_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read when it loads: the sweeper autostarts here, and was STOPPED above."""
    monkeypatch.setenv("POLARIS_PIPELINE_SWEEPER_AUTOSTART", "true")
    location = _shape(_location_defs(monkeypatch))
    assert ("polaris_task_sweeper", DefaultSensorStatus.RUNNING) in location["sensors"]


@pytest.mark.parametrize("package", ["assets", "jobs", "resources", "sensors"])
def test_each_top_level_package_defines_nothing_but_its_location(package: str) -> None:
    """No re-export list: the package holds ``location``, and no other name imports."""
    module = importlib.import_module(package)
    public = [n for n in vars(module) if not n.startswith("_")]
    assert set(public) <= {"location"}  # location: once something imported it
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nothing'"):
        module.nothing  # noqa: B018


@pytest.mark.usefixtures("environment")
def test_the_celery_location_is_this_location_on_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    """One composition: ``celery_definitions`` is ``definitions`` when the environment
    chooses Celery, and refuses to load when it does not."""
    with pytest.raises(ImportError, match=f"needs {TASK_EXECUTOR_ENV}=celery .* not unset"):
        import_location(monkeypatch, "celery_definitions")
    monkeypatch.setenv(TASK_EXECUTOR_ENV, "celery")
    celery = import_location(monkeypatch, "celery_definitions").defs
    assert celery is importlib.import_module("definitions").defs
    assert celery.get_job_def("polaris_task_job").executor_def.name == "celery"
    assert _shape(celery)["jobs"] == JOBS
