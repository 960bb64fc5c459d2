"""One settings object: every variable read, each default once, bad values named."""

from __future__ import annotations

import pytest

from polaris_pipeline.settings import (
    _SPECS,
    GRACE_ENV,
    LEASE_TIMEOUT_ENV,
    MAX_ATTEMPTS_ENV,
    REALMS_ENV,
    PipelineSettings,
    SettingsError,
)
from polaris_pipeline.tasks.model import LeasePolicy, RealmOverride
from polaris_pipeline.tasks.unreferenced_mode import UnreferencedMode


def test_defaults_are_the_lease_policy_s() -> None:
    settings = PipelineSettings.from_env({})
    assert settings == PipelineSettings()
    assert settings.policy == LeasePolicy()
    assert settings.metastore_url is None and settings.realms is None
    assert settings.storage_config is None and settings.executor_prefix is None


def test_every_variable_is_read() -> None:
    env = {
        "POLARIS_METASTORE_URL": "sqlite:////tmp/p.db",
        REALMS_ENV: " POLARIS , TEST,,POLARIS ",
        LEASE_TIMEOUT_ENV: "60000",
        GRACE_ENV: "0",
        MAX_ATTEMPTS_ENV: "3",
        "POLARIS_PIPELINE_METADATA_BATCH_SIZE": "4",
        "POLARIS_PIPELINE_REALM_OVERRIDES": '{"TEST": {"lease_timeout_ms": 1000}}',
        "POLARIS_PIPELINE_POLARIS_VERSION": " 1.7.0 ",
        "POLARIS_PIPELINE_STORAGE_CONFIG": "/etc/storage.yaml",
        "POLARIS_PIPELINE_EXECUTOR_PREFIX": "site-b",
        "POLARIS_PIPELINE_SWEEP_INTERVAL_S": "30",
        "POLARIS_PIPELINE_SWEEP_JITTER": "0.5",
        "POLARIS_PIPELINE_SWEEP_MAX_RUNS": "10",
        "POLARIS_PIPELINE_SWEEP_MAX_PENDING_RUNS": "20",
        "POLARIS_PIPELINE_MAX_ORPHAN_AGE_S": "120",
        "POLARIS_PIPELINE_SWEEPER_AUTOSTART": "True",
        "POLARIS_PIPELINE_TASK_EVENTS": "true",
        "POLARIS_PIPELINE_UNREFERENCED": "delete",
        "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "14",
        "POLARIS_PIPELINE_RETENTION_FAILURE_DAYS": "90",
        "POLARIS_PIPELINE_RETENTION_BATCH_SIZE": "250",
        "POLARIS_PIPELINE_RETENTION_DRY_RUN": "true",
        "POLARIS_PIPELINE_RETENTION_CRON": "*/15 * * * *",
        "POLARIS_PIPELINE_LEAK_MAX_BYTES": "1073741824",
        "POLARIS_PIPELINE_LEAK_CRON": "0 5 * * *",
        "POLARIS_PIPELINE_LEAK_MIN_AGE_DAYS": "30",
        "POLARIS_PIPELINE_LEAK_AUTO_RECLAIM_CATALOGS": " sales,,ops ",
        "POLARIS_PIPELINE_DELETION_RECORD": " s3://audit/polaris-pipeline/ ",
    }
    assert set(env) == {spec.env for spec in _SPECS.values()}
    s = PipelineSettings.from_env(env)
    assert s.metastore_url == "sqlite:////tmp/p.db"
    assert s.realms == ("POLARIS", "TEST")  # trimmed, blanks and repeats dropped
    assert s.policy == LeasePolicy(
        lease_timeout_ms=60000,
        grace_ms=0,
        max_attempts=3,
        metadata_batch_size=4,
        unreferenced=UnreferencedMode.DELETE,
        polaris_version="1.7",
        realm_overrides={"TEST": RealmOverride(lease_timeout_ms=1000)},
    )
    assert s.polaris_version == "1.7"  # written as the release's own text
    assert s.policy.for_realm("TEST").polaris_version == "1.7"
    assert s.policy.for_realm("TEST").lease_timeout_ms == 1000
    assert s.policy.for_realm("POLARIS").lease_timeout_ms == 60000
    assert s.storage_config == "/etc/storage.yaml" and s.executor_prefix == "site-b"
    assert s.deletion_record == "s3://audit/polaris-pipeline/"
    assert (s.sweep_interval_s, s.sweep_jitter) == (30.0, 0.5)
    assert (s.sweep_max_runs, s.sweep_max_pending_runs, s.max_orphan_age_s) == (10, 20, 120.0)
    assert s.sweeper_autostart is True
    assert s.task_events is True
    assert s.unreferenced == "delete"
    assert (s.retention_success_days, s.retention_failure_days) == (14, 90)
    assert (s.retention_batch_size, s.retention_dry_run) == (250, True)
    assert s.retention_cron == "*/15 * * * *"
    assert (s.leak_max_bytes, s.leak_cron, s.leak_min_age_days) == (2**30, "0 5 * * *", 30.0)
    assert s.leak_auto_reclaim_catalogs == ("sales", "ops")


