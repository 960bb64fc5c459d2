"""One settings schema: nested sections, every variable read, each default once, bad values
named."""

from __future__ import annotations

import pytest

from polaris_pipeline.settings import (
    CONFIG_ENV_VAR,
    ENV_VARIABLES,
    GRACE_ENV,
    LEASE_TIMEOUT_ENV,
    MAX_ATTEMPTS_ENV,
    REALMS_ENV,
    URL_ENV,
    ExecutorSection,
    GuardSection,
    MetastoreSection,
    PipelineSettings,
    RestoreSection,
    SettingsError,
    env_variable,
    executor_settings,
    setting_from_env,
)
from polaris_pipeline.settings.env import read_section
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.tasks.model import TaskPolicy
from polaris_pipeline.unreferenced.mode import UnreferencedMode


def test_defaults_are_the_lease_policy_s() -> None:
    settings = PipelineSettings.from_env({})
    assert settings == PipelineSettings()
    assert TaskPolicy.from_section(settings.metastore) == TaskPolicy()
    assert settings.metastore.url is None and settings.metastore.realms is None
    assert settings.storage.config_path is None


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
        "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS": "30",
        "POLARIS_PIPELINE_SWEEPER_JITTER": "0.5",
        "POLARIS_PIPELINE_SWEEPER_MAX_RUNS_PER_TICK": "10",
        "POLARIS_PIPELINE_SWEEPER_MAX_PENDING_RUNS": "20",
        "POLARIS_PIPELINE_SWEEPER_AUTOSTART": "True",
        "POLARIS_PIPELINE_BACKLOG_MAX_ORPHAN_AGE_SECONDS": "120",
        "POLARIS_PIPELINE_BACKLOG_MANY_ATTEMPTS": "4",
        "POLARIS_PIPELINE_BACKLOG_FRESHNESS_INTERVALS": "5",
        "POLARIS_PIPELINE_BACKLOG_SAMPLE_SIZE": "2",
        "POLARIS_PIPELINE_BACKLOG_REPORT_INTERVAL_SECONDS": "15",
        "POLARIS_PIPELINE_TASK_EVENTS": "true",
        "POLARIS_PIPELINE_UNREFERENCED": "delete",
        "POLARIS_PIPELINE_HOLD_DAYS": "7",
        "POLARIS_PIPELINE_CATALOG_HOLD_DAYS": '{"finance": 30, "scratch": 0}',
        "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "14",
        "POLARIS_PIPELINE_RETENTION_FAILURE_DAYS": "90",
        "POLARIS_PIPELINE_RETENTION_BATCH_SIZE": "250",
        "POLARIS_PIPELINE_RETENTION_DRY_RUN": "true",
        "POLARIS_PIPELINE_RETENTION_CRON": "*/15 * * * *",
        "POLARIS_PIPELINE_LEAK_MAX_BYTES": "1073741824",
        "POLARIS_PIPELINE_LEAK_CATALOGS": "wh, lake",
        "POLARIS_PIPELINE_LEAK_CRON": "0 5 * * *",
        "POLARIS_PIPELINE_LEAK_MIN_AGE_DAYS": "30",
        "POLARIS_PIPELINE_LEAK_AUTO_RECLAIM_CATALOGS": " sales,,ops ",
        "POLARIS_PIPELINE_DELETION_RECORD": " s3://audit/polaris-pipeline/ ",
        "POLARIS_PIPELINE_ALERT_WEBHOOK_URL": "https://hooks.example.com/T0/SECRET",
        "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com, oncall@example.com",
        "POLARIS_PIPELINE_ALERT_EMAIL_FROM": "pp@example.com",
        "POLARIS_PIPELINE_ALERT_SMTP_HOST": "mail.example.com",
        "POLARIS_PIPELINE_ALERT_SMTP_PORT": "587",
        "POLARIS_PIPELINE_ALERT_SMTP_USER": "pp",
        "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD": "hunter2",
        "POLARIS_PIPELINE_ALERT_SMTP_STARTTLS": "yes",
        "POLARIS_PIPELINE_ALERT_SMTP_LOGIN_INSECURE": "true",
        "POLARIS_PIPELINE_ALERT_WEBHOOK_ALLOW_HTTP_INSECURE": "true",
        "POLARIS_PIPELINE_ALERT_UI_URL": "https://dagster.example.com",
        "POLARIS_PIPELINE_TASK_EXECUTOR": "celery",
        "POLARIS_PIPELINE_CELERY_BROKER": "pyamqp://pp:s3cret@rabbit:5672//",
        "POLARIS_PIPELINE_CELERY_BACKEND": "redis://:s3cret@redis/1",
        "POLARIS_PIPELINE_CELERY_QUEUE": "polaris",
        "POLARIS_PIPELINE_IO_BASE_DIR": "/shared/steps",
        "POLARIS_PIPELINE_GUARD_BOUND_S": "2.5",
        "POLARIS_PIPELINE_RESTORE_REST_URI": " https://polaris.example.com/api/catalog ",
        "POLARIS_PIPELINE_RESTORE_CATALOG": "lake",
        "POLARIS_PIPELINE_RESTORE_CLIENT_ID": "root",
        "POLARIS_PIPELINE_RESTORE_CLIENT_SECRET": "s3cret",
        "POLARIS_PIPELINE_RESTORE_SCOPE": "PRINCIPAL_ROLE:admin",
    }
    assert set(env) == set(ENV_VARIABLES.values())
    steps = executor_settings(env)
    assert steps == ExecutorSection(
        task_executor="celery",
        celery_broker="pyamqp://pp:s3cret@rabbit:5672//",
        celery_backend="redis://:s3cret@redis/1",
        celery_queue="polaris",
        io_base_dir="/shared/steps",
    )
    assert "s3cret" not in repr(steps)
    assert setting_from_env("guard", "bound_s", env) == 2.5
    restore = read_section("restore", env)
    assert restore == RestoreSection(
        rest_uri="https://polaris.example.com/api/catalog",
        catalog="lake",
        client_id="root",
        client_secret="s3cret",
        scope="PRINCIPAL_ROLE:admin",
    )
    assert "s3cret" not in repr(restore)
    s = PipelineSettings.from_env(env)
    m = s.metastore
    assert m.url == "sqlite:////tmp/p.db"
    assert m.realms == ["POLARIS", "TEST"]  # trimmed, blanks and repeats dropped
    assert TaskPolicy.from_section(m) == TaskPolicy(
        lease_timeout_ms=60000,
        grace_ms=0,
        max_attempts=3,
        metadata_batch_size=4,
        unreferenced=UnreferencedMode.DELETE,
        polaris_version="1.7",
        task_events=True,
        realm_overrides={"TEST": RealmOverride(lease_timeout_ms=1000)},
        hold_ms=7 * 86_400_000,
        catalog_hold_ms={"finance": 30 * 86_400_000, "scratch": 0},
    )
    assert m.polaris_version == "1.7"  # written as the release's own text
    assert TaskPolicy.from_section(m).for_realm("TEST").polaris_version == "1.7"
    assert TaskPolicy.from_section(m).for_realm("TEST").lease_timeout_ms == 1000
    assert TaskPolicy.from_section(m).for_realm("POLARIS").lease_timeout_ms == 60000
    assert s.storage.config_path == "/etc/storage.yaml" and m.executor_prefix == "site-b"
    assert s.storage.deletion_record == "s3://audit/polaris-pipeline/"
    assert (s.sweeper.interval_seconds, s.sweeper.jitter) == (30.0, 0.5)
    assert (s.sweeper.max_runs_per_tick, s.sweeper.max_pending_runs) == (10, 20)
    assert s.sweeper.autostart is True
    b = s.backlog
    assert (b.max_orphan_age_seconds, b.many_attempts, b.freshness_intervals) == (120, 4, 5)
    assert (b.sample_size, b.report_interval_seconds) == (2, 15)
    assert m.task_events == "true" and m.events() is True
    assert m.unreferenced == "delete"
    r = s.retention
    assert (r.success_days, r.failure_days, r.batch_size, r.dry_run) == (14, 90, 250, True)
    assert r.cron == "*/15 * * * *"
    leaks = s.leaks
    assert (leaks.max_bytes, leaks.cron, leaks.min_age_days) == (2**30, "0 5 * * *", 30.0)
    a = s.alerts
    assert a.email_to == ["ops@example.com", "oncall@example.com"] and a.smtp_port == 587
    assert a.smtp_starttls is True  # "yes", as every boolean setting reads it
    assert a.smtp_login_insecure is True and a.webhook_allow_http_insecure is True
    assert (a.email_from, a.smtp_host, a.smtp_user) == ("pp@example.com", "mail.example.com", "pp")
    assert a.ui_url == "https://dagster.example.com" and a.configured
    # The two secrets are read, and kept out of every repr.
    assert a.webhook_url is not None and a.smtp_password == "hunter2"
    assert "SECRET" not in repr(s) and "hunter2" not in repr(s)
    assert leaks.catalogs == ["wh", "lake"] and leaks.auto_reclaim_catalogs == ["sales", "ops"]


