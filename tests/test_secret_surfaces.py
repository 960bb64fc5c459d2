"""Secrets masked on every surface, whatever their spelling: a password in the metastore
URL's query (``password=``, ``sslpassword=``), an Azure connection string (account key,
SAS signature), a catalog's AWS ``externalId``. Through the CLI (errors, headers, text
and JSON), the reprs of settings, resources and the component, the Dagster event log,
run tags, metadata, and alerts. ``storage.redact.redact`` masks them all; the
reliability scenario 8 (tests/reliability/test_secrets*.py) searches whole runs.
"""

from __future__ import annotations

import base64
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from dagster._serdes import serialize_value

from builders.tasks import batch_task
from polaris_pipeline.cli import main
from polaris_pipeline.dagster import PolarisSweeper
from polaris_pipeline.dagster.alerts import run_failure_alert
from polaris_pipeline.dagster.realm_backfill import polaris_realm_backfill_job
from polaris_pipeline.dagster.resources import PolarisMetastoreResource, PolarisStorageResource
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import MetastoreSection, StorageSection
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.redact import redact
from polaris_pipeline.storage.resolve import StorageResolver
from tests.support.dagster import realm_run_config

QUERY_PASSWORD = f"Qpw-{uuid.uuid4().hex[:12]}"
SSL_PASSWORD = f"Ssl-{uuid.uuid4().hex[:12]}"
# An account key is base64: + / and = in it.
ACCOUNT_KEY = base64.b64encode(b"\xfb\xff" + uuid.uuid4().bytes * 3).decode()
SAS_SIG = f"Sig%2B{uuid.uuid4().hex[:16]}%3D"
EXTERNAL_ID = f"ext-{uuid.uuid4().hex[:12]}"
ACCOUNT_CONNECTION = (
    "DefaultEndpointsProtocol=https;AccountName=acct;"
    f"AccountKey={ACCOUNT_KEY};EndpointSuffix=core.windows.net"
)
SAS_CONNECTION = (
    "BlobEndpoint=https://acct.blob.core.windows.net/;"
    f"SharedAccessSignature=sv=2022-11-02&ss=b&srt=co&sp=rwdl&sig={SAS_SIG}"
)
SECRETS = (QUERY_PASSWORD, SSL_PASSWORD, ACCOUNT_KEY, SAS_SIG, EXTERNAL_ID)


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def with_query_passwords(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}password={QUERY_PASSWORD}&sslpassword={SSL_PASSWORD}"


def azure_locations() -> list[dict[str, Any]]:
    return [
        {"prefix": "abfs://data", "options": {"connection_string": ACCOUNT_CONNECTION}},
        {"prefix": "abfs://shared", "options": {"connection_string": SAS_CONNECTION}},
    ]


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[Metastore]:
    """A PostgreSQL metastore reached through a URL whose query holds two passwords
    (127.0.0.1 is trusted: they are passed to libpq, never checked)."""
    from tests.support.pg_schema import drop_polaris_schema

    drop_polaris_schema(pg_database)
    store = Metastore(with_query_passwords(pg_database))
    store.init_schema()
    yield store
    store.dispose()


def test_redact_masks_every_spelling_and_keeps_the_rest() -> None:
    url = with_query_passwords("postgresql+psycopg://cleanup:pw-in-userinfo@127.0.0.1:1/polaris")
    assert redact(url) == (
        "postgresql+psycopg://cleanup:***@127.0.0.1:1/polaris?password=***&sslpassword=***"
    )
    assert redact(ACCOUNT_CONNECTION) == (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;"
        "EndpointSuffix=core.windows.net"
    )
    assert leaked(redact(SAS_CONNECTION)) == []
    assert redact(f"https://acct.blob.core.windows.net/c/x?sv=1&sig={SAS_SIG}").endswith(
        "?sv=1&sig=***"
    )
    storage_info = json.dumps({"roleARN": "arn:aws:iam::1:role/r", "externalId": EXTERNAL_ID})
    assert json.loads(redact(storage_info)) == {
        "roleARN": "arn:aws:iam::1:role/r",
        "externalId": "***",
    }
    # Paths stay whole: a Hive partition directory named like a secret is no secret.
    path = "s3://b/wh/t/data/api_key=7/part-0.parquet"
    assert redact(f"refused {path}: outside") == f"refused {path}: outside"


def test_reprs_of_settings_resources_and_the_component_mask_them() -> None:
    url = with_query_passwords("postgresql+psycopg://cleanup@db.example/polaris")
    resource = PolarisMetastoreResource(url=url)
    storage = PolarisStorageResource(locations=azure_locations())
    shown = {
        "section": repr(MetastoreSection(url=url)),
        "resource": repr(resource),
        "resource str": str(resource),
        "display url": resource.display_url,
        "storage section": repr(StorageSection(locations=azure_locations())),
        "storage resource": repr(storage),
        "storage config": repr(storage.get_config()),
        "component": repr(PolarisSweeper(metastore=resource, storage=storage)),
    }
    assert {k: leaked(v) for k, v in shown.items() if leaked(v)} == {}
    # Masked, not dropped: the reader still sees which URL, which option.
    assert "polaris?password=***&sslpassword=***" in shown["display url"]
    assert "'connection_string': '***'" in shown["storage config"]


