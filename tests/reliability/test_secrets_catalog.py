"""Scenario 8, catalog storage mode: no vended or configured credential appears in
anything a purge produces.

The sweeper reaches S3 by assuming the catalog's role on moto (IAM enforced), Azure
with a SAS it signs with a configured account key on Azurite, and GCS on
fake-gcs-server (anonymously: an emulator has no IAM to downscope against). Each
cloud also has a failing case whose error is recorded: a role the sweeper may not
assume, a role whose session may not read the bucket, a wrong account key, a
GCS table outside the catalog's allowed locations.

The values grepped for are the real ones, learnt from the servers where they
cross the wire: every session key id and token moto saw a request signed with
(its request recorder; the secret keys, which never travel, from the AssumeRole
answers the sweeper got, which must account for every session moto saw) and
every SAS signature a request presented to Azurite (its debug log), plus the
sweeper's own base credentials, the account keys and the ADC file's secrets.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import botocore.handlers
import pytest
from dagster import (
    DagsterInstance,
    RetryPolicy,
    RunRequest,
    SensorResult,
    build_sensor_context,
)
from dagster._serdes import serialize_value

from builders import tasks as built_tasks
from polaris_pipeline.cli import main
from polaris_pipeline.cli.context import EXIT_TASK_FAILED
from polaris_pipeline.dagster.contract import TAG_TASK_ID
from polaris_pipeline.dagster.resources import PolarisStorageResource, SweeperSettings
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.dagster.task_job import DEFAULT_RETRY_POLICY, build_polaris_task_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.credentials.gcs import EMULATOR_ENV
from tests.reliability.harness import PgRole, RelDb, Scenario, rel_policy
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, azurite  # noqa: F401
from tests.support.catalog_storage import (
    aws_storage_info,
    azure_storage_info,
    azurite_table,
    fake_gcs_table,
    gcs_storage_info,
    iam_s3_table,
)
from tests.support.dagster import (  # noqa: F401
    _fresh_resource_caches,
    deployed_sensor,
    metastore_resource,
    sweeper_resources,
    temp_instance,
)
from tests.support.gcs import FakeGcs, fake_gcs  # noqa: F401
from tests.support.s3 import MotoIam, moto_iam  # noqa: F401

REALM = "POLARIS"
# botocore's wire dumps: at DEBUG they print every request's headers and canonical
# form (the session token among them) and every response body (AssumeRole's
# credentials). Nothing
# the sweeper does turns them on (-v is INFO); docs/operator-guide.md says to
# leave them off. Every other logger, ours and the libraries', is searched.
WIRE_LOGGERS = frozenset({"botocore.auth", "botocore.endpoint", "botocore.parsers"})
# A key Azurite does not hold for the account: SAS signed with it are refused.
WRONG_KEY = base64.b64encode(uuid.uuid4().bytes * 4).decode()


def _connection_string(azurite: Azurite, key: str) -> str:  # noqa: F811
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
        f"BlobEndpoint={azurite.blob_endpoint};"
    )


def spellings(value: str) -> set[str]:
    """A secret as written and as URL-encoded, the ways a message could quote it."""
    return {value, quote(value, safe=""), quote(value, safe="/"), quote_plus(value)}


@dataclass
class World:
    """The three clouds, the metastore, and what the sweeper's environment holds."""

    store: Metastore
    url: str
    moto: MotoIam
    azurite: Azurite
    gcs: FakeGcs
    tmp: Path
    monkeypatch: pytest.MonkeyPatch
    static_secrets: dict[str, str]
    bucket: str = ""
    container: str = ""
    wrong_container: str = ""
    gcs_bucket: str = ""
    # task id -> what it is ("s3 forbidden", ...); the failing ones by id.
    labels: dict[int, str] = field(default_factory=dict)
    failing: set[int] = field(default_factory=set)
    wrong_key_tasks: set[int] = field(default_factory=set)
    outputs: dict[str, str] = field(default_factory=dict)
    sts_answers: list[dict[str, str]] = field(default_factory=list)

    def azure_key(self, key: str) -> None:
        self.monkeypatch.setenv(
            "AZURE_STORAGE_CONNECTION_STRING", _connection_string(self.azurite, key)
        )

    def drop(self, label: str, table: Any, info: str, *, failing: bool = False) -> int:
        task = built_tasks.drop_table_task(
            table,
            realm_id=REALM,
            create_timestamp=0,
            extra_internal_properties={STORAGE_CONFIG_KEY: info},
        )
        self.store.insert_tasks([task])
        self.labels[task.id] = label
        if failing:
            self.failing.add(task.id)
        return task.id

    def add_tasks(self, step: str, *kinds: str) -> None:
        """One task per kind, its tables written for this step."""
        m, tmp = self.moto, self.tmp / step
        tmp.mkdir(exist_ok=True)
        for kind in kinds:
            name = f"{step}_{kind.replace(' ', '_')}"
            if kind == "s3":
                table = iam_s3_table(m, tmp, self.bucket, name)
                self.drop(kind, table, aws_storage_info(m, self.bucket, "purger"))
            elif kind in ("s3 powerless", "s3 forbidden"):
                role = kind.split()[1]
                table = iam_s3_table(m, tmp, self.bucket, name)
                self.drop(kind, table, aws_storage_info(m, self.bucket, role), failing=True)
            elif kind == "azure":
                table = azurite_table(self.azurite, tmp, self.container, name)
                self.drop(kind, table, azure_storage_info(self.container))
            elif kind == "azure wrong key":
                table = azurite_table(self.azurite, tmp, self.wrong_container, name)
                info = azure_storage_info(self.wrong_container)
                self.wrong_key_tasks.add(self.drop(kind, table, info, failing=True))
            elif kind == "gcs":
                table = fake_gcs_table(self.gcs, tmp, self.gcs_bucket, name)
                self.drop(kind, table, gcs_storage_info(self.gcs_bucket))
            elif kind == "gcs outside allowed":
                table = fake_gcs_table(self.gcs, tmp, self.gcs_bucket, name)
                info = json.loads(gcs_storage_info(self.gcs_bucket))
                info["allowedLocations"] = [f"gs://{self.gcs_bucket}/elsewhere"]
                self.drop(kind, table, json.dumps(info), failing=True)
            else:
                raise AssertionError(kind)

    def cli(self, name: str, *argv: str, capsys: pytest.CaptureFixture[str]) -> int:
        out = io.StringIO()
        code = main([*argv, "--metastore", self.url] if argv[0] == "tasks" else list(argv), out)
        captured = capsys.readouterr()
        self.outputs[f"{name} stdout"] = out.getvalue() + captured.out
        self.outputs[f"{name} stderr"] = captured.err
        return code

    def rows(self, label: str) -> None:
        """The task rows as they are now: properties, internal properties, the error."""
        for row in self.store.list_tasks():
            blob = json.dumps([row.name, row.properties, row.internal_properties, row.last_error])
            self.outputs[f"{label}: task {row.id} ({self.labels.get(row.id, 'child')})"] = blob

    def errors(self) -> dict[int, str]:
        return {r.id: r.last_error or "" for r in self.store.list_tasks() if r.id in self.failing}

    def secrets(self) -> dict[str, str]:
        """Label -> value of every secret the run could have seen.

        The STS sessions: every AccessKeyId and session token moto saw a request
        signed with (its request recorder), and the secret keys of the AssumeRole
        answers the sweeper got; every sessions moto saw must be among those answers,
        so none is missed. The SAS signatures: every one Azurite was shown.
        """
        found = dict(self.static_secrets)
        seen = self.moto.session_credentials_seen()
        answered = {c["AccessKeyId"]: c for c in self.sts_answers}
        assert seen and set(seen) <= set(answered), (sorted(seen), sorted(answered))
        for key_id, token in seen.items():
            assert answered[key_id]["SessionToken"] == token
        for i, (key_id, creds) in enumerate(answered.items()):
            found[f"STS session {i} AccessKeyId"] = key_id
            found[f"STS session {i} SecretAccessKey"] = creds["SecretAccessKey"]
            found[f"STS session {i} SessionToken"] = creds["SessionToken"]
        for i, sig in enumerate(sorted(self.azurite.signatures())):
            found[f"SAS sig {i}"] = sig
        return found