def test_each_variable_is_spelt_from_its_section_and_field() -> None:
    """One spelling per knob: the variable is the field's name under its section's prefix,
    but for the three names older than the rule, which the field names itself."""
    own = {
        "POLARIS_METASTORE_URL",
        "POLARIS_PIPELINE_STORAGE_CONFIG",
        "POLARIS_PIPELINE_DELETION_RECORD",
    }
    for (section, field), name in ENV_VARIABLES.items():
        if name in own:
            continue
        assert name.endswith("_" + field.upper()), (section, field, name)
        assert env_variable(section, field) == name
    # The inline storage rules are YAML or Python; the environment names the file.
    assert env_variable("storage", "locations") is None


def test_sweeper_autostart_is_a_boolean_or_unset() -> None:
    assert PipelineSettings.from_env({}).sweeper.autostart is None
    for raw, value in (("false", False), (" 0 ", False), ("yes", True), ("1", True)):
        settings = PipelineSettings.from_env({"POLARIS_PIPELINE_SWEEPER_AUTOSTART": raw})
        assert settings.sweeper.autostart is value, raw
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_SWEEPER_AUTOSTART='maybe'"):
        PipelineSettings.from_env({"POLARIS_PIPELINE_SWEEPER_AUTOSTART": "maybe"})