def test_storage_errors_quoting_a_connection_string_or_its_key_are_masked() -> None:
    resolver = StorageResolver(StorageConfig.from_mapping({"locations": azure_locations()}))
    for quoted in (ACCOUNT_CONNECTION, ACCOUNT_KEY, SAS_CONNECTION, SAS_SIG):
        text = resolver.describe(ValueError(f"invalid credential {quoted!r}"))
        assert text.startswith("ValueError: invalid credential") and not leaked(text), text


def test_cli_errors_headers_and_json_mask_them(
    pg_store: Metastore,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("POLARIS_PIPELINE_REALMS", raising=False)
    url = pg_store.url.render_as_string(hide_password=False)
    assert QUERY_PASSWORD in url
    storage_info = json.dumps(
        {
            "@type": "AwsStorageConfigurationInfo",
            "storageType": "S3",
            "roleARN": "arn:aws:iam::123456789012:role/purger",
            "externalId": EXTERNAL_ID,
        }
    )
    task = batch_task(
        "r",
        ["s3://b/wh/t/x"],
        internal={"storageLocation": "s3://b/wh/t", STORAGE_CONFIG_KEY: storage_info},
    )
    pg_store.insert_tasks([task])
    outputs: dict[str, str] = {}

    def cli(name: str, *argv: str) -> int:
        out = io.StringIO()
        code = main(list(argv), out=out)
        outputs[f"{name} stdout"] = out.getvalue()
        outputs[f"{name} stderr"] = capsys.readouterr().err
        return code

    assert cli("init (header)", "init-metastore", "--metastore", url) == 0
    assert "?password=***&sslpassword=***" in outputs["init (header) stdout"]
    assert (
        cli(
            "show --json",
            "tasks",
            "show",
            str(task.id),
            "--realm",
            "r",
            "--json",
            "--metastore",
            url,
        )
        == 0
    )
    shown = json.loads(outputs["show --json stdout"])
    assert json.loads(shown["internal_properties"][STORAGE_CONFIG_KEY])["externalId"] == "***"
    assert cli("list --json", "tasks", "list", "--json", "--metastore", url) == 0
    assert cli("show", "tasks", "show", str(task.id), "--realm", "r", "--metastore", url) == 0
    unreachable = with_query_passwords("postgresql+psycopg://cleanup@127.0.0.1:1/polaris")
    assert cli("unreachable", "tasks", "list", "--metastore", unreachable) == 2
    assert "127.0.0.1:1/polaris?password=***" in outputs["unreachable stderr"]
    config = tmp_path / "storage.yaml"
    config.write_text(json.dumps({"locations": azure_locations(), "nonsense": 1}))
    assert cli("bad config", "sweep", "--storage-config", str(config), "--metastore", url) == 2
    assert {k: leaked(v) for k, v in outputs.items() if leaked(v)} == {}


def test_the_dagster_event_log_run_tags_and_metadata_mask_them(
    pg_store: Metastore, instance: DagsterInstance, tmp_path: Path
) -> None:
    table = tmp_path / "wh" / "t"
    table.mkdir(parents=True)
    (table / "1.avro").write_bytes(b"x")
    task = batch_task(
        "r",
        [str(table / "1.avro")],
        internal={"storageLocation": f"file://{table}"},
        create_timestamp=0,
    )
    pg_store.insert_tasks([task])
    url = pg_store.url.render_as_string(hide_password=False)
    result = polaris_realm_backfill_job.execute_in_process(
        run_config=realm_run_config("r"),
        instance=instance,
        resources={
            "metastore": PolarisMetastoreResource(url=url, grace_ms=0),
            "storage": PolarisStorageResource(
                locations=azure_locations(), allowed_prefixes=[f"file://{tmp_path / 'wh'}"]
            ),
        },
        raise_on_error=False,
    )
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    events = [serialize_value(e) for e in instance.all_logs(result.run_id)]
    assert any("?password=***&sslpassword=***" in e for e in events)  # the "sweeping" line
    searched = {
        "tags": json.dumps(run.tags),
        "config": json.dumps(run.run_config),
        **{f"event {i}": e for i, e in enumerate(events)},
    }
    assert {k: leaked(v) for k, v in searched.items() if leaked(v)} == {}


def test_an_alert_masks_an_error_that_quotes_them() -> None:
    url = with_query_passwords("postgresql+psycopg://cleanup@db/polaris")
    error = f"metastore {url}: refused; storage {ACCOUNT_CONNECTION}; {SAS_CONNECTION}"
    alert = run_failure_alert("polaris_task_job", "run-1", {"polaris/realm": "r"}, error)
    assert not leaked(alert.text()) and "password=***" in alert.text()
