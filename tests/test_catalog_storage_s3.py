"""Catalog storage mode on S3: the task's storage_configuration_info, decoded, and
credentials from STS AssumeRole scoped to the table, against moto with IAM enforced.

moto checks identity policies (the sweeper's base user may only assume roles; only
the ``purger`` role may touch buckets) but neither session policies nor external
ids, so the AssumeRole request the sweeper sends is captured on its own botocore
session and checked here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from pyiceberg.table import Table

from builders import tasks as built_tasks
from builders.ports import free_port
from polaris_pipeline.errors import PayloadError, StorageConfigError, StorageError
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.storage.catalog_config import (
    STORAGE_CONFIG_KEY,
    AwsStorage,
    AzureStorage,
    FileStorage,
    GcsStorage,
    catalog_storage,
    decode_storage_config,
)
from polaris_pipeline.storage.config import StorageConfig, StorageRule
from polaris_pipeline.storage.credentials.s3 import StsCredentials, s3_options, session_policy
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.scope import task_scope
from polaris_pipeline.tasks.model import Prop
from tests.support.catalog_storage import (
    aws_storage_info,
    iam_s3_table,
    polaris_catalog,
    pre_1_7_view_task,
)
from tests.support.iceberg import recorded_drop_task, view_metadata
from tests.support.s3 import MotoIam

# -- decoding ------------------------------------------------------------------------

AWS_DOC = {
    "@type": "AwsStorageConfigurationInfo",
    "storageType": "S3",
    "allowedLocations": ["s3://bucket/wh/"],
    "roleARN": "arn:aws:iam::123456789012:role/catalog",
    "externalId": "ext-123",
    "region": "eu-west-1",
    "endpoint": "http://minio:9000",
    "stsEndpoint": "http://sts:9000",
    "pathStyleAccess": True,
    "currentKmsKey": "arn:aws:kms:eu-west-1:123456789012:key/current",
    "allowedKmsKeys": ["arn:aws:kms:eu-west-1:123456789012:key/old"],
    "someFieldOfANewerPolaris": {"x": 1},
}


def test_decodes_the_four_types_polaris_writes() -> None:
    aws = decode_storage_config(json.dumps(AWS_DOC))
    assert isinstance(aws, AwsStorage)
    assert aws.role_arn == "arn:aws:iam::123456789012:role/catalog"
    assert aws.external_id == "ext-123"
    assert aws.sts_url == "http://sts:9000"
    assert aws.path_style_access and not aws.sts_unavailable
    assert aws.allowed_kms_keys == ("arn:aws:kms:eu-west-1:123456789012:key/old",)
    azure = decode_storage_config(
        json.dumps(
            {
                "@type": "AzureStorageConfigurationInfo",
                "storageType": "AZURE",
                "allowedLocations": ["abfss://c@acct.dfs.core.windows.net/wh"],
                "tenantId": "tenant",
                "hierarchical": True,
            }
        )
    )
    assert isinstance(azure, AzureStorage) and azure.tenant_id == "tenant" and azure.hierarchical
    gcs = decode_storage_config(
        json.dumps(
            {
                "@type": "GcpStorageConfigurationInfo",
                "allowedLocations": ["gs://b/wh"],
                "gcpServiceAccount": "sa@p.iam.gserviceaccount.com",
            }
        )
    )
    assert isinstance(gcs, GcsStorage) and gcs.gcp_service_account == "sa@p.iam.gserviceaccount.com"
    local = decode_storage_config(
        '{"@type": "FileStorageConfigurationInfo", "allowedLocations": ["file:///tmp", "*"]}'
    )
    assert isinstance(local, FileStorage) and local.allowed_locations == ("file:///tmp", "*")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("{not json", "is not JSON"),
        ("[1]", "JSON list, not an object"),
        ('{"storageType": "S3"}', "no '@type'"),
        ('{"@type": "HdfsStorageConfigurationInfo"}', "unknown '@type'"),
        ('{"@type": "AwsStorageConfigurationInfo", "storageType": "GCS"}', "'storageType' says"),
        ('{"@type": "AwsStorageConfigurationInfo", "roleARN": 7}', "'roleARN' must be a string"),
        ('{"@type": "AwsStorageConfigurationInfo", "roleARN": "admin"}', "not a role ARN"),
        ('{"@type": "AwsStorageConfigurationInfo", "pathStyleAccess": "yes"}', "true or false"),
        ('{"@type": "AwsStorageConfigurationInfo", "allowedLocations": "s3://b"}', "list of"),
        ('{"@type": "AwsStorageConfigurationInfo", "allowedLocations": [""]}', "list of"),
        ('{"@type": "AwsStorageConfigurationInfo", "allowedLocations": ["gs://b"]}', "s3://"),
        ('{"@type": "GcpStorageConfigurationInfo", "allowedLocations": ["s3://b"]}', "gs://"),
        ('{"@type": "FileStorageConfigurationInfo", "allowedLocations": ["s3://b"]}', "local"),
    ],
)
def test_malformed_documents_are_payload_errors(text: str, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        decode_storage_config(text)


def test_absent_config_is_static_mode_but_a_blank_one_is_an_error() -> None:
    assert catalog_storage({"storageLocation": "s3://b/t"}) is None
    with pytest.raises(PayloadError, match="is empty"):
        catalog_storage({STORAGE_CONFIG_KEY: ""})


def test_errors_never_quote_the_external_id() -> None:
    doc = dict(AWS_DOC, externalId="very-secret-ext", pathStyleAccess="nope")
    with pytest.raises(PayloadError) as info:
        decode_storage_config(json.dumps(doc))
    assert "very-secret-ext" not in str(info.value)


# -- scope and policy ----------------------------------------------------------------


def _aws(**fields: Any) -> AwsStorage:
    doc = {"@type": "AwsStorageConfigurationInfo", "allowedLocations": ["s3://b/wh"], **fields}
    storage = decode_storage_config(json.dumps(doc))
    assert isinstance(storage, AwsStorage)
    return storage


def test_scope_is_the_location_plus_recorded_roots_inside_allowed_locations() -> None:
    storage = _aws()
    scope = task_scope(
        storage,
        {
            "storageLocation": "s3a://b/wh/ns/t/",
            "write.data.path": "s3://b/wh/data/t",
            "write.metadata.path": "s3://b/wh2/meta/t",  # outside: a sibling of wh, not in it
            "write.object-storage.path": "s3://b/wh/ns/t/objects",  # already covered
        },
    )
    assert scope == ("s3://b/wh/ns/t", "s3://b/wh/data/t")


@pytest.mark.parametrize(
    ("internal", "message"),
    [
        ({}, "no storageLocation"),
        ({"storageLocation": "  "}, "no storageLocation"),
        ({"storageLocation": "s3://b/wh2/t"}, "outside the catalog's allowedLocations"),
        ({"storageLocation": "s3://other/wh/t"}, "outside the catalog's allowedLocations"),
    ],
)
def test_scope_refuses_what_the_catalog_did_not_allow(
    internal: dict[str, str], message: str
) -> None:
    with pytest.raises(StorageError, match=message):
        task_scope(_aws(), internal)


def test_session_policy_names_only_the_granted_prefixes() -> None:
    storage = _aws(currentKmsKey="arn:aws:kms:us-east-1:1:key/k", roleARN="arn:aws:iam::1:role/r")
    policy = session_policy(storage, ["s3://b/wh/ns/t*?$", "s3://b/wh/data"])
    by_action = {tuple(s["Action"]): s for s in policy["Statement"]}
    objects = ["arn:aws:s3:::b/wh/ns/t${*}${?}${$}/*", "arn:aws:s3:::b/wh/data/*"]
    assert by_action[("s3:DeleteObject",)]["Resource"] == objects
    assert by_action[("s3:GetObject", "s3:GetObjectVersion")]["Resource"] == objects
    listing = by_action[("s3:ListBucket",)]
    assert listing["Resource"] == ["arn:aws:s3:::b"]
    assert listing["Condition"] == {
        "StringLike": {"s3:prefix": ["wh/ns/t${*}${?}${$}/*", "wh/data/*"]}
    }
    assert by_action[("kms:DescribeKey", "kms:Decrypt")]["Resource"] == [
        "arn:aws:kms:us-east-1:1:key/k"
    ]
    assert not any("s3:PutObject" in s["Action"] for s in policy["Statement"])
    kms_off = session_policy(_aws(currentKmsKey="k", kmsUnavailable=True), ["s3://b/wh/t"])
    assert not any("kms:Decrypt" in s["Action"] for s in kms_off["Statement"])


def test_s3_options_follow_the_catalog() -> None:
    options = s3_options(_aws(endpoint="http://e:1", region="r1", pathStyleAccess=True), None)
    assert options == {
        "endpoint_url": "http://e:1",
        "client_kwargs": {"region_name": "r1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
    }
    assert "key" not in options  # no session: the sweeper's own chain signs


# -- against moto with IAM enforced --------------------------------------------------


class StsRecorder:
    """The sweeper's botocore session, recording each AssumeRole it sends and gets."""

    def __init__(self) -> None:
        self.session = botocore.session.Session()
        self.requests: list[dict[str, Any]] = []
        self.secrets: list[str] = []
        self.session.register("provide-client-params.sts.AssumeRole", self._request)
        self.session.register("after-call.sts.AssumeRole", self._response)

    def _request(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(dict(params))

    def _response(self, parsed: dict[str, Any], **_: Any) -> None:
        creds = parsed.get("Credentials") or {}
        self.secrets += [v for k, v in creds.items() if k in ("SecretAccessKey", "SessionToken")]


@pytest.fixture
def recorder(sweeper_identity: None) -> StsRecorder:
    return StsRecorder()


def _drop(store: Metastore, table: Table, storage_info: str) -> int:
    task = built_tasks.drop_table_task(
        table, extra_internal_properties={STORAGE_CONFIG_KEY: storage_info}
    )
    store.insert_tasks([task])
    return task.id


def _keys_of(moto_iam: MotoIam, bucket: str, table: Table) -> set[str]:
    prefix = table.location().split(f"s3://{bucket}/", 1)[1] + "/"
    return {k for k in moto_iam.keys(bucket) if k.startswith(prefix)}


def _sweep(store: Metastore, recorder: StsRecorder, config: StorageConfig | None = None) -> Any:
    resolver = StorageResolver(config, sts=StsCredentials(session=recorder.session))
    with Runner(store, config, resolver=resolver) as runner:
        return sweep_tasks(runner)


def test_table_purged_with_assumed_role_and_no_storage_config(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    assert _keys_of(moto_iam, bucket, table)
    # A neighbour whose location starts with the table's: the policy must not cover it.
    neighbour = table.location().split(f"s3://{bucket}/", 1)[1] + "2/data/keep.parquet"
    moto_iam.client().put_object(Bucket=bucket, Key=neighbour, Body=b"keep")
    task_id = _drop(store, table, aws_storage_info(moto_iam, bucket, "purger"))

    outcomes = _sweep(store, recorder)

    assert [o.status for o in outcomes] == [Status.DONE] * len(outcomes)
    assert len(outcomes) > 1  # the table task and its children
    assert store.get_task("POLARIS", task_id) is None
    assert _keys_of(moto_iam, bucket, table) == set()
    assert neighbour in moto_iam.keys(bucket)
    # One AssumeRole for the whole tree: children reuse the parent's scope and credentials.
    assert len(recorder.requests) == 1
    request = recorder.requests[0]
    assert request["RoleArn"] == moto_iam.role_arn("purger")
    assert request["ExternalId"] == "ext-purger"
    policy = json.loads(request["Policy"])
    prefix = table.location().split(f"s3://{bucket}/", 1)[1]
    resources = {r for s in policy["Statement"] for r in s["Resource"]}
    assert resources == {f"arn:aws:s3:::{bucket}/{prefix}/*", f"arn:aws:s3:::{bucket}"}
    listing = [s for s in policy["Statement"] if s["Action"] == ["s3:ListBucket"]]
    assert listing[0]["Condition"] == {"StringLike": {"s3:prefix": [f"{prefix}/*"]}}
    # The scoped session may ask whether the bucket keeps deleted objects: it does not.
    totals = OutcomeTotals.of(outcomes)
    assert totals.files_deleted and totals.files_retained == totals.retention_unknown == 0


def test_a_versioned_bucket_in_catalog_mode_is_reported_as_keeping(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    moto_iam.client().put_bucket_versioning(
        Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    _drop(store, table, aws_storage_info(moto_iam, bucket, "purger"))

    outcomes = _sweep(store, recorder)

    assert [o.status for o in outcomes] == [Status.DONE] * len(outcomes)
    totals = OutcomeTotals.of(outcomes)
    assert totals.files_deleted and totals.files_retained == totals.files_deleted
    assert "kept by the bucket's versioning" in totals.line()


@pytest.mark.slow
def test_denied_roles_fail_clearly_delete_nothing_and_the_sweep_goes_on(
    moto_iam: MotoIam,
    recorder: StsRecorder,
    store: Metastore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="polaris_pipeline")
    bucket = moto_iam.new_bucket()
    # One table dropped twice (two tasks, two roles): both must fail and keep it whole.
    kept = iam_s3_table(moto_iam, tmp_path, bucket, "kept")
    fine = iam_s3_table(moto_iam, tmp_path, bucket, "fine")
    before = _keys_of(moto_iam, bucket, kept)
    ids = {
        "powerless": _drop(store, kept, aws_storage_info(moto_iam, bucket, "powerless")),
        "forbidden": _drop(store, kept, aws_storage_info(moto_iam, bucket, "forbidden")),
        "fine": _drop(store, fine, aws_storage_info(moto_iam, bucket, "purger")),
    }

    outcomes = _sweep(store, recorder)

    by_id = {o.lease.task_id: o for o in outcomes}
    assert by_id[ids["powerless"]].status is Status.FAILED
    assert by_id[ids["forbidden"]].status is Status.FAILED
    assert store.get_task("POLARIS", ids["fine"]) is None
    assert _keys_of(moto_iam, bucket, fine) == set()
    assert _keys_of(moto_iam, bucket, kept) == before
    rows = {name: store.get_task("POLARIS", i) for name, i in ids.items() if name != "fine"}
    errors = {name: row.properties[Prop.ERROR] for name, row in rows.items() if row}
    assert "AccessDenied" in errors["powerless"] or "Forbidden" in errors["powerless"]
    assert (
        "STS AssumeRole on arn:aws:iam::123456789012:role/forbidden failed: AccessDenied"
        in (errors["forbidden"])
    )
    for row in rows.values():
        assert row is not None and row.properties.get(Prop.NEXT_ATTEMPT)  # backs off
    # No credential of any kind in what was recorded or logged.
    recorded = json.dumps([row.properties for row in rows.values() if row]) + caplog.text
    assert "AccessDenied" in caplog.text
    assert len(recorder.secrets) == 4  # the powerless and the purger roles' sessions
    for secret in [*recorder.secrets, moto_iam.sweeper.secret, "ext-forbidden", "ext-powerless"]:
        assert secret not in recorded


def test_malformed_or_misplaced_configs_are_recorded_and_delete_nothing(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "kept")
    before = _keys_of(moto_iam, bucket, table)
    bad_id = _drop(store, table, '{"@type": "HdfsStorageConfigurationInfo"}')
    out_id = _drop(
        store,
        table,
        aws_storage_info(moto_iam, bucket, "purger", allowedLocations=[f"s3://{bucket}/elsewhere"]),
    )

    _sweep(store, recorder)

    bad, out = store.get_task("POLARIS", bad_id), store.get_task("POLARIS", out_id)
    assert (
        bad is not None
        and "unknown '@type' 'HdfsStorageConfigurationInfo'" in (bad.properties[Prop.ERROR])
    )
    assert (
        out is not None and "outside the catalog's allowedLocations" in (out.properties[Prop.ERROR])
    )
    assert recorder.requests == []  # nothing was even asked of STS
    assert _keys_of(moto_iam, bucket, table) == before


def test_sts_unavailable_uses_the_sweepers_own_identity(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "direct")
    before = _keys_of(moto_iam, bucket, table)
    task_id = _drop(store, table, aws_storage_info(moto_iam, bucket, "purger", stsUnavailable=True))

    _sweep(store, recorder)

    # No AssumeRole; the base user itself may not read the bucket, so moto refuses it.
    assert recorder.requests == []
    row = store.get_task("POLARIS", task_id)
    assert row is not None and "Forbidden" in row.properties[Prop.ERROR]
    assert _keys_of(moto_iam, bucket, table) == before


def test_a_static_rule_overrides_the_catalog_for_its_prefix(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "static")
    _drop(store, table, aws_storage_info(moto_iam, bucket, "forbidden"))
    admin = {
        "endpoint_url": moto_iam.endpoint_url,
        "key": moto_iam.admin.key,
        "secret": moto_iam.admin.secret,
        "client_kwargs": {"region_name": moto_iam.region},
    }
    config = StorageConfig(rules=(StorageRule(f"s3://{bucket}", admin),))

    outcomes = _sweep(store, recorder, config)

    assert outcomes and all(o.status is Status.DONE for o in outcomes)
    assert recorder.requests == []
    assert _keys_of(moto_iam, bucket, table) == set()


def test_credentials_are_cached_per_scope_and_refreshed_before_expiry(
    moto_iam: MotoIam, recorder: StsRecorder
) -> None:
    now = [1_000_000_000.0]
    sts = StsCredentials(session=recorder.session, refresh_margin_s=600, clock=lambda: now[0])
    storage = _aws(
        roleARN=moto_iam.role_arn("purger"),
        externalId="ext-e",
        endpoint=moto_iam.endpoint_url,
        allowedLocations=["s3://b"],
    )
    first = sts.get(storage, ["s3://b/t"])
    assert first is not None
    now[0] = first.expires_at - 601
    assert sts.get(storage, ["s3://b/t"]) is first
    assert len(recorder.requests) == 1
    assert sts.get(storage, ["s3://b/t2"]) is not first  # another location set, another call
    assert len(recorder.requests) == 2
    now[0] = first.expires_at - 599  # inside the margin: asked again before it expires
    assert sts.get(storage, ["s3://b/t"]) is not first
    assert len(recorder.requests) == 3
    assert repr(first).count(first.access_key_id) == 0


# -- tasks Polaris wrote without a storage configuration: the catalog's, looked up ----


def _put_view(moto_iam: MotoIam, bucket: str, location: str) -> str:
    uri, body = view_metadata(location)
    moto_iam.client().put_object(Bucket=bucket, Key=uri.split(f"s3://{bucket}/", 1)[1], Body=body)
    return uri


def test_a_pre_1_7_view_task_is_purged_with_its_catalogs_storage_configuration(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore
) -> None:
    bucket = moto_iam.new_bucket()
    location = f"s3://{bucket}/wh/ns/v"
    older, current = _put_view(moto_iam, bucket, location), _put_view(moto_iam, bucket, location)
    polaris_catalog(store, aws_storage_info(moto_iam, bucket, "purger"))
    task = pre_1_7_view_task(current, location)
    store.insert_tasks([task])

    outcomes = _sweep(store, recorder)

    assert [o.status for o in outcomes] == [Status.DONE], [o.error for o in outcomes]
    assert store.get_task("POLARIS", task.id) is None
    keys = moto_iam.keys(bucket)
    assert current.split(f"s3://{bucket}/", 1)[1] not in keys
    assert older.split(f"s3://{bucket}/", 1)[1] in keys  # only the current file, as 1.7 does
    # The catalog's role, scoped to the view's recorded location.
    [request] = recorder.requests
    assert request["RoleArn"] == moto_iam.role_arn("purger")
    resources = {r for s in json.loads(request["Policy"])["Statement"] for r in s["Resource"]}
    assert f"arn:aws:s3:::{bucket}/wh/ns/v/*" in resources


def test_a_table_task_without_storage_configuration_is_purged_with_its_catalogs(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    assert _keys_of(moto_iam, bucket, table)
    polaris_catalog(store, aws_storage_info(moto_iam, bucket, "purger"))
    task = recorded_drop_task(
        table.metadata_location, entity_properties={"location": table.location()}
    )
    store.insert_tasks([task])

    outcomes = _sweep(store, recorder)

    assert len(outcomes) > 1  # the children reached the bucket too: they inherit it
    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert _keys_of(moto_iam, bucket, table) == set()
    assert len(recorder.requests) == 1


@pytest.mark.parametrize(
    "case", ["no recorded location", "catalog of another realm", "outside allowedLocations"]
)
def test_a_view_task_the_catalog_cannot_reach_is_recorded_and_deletes_nothing(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, case: str
) -> None:
    bucket = moto_iam.new_bucket()
    location = f"s3://{bucket}/wh/ns/v"
    current = _put_view(moto_iam, bucket, location)
    before = moto_iam.keys(bucket)
    allowed = f"s3://{bucket}/elsewhere" if case == "outside allowedLocations" else None
    extra = {"allowedLocations": [allowed]} if allowed else {}
    realm = "OTHER" if case == "catalog of another realm" else "POLARIS"
    polaris_catalog(store, aws_storage_info(moto_iam, bucket, "purger", **extra), realm_id=realm)
    task = pre_1_7_view_task(current, None if case == "no recorded location" else location)
    store.insert_tasks([task])

    _sweep(store, recorder)

    row = store.get_task("POLARIS", task.id)
    assert row is not None
    expected = {
        "no recorded location": "recorded no table location",
        # Not this realm's catalog: the static config, which has no rule for the bucket.
        "catalog of another realm": "cannot stat",
        "outside allowedLocations": "outside the catalog's allowedLocations",
    }[case]
    assert expected in row.properties[Prop.ERROR]
    assert recorder.requests == []
    assert moto_iam.keys(bucket) == before


# -- which of the catalog's endpoints: endpointInternal (Polaris's) or endpoint ----------


@pytest.mark.slow
@pytest.mark.parametrize("choice", [None, "endpointInternal", "endpoint"])
def test_the_catalog_endpoint_the_storage_config_chooses_is_the_one_reached(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path, choice: str | None
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    reached, unreachable = moto_iam.endpoint_url, closed
    if choice == "endpoint":
        endpoints = {"endpoint": reached, "endpointInternal": unreachable}
    else:  # unset: Polaris's own preference, endpointInternal
        endpoints = {"endpoint": unreachable, "endpointInternal": reached}
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    _drop(store, table, aws_storage_info(moto_iam, bucket, "purger", **endpoints))
    config = StorageConfig.from_mapping({"catalog_s3_endpoint": choice} if choice else {})

    outcomes = _sweep(store, recorder, config)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert _keys_of(moto_iam, bucket, table) == set()


def test_an_unknown_endpoint_choice_is_refused_naming_the_setting() -> None:
    with pytest.raises(StorageConfigError, match="catalog_s3_endpoint must be one of"):
        StorageConfig.from_mapping({"catalog_s3_endpoint": "internal"})


# -- storageName: named credentials, never a silent fallback --------------------------


def _named(**entries: Any) -> StorageConfig:
    return StorageConfig.from_mapping({"storage_names": entries})


@pytest.mark.slow
def test_a_storage_name_signs_with_its_named_identity_and_not_the_default(
    moto_iam: MotoIam,
    store: Metastore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="polaris_pipeline")
    # The default chain holds keys moto does not know: only the named identity works.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNDEFAULT00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unknown-default-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("ANALYTICS_AWS_KEY", moto_iam.sweeper.key)
    monkeypatch.setenv("ANALYTICS_AWS_SECRET", moto_iam.sweeper.secret)
    recorder = StsRecorder()
    bucket = moto_iam.new_bucket()
    named = iam_s3_table(moto_iam, tmp_path, bucket, "named")
    unnamed = iam_s3_table(moto_iam, tmp_path, bucket, "unnamed")
    before = _keys_of(moto_iam, bucket, unnamed)
    named_id = _drop(
        store, named, aws_storage_info(moto_iam, bucket, "purger", storageName="analytics")
    )
    unnamed_id = _drop(store, unnamed, aws_storage_info(moto_iam, bucket, "purger"))
    config = _named(
        analytics={"key": {"env": "ANALYTICS_AWS_KEY"}, "secret": {"env": "ANALYTICS_AWS_SECRET"}}
    )

    _sweep(store, recorder, config)

    assert store.get_task("POLARIS", named_id) is None
    assert _keys_of(moto_iam, bucket, named) == set()
    # The same role without a storageName goes through the default chain, and fails.
    row = store.get_task("POLARIS", unnamed_id)
    assert row is not None and "InvalidClientTokenId" in row.properties[Prop.ERROR]
    assert _keys_of(moto_iam, bucket, unnamed) == before
    assert moto_iam.sweeper.secret not in json.dumps(row.properties) + caplog.text
    assert moto_iam.sweeper.secret not in repr(config)


def test_an_unmapped_storage_name_fails_in_one_line_and_never_uses_the_default(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    before = _keys_of(moto_iam, bucket, table)
    # The default identity could assume the role: it must not be used for the name.
    task_id = _drop(
        store, table, aws_storage_info(moto_iam, bucket, "purger", storageName="analytics")
    )

    _sweep(store, recorder, _named(other={"default_identity": True}))

    row = store.get_task("POLARIS", task_id)
    assert row is not None
    error = row.properties[Prop.ERROR]
    assert "storageName 'analytics'" in error and "add storage_names:" in error
    assert "\n" not in error
    assert recorder.requests == []
    assert _keys_of(moto_iam, bucket, table) == before


def test_a_storage_name_mapped_to_the_default_identity_uses_it(
    moto_iam: MotoIam, recorder: StsRecorder, store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    _drop(store, table, aws_storage_info(moto_iam, bucket, "purger", storageName="shared"))

    outcomes = _sweep(store, recorder, _named(shared={"default_identity": True}))

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert len(recorder.requests) == 1


def test_without_sts_the_named_identity_signs_the_requests_itself(
    moto_iam: MotoIam,
    recorder: StsRecorder,
    store: Metastore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default identity (the sweeper user) may not touch buckets; the named one may.
    monkeypatch.setenv("DIRECT_KEY", moto_iam.admin.key)
    monkeypatch.setenv("DIRECT_SECRET", moto_iam.admin.secret)
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    info = aws_storage_info(moto_iam, bucket, "purger", stsUnavailable=True, storageName="direct")
    _drop(store, table, info)

    config = _named(direct={"key": {"env": "DIRECT_KEY"}, "secret": {"env": "DIRECT_SECRET"}})
    outcomes = _sweep(store, recorder, config)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert recorder.requests == []
    assert _keys_of(moto_iam, bucket, table) == set()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"key": "AKIA1234"}, "needs both key and secret"),
        ({}, "needs both key and secret"),
        ({"default_identity": True, "key": "AKIA1234"}, "takes no key"),
        ({"default_identity": "yes"}, "true or false"),
        ({"profile": "p"}, "unknown key 'profile'"),
        ({"key": "", "secret": "s"}, "key must be a non-empty string"),
        (
            {"key": {"env": "PP_NOT_SET_ANYWHERE"}, "secret": "s"},
            "'PP_NOT_SET_ANYWHERE' is not set",
        ),
        ("analytics-key", "must be a mapping"),
    ],
)
def test_a_malformed_storage_name_entry_is_refused_when_the_config_loads(
    entry: Any, message: str
) -> None:
    with pytest.raises(StorageConfigError, match=message) as info:
        _named(analytics=entry)
    assert "storage_names" in str(info.value)
    assert "AKIA1234" not in str(info.value)


def test_named_keys_on_azure_storage_are_refused_naming_the_name() -> None:
    azure = json.dumps(
        {
            "@type": "AzureStorageConfigurationInfo",
            "allowedLocations": ["abfs://c@acct.dfs.core.windows.net/wh"],
            "storageName": "lake",
        }
    )
    task = built_tasks.task_row(
        built_tasks.NewTask(
            "POLARIS",
            7,
            "t",
            {},
            {
                STORAGE_CONFIG_KEY: azure,
                "storageLocation": "abfs://c@acct.dfs.core.windows.net/wh/t",
            },
        )
    )
    resolver = StorageResolver(_named(lake={"key": "AKIA1234", "secret": "s3cr3t-value"}))
    with pytest.raises(StorageError, match=r"storage_names\.lake holds S3 keys"):
        resolver.for_task(task)
    with pytest.raises(StorageError, match="storageName 'lake'"):
        StorageResolver().for_task(task)
    named = StorageResolver(_named(lake={"default_identity": True})).for_task(task)
    assert named is not None