def test_blank_variables_mean_the_default() -> None:
    s = PipelineSettings.from_env({LEASE_TIMEOUT_ENV: "", GRACE_ENV: "   ", REALMS_ENV: ""})
    assert s == PipelineSettings()


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        (
            LEASE_TIMEOUT_ENV,
            "5m",
            "POLARIS_PIPELINE_LEASE_TIMEOUT_MS='5m': Input should be a valid integer",
        ),
        (LEASE_TIMEOUT_ENV, "0", "POLARIS_PIPELINE_LEASE_TIMEOUT_MS='0': lease timeout must be"),
        (GRACE_ENV, "-1", "POLARIS_PIPELINE_GRACE_MS='-1': grace period must not be negative"),
        (MAX_ATTEMPTS_ENV, "0", "POLARIS_PIPELINE_MAX_ATTEMPTS='0': max attempts must be"),
        (
            MAX_ATTEMPTS_ENV,
            "2.5",
            "POLARIS_PIPELINE_MAX_ATTEMPTS='2.5': Input should be a valid integer",
        ),
        (REALMS_ENV, " , ,", "POLARIS_PIPELINE_REALMS=', ,': names nothing"),
        (
            "POLARIS_PIPELINE_SWEEPER_JITTER",
            "nan",
            "SWEEPER_JITTER='nan': the jitter must be a finite number",
        ),
        ("POLARIS_PIPELINE_SWEEPER_JITTER", "11", "between 0 and 10"),
        ("POLARIS_PIPELINE_SWEEPER_MAX_RUNS_PER_TICK", "0", "must be at least 1"),
        ("POLARIS_PIPELINE_BACKLOG_MAX_ORPHAN_AGE_SECONDS", "-5", "must be positive"),
        ("POLARIS_PIPELINE_LEAK_MIN_AGE_DAYS", "0.5", "minimum age in days must be at least 1"),
        ("POLARIS_PIPELINE_LEAK_MAX_BYTES", "-1", "the leaked bytes must be at least 0"),
        ("POLARIS_PIPELINE_RETENTION_FAILURE_DAYS", "0", "days a run is kept must be at least 1"),
        ("POLARIS_PIPELINE_RETENTION_BATCH_SIZE", "0", "runs deleted per tick must be at least 1"),
        ("POLARIS_PIPELINE_EXECUTOR_PREFIX", "a b", "must not contain white space"),
        ("POLARIS_PIPELINE_METADATA_BATCH_SIZE", "0", "metadata batch size must be at least 1"),
        # A realm with no name is none, as a catalog with no name is (catalog_hold_days).
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{" ": {"grace_ms": 1}}',
            'REALM_OVERRIDES=\'{" ": {"grace_ms": 1}}\': a realm name must not be empty',
        ),
        # A hold is a time in milliseconds, as Polaris's: a Java long.
        ("POLARIS_PIPELINE_HOLD_DAYS", "1e300", "a hold in days must be at most 106751991167"),
        (
            "POLARIS_PIPELINE_RETENTION_FAILURE_DAYS",
            "1000000",
            "the days a run is kept (unset: for ever) must be at most 36500",
        ),
        (
            "POLARIS_PIPELINE_CATALOG_HOLD_DAYS",
            '{"finance": 1e13}',
            "catalog 'finance': a hold in days must be at most 106751991167",
        ),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"hold_days": 106751991168}}',
            "realm 'TEST': hold_days: a hold in days must be at most 106751991167",
        ),
        ("POLARIS_PIPELINE_REALM_OVERRIDES", "{TEST: 1}", "REALM_OVERRIDES='{TEST: 1}': not JSON"),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            "[]",
            "REALM_OVERRIDES='[]': Input should be a valid dict",
        ),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"lease_timeout": 5}}',
            "realm 'TEST': unknown override(s) lease_timeout",
        ),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"metadata_batch": 5}}',
            "unknown override(s) metadata_batch (did you mean metadata_batch_size?)",
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
            "realm 'TEST': polaris_version: polaris_version must be a release such as 1.7",
        ),
        (
            "POLARIS_PIPELINE_REALM_OVERRIDES",
            '{"TEST": {"polaris_version": "seven"}}',
            "realm 'TEST': polaris_version: 'seven' is not a Polaris release",
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
    assert s.metastore.url == "postgresql://u:pw@h/db"


def test_a_bad_secret_is_named_without_its_value() -> None:
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_ALERT_WEBHOOK_URL: an http") as err:
        PipelineSettings.from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": "hooks/SECRET"})
    assert "SECRET" not in str(err.value)


def test_a_bad_url_is_named_without_its_value() -> None:
    with pytest.raises(SettingsError) as err:
        PipelineSettings.from_env(
            {"POLARIS_METASTORE_URL": "postgresql://u:secret@h/db", GRACE_ENV: "-1"}
        )
    assert "secret" not in str(err.value)


LABELS = {
    ("metastore", "lease_timeout_ms"): "--lease-timeout-ms",
    ("metastore", "realms"): "--realm",
}


def test_overrides_beat_the_environment_and_none_keeps_it() -> None:
    env = PipelineSettings.from_env({MAX_ATTEMPTS_ENV: "3", REALMS_ENV: "A", GRACE_ENV: "10"})
    s = env.with_overrides(
        {"metastore": {"max_attempts": 5, "realms": ["B", "B", "C"], "grace_ms": None}}
    )
    m = s.metastore
    assert m.max_attempts == 5 and m.realms == ["B", "C"] and m.grace_ms == 10
    assert env.metastore.max_attempts == 3  # frozen: the original is unchanged
    assert env.with_overrides({}) == env


def test_a_bad_override_names_its_flag() -> None:
    with pytest.raises(SettingsError, match=r"--lease-timeout-ms 0: lease timeout must be"):
        PipelineSettings().with_overrides({"metastore": {"lease_timeout_ms": 0}}, LABELS)
    with pytest.raises(SettingsError, match=r"--realm '': each realm must be a non-empty name"):
        PipelineSettings().with_overrides({"metastore": {"realms": [""]}}, LABELS)
    with pytest.raises(SettingsError, match=r"metastore.polaris_version '1.7.x': .* not a Polaris"):
        PipelineSettings().with_overrides({"metastore": {"polaris_version": "1.7.x"}})
    with pytest.raises(SettingsError, match="lease_timeout"):
        PipelineSettings().with_overrides({"metastore": {"lease_timeout": 1}})


def test_a_section_is_frozen_and_refuses_an_unknown_key() -> None:
    with pytest.raises(ValueError, match="max attempts must be at least 1"):
        MetastoreSection(max_attempts=0)
    with pytest.raises(
        ValueError, match=r"unknown setting 'max_attempt' .*did you mean max_attempts"
    ):
        MetastoreSection(max_attempt=3)  # type: ignore[call-arg]
    section = MetastoreSection()
    with pytest.raises(ValueError, match="frozen"):
        section.max_attempts = 3


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
    resources = build_defs_from_env(env).resources or {}
    metastore = resources["metastore"]
    assert metastore.executor_id("sensor").startswith("site-b:")
    assert metastore.policy() == TaskPolicy.from_section(PipelineSettings.from_env(env).metastore)
    assert metastore.policy().for_realm("TEST").lease_timeout_ms == 1000
    assert metastore.policy().for_realm("TEST").polaris_version == "1.7"
    assert metastore.policy().for_realm("OTHER").polaris_version == "1.4.1"
    assert metastore.events() is True
    default = (build_defs_from_env({}).resources or {})["metastore"]
    assert default.policy() == TaskPolicy() and default.events() is False


def test_every_section_s_variables_reach_its_resource() -> None:
    """Each resource of build_defs_from_env holds what its section read: the settings are
    the resources' schema, not a copy of it."""
    from polaris_pipeline.dagster.definitions import deployment_from_env

    env = {
        "POLARIS_PIPELINE_SWEEPER_JITTER": "0.5",
        "POLARIS_PIPELINE_BACKLOG_SAMPLE_SIZE": "2",
        "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "3",
        "POLARIS_PIPELINE_LEAK_CATALOGS": "wh",
        "POLARIS_PIPELINE_DELETION_RECORD": "file:///var/log/pp/",
    }
    settings = PipelineSettings.from_env(env)
    resources = deployment_from_env(env).resources
    for section in ("storage", "sweeper", "backlog", "retention", "leaks"):
        assert resources[section].model_dump() == getattr(settings, section).model_dump()


@pytest.mark.parametrize(
    ("section", "name", "raw", "message"),
    [
        (
            "guard",
            "POLARIS_PIPELINE_GUARD_BOUND_S",
            "soon",
            "GUARD_BOUND_S='soon': Input should be a valid number",
        ),
        ("guard", "POLARIS_PIPELINE_GUARD_BOUND_S", "-1", "GUARD_BOUND_S='-1': Input should be"),
        ("guard", "POLARIS_PIPELINE_GUARD_BOUND_S", "inf", "bound must be a finite number"),
        # Past PostgreSQL's statement_timeout (2^31-1 ms) the check could not be bounded.
        ("guard", "POLARIS_PIPELINE_GUARD_BOUND_S", "2147484", "bound must be at most 2147483"),
        ("executor", "POLARIS_PIPELINE_TASK_EXECUTOR", "k8s", "TASK_EXECUTOR='k8s': Input should"),
    ],
)
def test_a_bad_value_of_a_process_section_names_its_variable(
    section: str, name: str, raw: str, message: str
) -> None:
    with pytest.raises(SettingsError) as err:
        read_section(section, {name: raw})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_one_setting_is_read_alone_from_its_section() -> None:
    """A caller that needs one field (the storage config path, the metastore URL) is not
    refused for another field's bad value, and gets the default when its own is unset."""
    env = {"POLARIS_PIPELINE_DELETION_RECORD": "nowhere", CONFIG_ENV_VAR: " /etc/s.yaml "}
    assert setting_from_env("storage", "config_path", env) == "/etc/s.yaml"
    with pytest.raises(SettingsError, match="POLARIS_PIPELINE_DELETION_RECORD"):
        read_section("storage", env)
    assert setting_from_env("storage", "config_path", {}) is None
    assert setting_from_env("guard", "bound_s", {}) == GuardSection().bound_s == 60.0
    # Not a block of the pipeline's settings: the CLI and the code location are not
    # refused for a bad executor variable they never use.
    assert (
        PipelineSettings.from_env({"POLARIS_PIPELINE_TASK_EXECUTOR": "k8s"}) == PipelineSettings()
    )


def test_the_metastore_url_not_passed_is_the_variable_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from polaris_pipeline.errors import MetastoreError
    from polaris_pipeline.metastore import resolve_url

    monkeypatch.setenv(URL_ENV, " sqlite:////tmp/from-env.db ")
    assert resolve_url(None).database == "/tmp/from-env.db"
    assert resolve_url("sqlite:////tmp/given.db").database == "/tmp/given.db"  # given wins
    monkeypatch.setenv(URL_ENV, "  ")
    with pytest.raises(
        MetastoreError, match=f"^no metastore URL: pass --metastore or set {URL_ENV}$"
    ):
        resolve_url(None)


def test_an_unknown_variable_under_the_prefix_is_warned_of_with_the_nearest_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A typo of a variable is not silently ignored: the settings still load (it may be
    another tool's), and the warning names it and the setting it is closest to."""
    from polaris_pipeline.settings.env import warn_unknown_variables

    env = {
        "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECOND": "30",
        "POLARIS_PIPELINE_TEST_PG": "postgresql://127.0.0.1/",  # the test suite's own
        "OTHER_SWEEPER_INTERVAL": "1",
        "POLARIS_PIPELINE_SWEEPER_JITTER": "0.5",
    }
    with caplog.at_level("WARNING", logger="polaris_pipeline.settings.env"):
        settings = PipelineSettings.from_env(env)
    assert settings.sweeper.jitter == 0.5
    assert settings.sweeper.interval_seconds == 60.0  # the typo set nothing
    [record] = caplog.records
    assert record.getMessage() == (
        "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECOND names no setting of polaris-pipeline and is "
        "ignored (did you mean POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS?)"
    )
    # Once per process: the next reading does not repeat it.
    assert warn_unknown_variables(env) == []


def test_an_unknown_key_names_the_nearest_field() -> None:
    from polaris_pipeline.dagster.resources import SweeperSettings

    with pytest.raises(ValueError, match=r"unknown setting 'intervall_seconds' .*interval_sec"):
        SweeperSettings(intervall_seconds=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"unknown setting 'cronn' of LeakSection .*\bcron\b"):
        PipelineSettings.model_validate({"leaks": {"cronn": "0 * * * *"}})


@pytest.mark.parametrize(
    ("field", "value"),
    [("catalogs", []), ("catalogs", [" "]), ("auto_reclaim_catalogs", ["wh", ""])],
)
def test_a_list_of_catalogs_with_a_blank_name_is_refused_as_its_variable_is(
    field: str, value: list[str]
) -> None:
    """A YAML block or build_defs gives the list itself: one naming no catalog is refused,
    as the variable naming nothing is, not a leak report of no catalog at all."""
    with pytest.raises(ValueError) as err:
        PipelineSettings.model_validate({"leaks": {field: value}})
    assert f"leaks.{field}" in str(err.value)
    assert "each catalog must be a non-empty name" in str(err.value)
    with pytest.raises(SettingsError, match="names nothing"):
        PipelineSettings.from_env({ENV_VARIABLES[("leaks", field)]: " , "})


def test_set_names_a_secret_without_its_value_as_its_variable_does() -> None:
    with pytest.raises(SettingsError) as err:
        PipelineSettings().with_assignments([("alerts", "webhook_url", "hooks/SECRET")])
    assert str(err.value) == "--set alerts.webhook_url: an http(s) URL"
    with pytest.raises(SettingsError) as err:
        PipelineSettings().with_overrides({"alerts": {"webhook_url": "http://h/SECRET"}})
    assert str(err.value).startswith("alerts.webhook_url: an http:// webhook sends")


def test_a_rule_over_several_settings_names_each_one_set() -> None:
    with pytest.raises(SettingsError) as err:
        PipelineSettings().with_assignments(
            [("storage", "config_path", "/x.yaml"), ("storage", "allowed_prefixes", '["/x"]')]
        )
    assert str(err.value) == (
        "--set storage.config_path / --set storage.allowed_prefixes: "
        "set either config_path or locations/allowed_prefixes, not both"
    )


def test_set_reads_a_value_as_its_variable_and_names_itself_in_an_error() -> None:
    s = PipelineSettings().with_assignments(
        [
            ("metastore", "realms", " A, B,A"),
            ("metastore", "realm_overrides", '{"A": {"lease_timeout_ms": 1000}}'),
            ("sweeper", "autostart", "yes"),
            ("storage", "allowed_prefixes", '["s3://b/wh/"]'),
        ]
    )
    assert s.metastore.realms == ["A", "B"] and s.sweeper.autostart is True
    assert TaskPolicy.from_section(s.metastore).for_realm("A").lease_timeout_ms == 1000
    assert s.storage.allowed_prefixes == ["s3://b/wh/"]
    with pytest.raises(SettingsError, match=r"^--set sweeper.jitter 11.0: .*between 0 and 10$"):
        PipelineSettings().with_assignments([("sweeper", "jitter", "11")])
    with pytest.raises(SettingsError, match=r"^--set metastore.grace_ms 'soon': Input should"):
        PipelineSettings().with_assignments([("metastore", "grace_ms", "soon")])


def test_blank_alert_text_is_unset_as_its_variable_is() -> None:
    """A YAML block's " " was taken as the sender, the SMTP host and the UI's link."""
    blank = {"email_from": " ", "smtp_host": " ", "ui_url": " "}
    given = PipelineSettings.model_validate({"alerts": blank}).alerts
    from_env = PipelineSettings.from_env(
        {ENV_VARIABLES[("alerts", field)]: value for field, value in blank.items()}
    ).alerts
    assert given == from_env == PipelineSettings().alerts
    assert given.ui_url is None and given.smtp_host == "localhost"