@pytest.fixture
def world(
    rel_db: RelDb,
    pg_role: PgRole,
    moto_iam: MotoIam,  # noqa: F811
    azurite: Azurite,  # noqa: F811
    fake_gcs: FakeGcs,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[World]:
    # The sweeper's identity: the base AWS user (may only assume roles), an account
    # key for Azurite, ADC for Google (never read with an emulator, but a secret of
    # its environment all the same).
    for name in list(os.environ):
        if name.startswith(("AWS_", "AZURE_", "GOOGLE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_iam.sweeper.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_iam.sweeper.secret)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    adc = {
        "type": "authorized_user",
        "client_id": "pp-client.apps.googleusercontent.com",
        "client_secret": f"pp-gcp-client-SECRET-{uuid.uuid4().hex}",
        "refresh_token": f"pp-gcp-refresh-SECRET-{uuid.uuid4().hex}",
    }
    adc_path = tmp_path / "adc.json"
    adc_path.write_text(json.dumps(adc), encoding="utf-8")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc_path))
    monkeypatch.setenv(EMULATOR_ENV, fake_gcs.url)
    # Every AssumeRole answer a botocore session of this process gets: botocore
    # registers its built-in handlers on each new session, the sweeper's included.
    answers: list[dict[str, str]] = []

    def keep(parsed: dict[str, Any], **_: Any) -> None:
        if parsed.get("Credentials"):
            answers.append({k: str(v) for k, v in parsed["Credentials"].items()})

    handlers = [*botocore.handlers.BUILTIN_HANDLERS, ("after-call.sts.AssumeRole", keep)]
    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", handlers)
    moto_iam.start_recording()
    store = Metastore(pg_role.url, policy=rel_policy(max_attempts=3))
    w = World(
        store=store,
        url=pg_role.url,
        moto=moto_iam,
        azurite=azurite,
        gcs=fake_gcs,
        tmp=tmp_path,
        monkeypatch=monkeypatch,
        sts_answers=answers,
        static_secrets={
            "sweeper AWS access key id": moto_iam.sweeper.key,
            "sweeper AWS secret key": moto_iam.sweeper.secret,
            "Azurite account key": ACCOUNT_KEY,
            "wrong Azure account key": WRONG_KEY,
            "ADC client secret": adc["client_secret"],
            "ADC refresh token": adc["refresh_token"],
            **{f"database password ({i})": s for i, s in enumerate(pg_role.spellings())},
            # The catalogs' AWS external ids (aws_storage_info's), in every task's
            # storage_configuration_info: `tasks show --json` prints those properties.
            **{f"externalId of {r}": f"ext-{r}" for r in ("purger", "powerless", "forbidden")},
        },
    )
    w.bucket = moto_iam.new_bucket()
    w.container = azurite.new_container()
    w.wrong_container = azurite.new_container()
    w.gcs_bucket = fake_gcs.new_bucket()
    try:
        yield w
    finally:
        store.dispose()


