"""Deletes on stores that keep deleted objects are reported as kept, never as freed.

Against real emulator servers (no client is mocked):

- moto: S3 ``GetBucketVersioning`` for unversioned, Enabled and Suspended buckets,
  and, with IAM enforced, a deleter not allowed to ask (reported as unknown).
  The noncurrent versions are still there after our deletes (on an Enabled
  bucket: on a Suspended one moto, unlike S3, deletes a key's versions outright
  when the key is deleted, so only the report is asserted there).
- Azurite: the blob service's ``delete_retention_policy`` is set and read back
  (``set_service_properties`` / ``get_service_properties``) and steers the answer.
- fake-gcs-server: ``buckets.get`` is answered, so an unversioned bucket reads as
  freeing. A versioned one cannot be made there: its filesystem backend (the one the
  fixture runs) refuses ``versioning.enabled`` ("not implemented: fs storage type
  does not support versioning yet"), and it has no ``softDeletePolicy``. The GCS
  rule (``versioning.enabled`` or a soft-delete retention) is untested against a
  server.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from polaris_pipeline.storage.config import StorageConfig, StorageRule
from polaris_pipeline.storage.delete import bulk_delete
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.retention_probe import Retention
from tests.support.s3 import MotoIam, MotoS3

pytest_plugins = ["tests.support.azurite", "tests.support.gcs"]


def _bucket(moto: MotoS3, versioning: str | None) -> str:
    name = f"pp-ver-{uuid.uuid4().hex[:12]}"
    client = moto.client()
    client.create_bucket(Bucket=name)
    if versioning is not None:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        if versioning == "Suspended":
            client.put_object(Bucket=name, Key="t/data/a.parquet", Body=b"old")
            client.put_bucket_versioning(
                Bucket=name, VersioningConfiguration={"Status": "Suspended"}
            )
    # Suspended: a.parquet keeps the version written while versioning was on (moto
    # would turn it into the "null" version if it were written again now).
    for key in ("t/data/a.parquet", "t/data/b.parquet")[1 if versioning == "Suspended" else 0 :]:
        client.put_object(Bucket=name, Key=key, Body=b"x" * 100)
    return name


def _uris(bucket: str) -> list[str]:
    return [f"s3://{bucket}/t/data/a.parquet", f"s3://{bucket}/t/data/b.parquet"]


def test_unversioned_bucket_frees_what_it_deletes(moto_server: MotoS3) -> None:
    bucket = _bucket(moto_server, None)
    report = bulk_delete(StorageResolver(moto_server.storage_config(bucket)), _uris(bucket))
    assert len(report.deleted) == 2
    assert report.retained == [] and report.retention_unknown == []
    assert report.bytes_retained == 0


@pytest.mark.parametrize("status", ["Enabled", "Suspended"])
def test_versioned_bucket_keeps_and_no_version_is_deleted(moto_server: MotoS3, status: str) -> None:
    bucket = _bucket(moto_server, status)
    client = moto_server.client()
    before = client.list_object_versions(Bucket=bucket)["Versions"]
    resolver = StorageResolver(moto_server.storage_config(bucket))
    report = bulk_delete(resolver, _uris(bucket))
    assert sorted(report.retained) == sorted(_uris(bucket)) == sorted(report.deleted)
    assert report.bytes_freed == 0  # nothing counted as freed
    assert report.bytes_retained is None  # S3 did not say how big they were
    # The objects are gone from a listing, their versions all stay.
    assert "Contents" not in client.list_objects_v2(Bucket=bucket)
    after = client.list_object_versions(Bucket=bucket)
    if status == "Enabled":
        # We never name a version: every version stays, under a delete marker. (On a
        # Suspended bucket moto, unlike S3, deletes the key's versions outright: not
        # asserted there.)
        assert len(after.get("DeleteMarkers", [])) == 2
        assert {v["VersionId"] for v in after["Versions"]} == {v["VersionId"] for v in before}
    # Asked once per bucket per resolver: the cached answer serves the next delete.
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert resolver.retention.retention(resolver.filesystem(_uris(bucket)[0])[0], bucket) is (
        Retention.KEPT
    )


def _deleter_without_versioning_read(moto_iam: MotoIam) -> tuple[str, str]:
    iam = moto_iam.client("iam")
    name = f"deleter-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=name)
    statement = {
        "Effect": "Allow",
        "Action": ["s3:DeleteObject", "s3:PutObject", "s3:GetObject", "s3:ListBucket"],
        "Resource": "*",
    }
    iam.put_user_policy(
        UserName=name,
        PolicyName="delete-only",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
    )
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def test_a_refused_question_is_unknown_never_freed(moto_iam: MotoIam) -> None:
    bucket = moto_iam.new_bucket()
    admin = moto_iam.client()
    admin.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    admin.put_object(Bucket=bucket, Key="t/data/a.parquet", Body=b"x")
    key, secret = _deleter_without_versioning_read(moto_iam)
    options = {
        "endpoint_url": moto_iam.endpoint_url,
        "key": key,
        "secret": secret,
        "client_kwargs": {"region_name": moto_iam.region},
    }
    resolver = StorageResolver(StorageConfig(rules=(StorageRule(f"s3://{bucket}", options),)))
    uri = f"s3://{bucket}/t/data/a.parquet"
    report = bulk_delete(resolver, [uri])
    assert report.deleted == [uri] and report.failed == {}, report.failed
    assert report.retention_unknown == [uri] and report.retained == []
    assert report.bytes_freed == 0


def test_local_files_are_never_versioned(tmp_path: Any) -> None:
    path = tmp_path / "a.parquet"
    path.write_bytes(b"x" * 10)
    report = bulk_delete(StorageResolver(), [str(path)])
    assert report.bytes_freed == 10 and report.retained == [] and report.retention_unknown == []


# -- Azurite -------------------------------------------------------------------------


@pytest.fixture
def soft_delete(azurite: Any) -> Iterator[Any]:
    from azure.storage.blob import RetentionPolicy

    service = azurite.service()
    service.set_service_properties(delete_retention_policy=RetentionPolicy(enabled=True, days=7))
    yield azurite
    service.set_service_properties(delete_retention_policy=RetentionPolicy(enabled=False))


def _azure_delete(azurite: Any) -> Any:
    container = azurite.new_container()
    azurite.put(container, "t/data/a.parquet", b"x")
    uri = f"abfs://{container}/t/data/a.parquet"
    config = StorageConfig(rules=(StorageRule(f"abfs://{container}", azurite.fsspec_options()),))
    return uri, bulk_delete(StorageResolver(config), [uri])


def test_azure_soft_delete_keeps(soft_delete: Any) -> None:
    uri, report = _azure_delete(soft_delete)
    assert report.deleted == [uri] and report.retained == [uri]


def test_azure_without_soft_delete_frees(azurite: Any) -> None:
    uri, report = _azure_delete(azurite)
    assert report.deleted == [uri] and report.retained == [] and report.retention_unknown == []


# -- fake-gcs-server -----------------------------------------------------------------


def test_gcs_unversioned_bucket_frees(fake_gcs: Any) -> None:
    name = fake_gcs.new_bucket()
    fake_gcs.put(name, "t/data/a.parquet", b"x")
    uri = f"gs://{name}/t/data/a.parquet"
    options = {"endpoint_url": fake_gcs.url, "token": "anon", "project": "test"}
    config = StorageConfig(rules=(StorageRule(f"gs://{name}", options),))
    report = bulk_delete(StorageResolver(config), [uri])
    assert report.deleted == [uri]
    # Asked and answered: not unknown (which it would be had the call failed).
    assert report.retained == [] and report.retention_unknown == []