def test_sweeper_autostart_is_a_boolean_or_unset() -> None:
    assert PipelineSettings.from_env({}).sweeper_autostart is None
    for raw, value in (("false", False), (" 0 ", False), ("yes", True), ("1", True)):
        settings = PipelineSettings.from_env({"POLARIS_PIPELINE_SWEEPER_AUTOSTART": raw})
        assert settings.sweeper_autostart is value, raw
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_SWEEPER_AUTOSTART='maybe'"):
        PipelineSettings.from_env({"POLARIS_PIPELINE_SWEEPER_AUTOSTART": "maybe"})


def test_blank_variables_mean_the_default() -> None:
    s = PipelineSettings.from_env({LEASE_TIMEOUT_ENV: "", GRACE_ENV: "   ", REALMS_ENV: ""})
    assert s == PipelineSettings()


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (LEASE_TIMEOUT_ENV, "5m", "POLARIS_PIPELINE_LEASE_TIMEOUT_MS='5m': not an integer"),
        (LEASE_TIMEOUT_ENV, "0", "POLARIS_PIPELINE_LEASE_TIMEOUT_MS='0': lease timeout must be"),
        (GRACE_ENV, "-1", "POLARIS_PIPELINE_GRACE_MS='-1': grace period must not be negative"),
        (MAX_ATTEMPTS_ENV, "0", "POLARIS_PIPELINE_MAX_ATTEMPTS='0': max attempts must be"),
        (MAX_ATTEMPTS_ENV, "2.5", "POLARIS_PIPELINE_MAX_ATTEMPTS='2.5': not an integer"),
        (REALMS_ENV, " , ,", "POLARIS_PIPELINE_REALMS=', ,': names no realm"),
        ("POLARIS_PIPELINE_SWEEP_JITTER", "nan", "SWEEP_JITTER='nan': not a finite number"),
        ("POLARIS_PIPELINE_SWEEP_JITTER", "11", "between 0 and 10"),
        ("POLARIS_PIPELINE_SWEEP_MAX_RUNS", "0", "must be at least 1"),
        ("POLARIS_PIPELINE_MAX_ORPHAN_AGE_S", "-5", "must be positive"),
        ("POLARIS_PIPELINE_LEAK_MIN_AGE_DAYS", "0.5", "minimum age in days must be at least 1"),
        ("POLARIS_PIPELINE_LEAK_MAX_BYTES", "-1", "the leaked bytes must be at least 0"),
        ("POLARIS_PIPELINE_EXECUTOR_PREFIX", "a b", "must not contain white space"),
        ("POLARIS_PIPELINE_METADATA_BATCH_SIZE", "0", "metadata batch size must be at least 1"),
        ("POLARIS_PIPELINE_REALM_OVERRIDES", "{TEST: 1}", "REALM_OVERRIDES='{TEST: 1}': not JSON"),
        ("POLARIS_PIPELINE_REALM_OVERRIDES", "[]", "not a JSON object of realm to overrides"),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"lease_timeout": 5}}',
            "realm 'TEST': unknown override(s) lease_timeout",
        ),
        (
            "POLARIS_PIPELINE_POLARIS_VERSION",
            "1.x",
            "POLARIS_PIPELINE_POLARIS_VERSION='1.x': '1.x' is not a Polaris release (e.g. 1.7",
        ),
        ("POLARIS_PIPELINE_POLARIS_VERSION", "0.9", "Polaris 0.9 is not supported (1.0 or later)"),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"polaris_version": 1.7}}',
            "realm 'TEST': polaris_version must be a release such as 1.7",
        ),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"polaris_version": "seven"}}',
            "realm 'TEST': 'seven' is not a Polaris release",
        ),
    ],
)
def test_a_bad_value_names_its_variable(name: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        PipelineSettings.from_env({name: raw})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_the_url_is_trimmed_and_kept_whole() -> None:
    # The URL is checked when the metastore is opened (its errors mask the password).
    s = PipelineSettings.from_env({"POLARIS_METASTORE_URL": "  postgresql://u:pw@h/db  "})
    assert s.metastore_url == "postgresql://u:pw@h/db"


def test_overrides_beat_the_environment_and_none_keeps_it() -> None:
    env = PipelineSettings.from_env({MAX_ATTEMPTS_ENV: "3", REALMS_ENV: "A", GRACE_ENV: "10"})
    s = env.with_overrides(max_attempts=5, realms=["B", "B", "C"], grace_ms=None)
    assert s.max_attempts == 5 and s.realms == ("B", "C") and s.grace_ms == 10
    assert env.max_attempts == 3  # frozen: the original is unchanged
    assert env.with_overrides() == env


def test_a_bad_override_names_its_flag() -> None:
    with pytest.raises(SettingsError, match=r"--lease-timeout-ms 0: lease timeout must be"):
        PipelineSettings().with_overrides(lease_timeout_ms=0)
    with pytest.raises(SettingsError, match=r"--realm '': each realm must be a non-empty name"):
        PipelineSettings().with_overrides(realms=[""])
    with pytest.raises(SettingsError, match=r"--polaris-version '1.7.x': .* not a Polaris release"):
        PipelineSettings().with_overrides(polaris_version="1.7.x")
    with pytest.raises(TypeError, match="unknown setting"):
        PipelineSettings().with_overrides(lease_timeout=1)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(SettingsError, match="max_attempts"):
        PipelineSettings(max_attempts=0)


def test_the_code_location_takes_the_whole_policy_and_the_events_switch() -> None:
    """The CLI and build_defs_from_env read one PipelineSettings: nothing is dropped."""
    from polaris_pipeline.dagster import build_defs_from_env

    env = {
        "POLARIS_PIPELINE_LEASE_TIMEOUT_MS": "60000",
        "POLARIS_PIPELINE_METADATA_BATCH_SIZE": "4",
        "POLARIS_PIPELINE_REALM_OVERRIDES": (
            '{"TEST": {"lease_timeout_ms": 1000, "polaris_version": "1.7"}}'
        ),
        "POLARIS_PIPELINE_POLARIS_VERSION": "1.4.1",
        "POLARIS_PIPELINE_TASK_EVENTS": "true",
        "POLARIS_PIPELINE_EXECUTOR_PREFIX": "site-b",
    }
    metastore = (build_defs_from_env(env).resources or {})["metastore"]
    assert metastore.executor_id("sensor").startswith("site-b:")
    assert metastore.policy() == PipelineSettings.from_env(env).policy
    assert metastore.policy().for_realm("TEST").lease_timeout_ms == 1000
    assert metastore.policy().for_realm("TEST").polaris_version == "1.7"
    assert metastore.policy().for_realm("OTHER").polaris_version == "1.4.1"
    assert metastore.write_task_events is True
    default = (build_defs_from_env({}).resources or {})["metastore"]
    assert default.policy() == LeasePolicy() and default.write_task_events is False