def _requests(
    world: World, instance: DagsterInstance, storage: PolarisStorageResource
) -> list[RunRequest]:
    """The deployed sweeper's requests, its storage check on the runs' own ``storage``."""
    resource = metastore_resource(world.store, lease_timeout_ms=60_000, grace_ms=0)
    with build_sensor_context(
        instance=instance,
        resources=sweeper_resources(resource, SweeperSettings(interval_seconds=0), storage=storage),
    ) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    return list(result.run_requests or []) if isinstance(result, SensorResult) else []


LOAD = (
    "per step, pyiceberg tables on moto S3 (IAM enforced), Azurite and fake-gcs-server, "
    "dropped as Polaris drops them (storage_configuration_info, no storage config file), "
    "and failing drops: a role the sweeper may not assume, a role without S3 rights, a "
    "wrong Azure account key, a GCS table outside the catalog's allowed locations"
)


@pytest.mark.scenario(8, "Secrets: catalog storage mode's vended credentials (S3, Azure, GCS)")
def test_no_vended_secret_in_rows_cli_logs_or_dagster_runs(
    world: World,
    scenario: Scenario,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    w = world
    caplog.set_level(logging.DEBUG)
    scenario.load = LOAD
    sweep = ["sweep", "--metastore", w.url, "--grace-ms", "0", "--max-attempts", "3"]

    # 1. The CLI, text (verbose): the Azure key configured is the wrong one.
    w.azure_key(WRONG_KEY)
    failing = ["s3 powerless", "s3 forbidden", "azure wrong key", "gcs outside allowed"]
    w.add_tasks("text", "s3", "gcs", *failing)
    assert w.cli("sweep (text, -v)", "-v", *sweep, capsys=capsys) == EXIT_TASK_FAILED
    errors = w.errors()
    assert set(errors) == w.failing and all(errors.values()), errors
    by_label = {w.labels[i]: e for i, e in errors.items()}
    assert "AccessDenied" in by_label["s3 forbidden"], by_label
    assert "Forbidden" in by_label["s3 powerless"] or "AccessDenied" in by_label["s3 powerless"]
    assert "authenticat" in by_label["azure wrong key"], by_label
    assert "outside the catalog's allowedLocations" in by_label["gcs outside allowed"]
    w.rows("after the text sweep")
    for task_id in sorted(w.failing):
        w.cli(f"tasks show {task_id}", "tasks", "show", str(task_id), capsys=capsys)
        w.cli(
            f"tasks show {task_id} --json", "tasks", "show", str(task_id), "--json", capsys=capsys
        )
    w.cli("tasks list --json", "tasks", "list", "--json", capsys=capsys)
    w.cli("tasks list", "tasks", "list", capsys=capsys)
    scenario.check(
        "the CLI's sweep recorded one error per failing task (AssumeRole denied, the "
        "role's session denied by S3, the SAS of a wrong key refused, a GCS location the "
        "catalog does not allow)"
    )

    # 2. The CLI, JSON: the right Azure key.
    w.azure_key(ACCOUNT_KEY)
    w.add_tasks("json", "s3", "s3 forbidden", "azure", "gcs")
    assert w.cli("sweep (--json)", *sweep, "--json", capsys=capsys) == EXIT_TASK_FAILED
    json.loads(w.outputs["sweep (--json) stdout"])
    w.rows("after the JSON sweep")

    # 3. Dagster: the sensor's requests, each run executed in process; the wrong key
    # is what the environment holds while the wrong-key task's run works.
    w.add_tasks("dagster", "s3", "s3 powerless", "azure", "azure wrong key", "gcs")
    storage = PolarisStorageResource(locations=[])
    metastore = metastore_resource(w.store, lease_timeout_ms=60_000, grace_ms=0)
    run_ids: list[str] = []
    failed_runs: list[str] = []
    # The shipped job's retries, as many, without their 2-4-8 s waits (a minute of this
    # test's time asleep): what is searched is what each attempt wrote, not when.
    job = build_polaris_task_job(
        retry_policy=RetryPolicy(max_retries=DEFAULT_RETRY_POLICY.max_retries, delay=0.05)
    )
    with temp_instance(tmp_path / "dagster_home") as inst:
        requests = _requests(w, inst, storage)
        assert requests
        for request in requests:
            task_id = int(request.tags.get(TAG_TASK_ID, "0"))
            w.azure_key(WRONG_KEY if task_id in w.wrong_key_tasks else ACCOUNT_KEY)
            result = job.execute_in_process(
                run_config=request.run_config,
                tags=request.tags,
                instance=inst,
                resources={"metastore": metastore, "storage": storage},
                raise_on_error=False,
            )
            run_ids.append(result.run_id)
            if not result.success:
                failed_runs.append(w.labels.get(task_id, str(task_id)))
        for run_id in run_ids:
            run = inst.get_run_by_id(run_id)
            assert run is not None
            w.outputs[f"run {run_id} tags"] = json.dumps(run.tags)
            w.outputs[f"run {run_id} config"] = json.dumps(run.run_config)
            events = inst.all_logs(run_id)
            w.outputs[f"run {run_id} events"] = "\n".join(serialize_value(e) for e in events)
    w.rows("after the Dagster runs")
    assert {"s3 powerless", "azure wrong key"} <= set(failed_runs), failed_runs
    scenario.check(
        f"{len(run_ids)} task job runs in process, {len(failed_runs)} failed with their "
        "errors in the event log (the role without S3 rights, the wrong key among them)"
    )
    wire_records = 0
    for record in caplog.records:
        if record.name in WIRE_LOGGERS:
            wire_records += 1
            continue
        key = f"DEBUG log of {record.name}"
        w.outputs[key] = w.outputs.get(key, "") + "\n" + caplog.handler.format(record)

    secrets = w.secrets()
    sessions = [k for k in secrets if k.startswith("STS session")]
    sigs = [k for k in secrets if k.startswith("SAS sig")]
    # purger and powerless sessions in every step that had them (forbidden gets none).
    assert len(sessions) >= 3 * 4, sessions
    assert len(sigs) >= 3, sigs  # a right and a wrong key's SAS at least
    leaks = sorted(
        f"{what} in {where}"
        for what, value in secrets.items()
        for where, text in w.outputs.items()
        if any(s in text for s in spellings(value))
        # The rows hold the external ids Polaris copied there: only what we print counts.
        and not (what.startswith("externalId of") and ": task " in where)
    )
    scenario.losses(secrets_exposed=len(leaks))
    scenario.metrics.update(
        {
            "secrets_searched": len(secrets),
            "sts_sessions_learnt": len(sessions) // 3,
            "sas_signatures_learnt": len(sigs),
            "outputs_searched": len(w.outputs),
            "log_records_searched": len(caplog.records) - wire_records,
            "wire_log_records_not_searched": wire_records,
            "dagster_runs": len(run_ids),
            "failed_runs": failed_runs,
            "recorded_errors": sorted({e[:200] for e in errors.values()}),
        }
    )
    assert not leaks, leaks
    scenario.check(
        "no STS session key id, secret key or session token (every session moto handed out), "
        "no SAS signature (every one Azurite was shown), no account key (right or wrong), "
        "no base AWS credential, ADC secret or database password in the task rows, the CLI's "
        "text and JSON output, the logs at DEBUG (every logger but botocore's wire dumps), "
        "or the runs' tags, config and event logs; no catalog externalId in any of these "
        "but the rows Polaris wrote it in"
    )
