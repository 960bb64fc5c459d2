"""What the catalog-storage-mode tests of every cloud check the same way.

- ``catalog_sweep(store)``: one sweep with no storage config (catalog mode only).
- ``guard_reasons(root, inside, sibling, other, dotdot)``: the guard's verdicts,
  with the cloud-independent ones asserted; the caller checks ``other``'s.
- ``sweep_batch_error(store, root, paths, storage_info)``: a batch task naming
  ``paths`` under ``root``, swept; the error it recorded.
- ``polaris_catalog(store, storage_info)``: the catalog row a task without its own
  storage configuration is reached by; ``pre_1_7_view_task(metadata, location)``:
  a view cleanup task as Polaris 1.0-1.6 write it (no internal properties).
- Per cloud, a pyiceberg table written by the test's own admin credentials, and
  the ``storage_configuration_info`` Polaris would copy onto its tasks:
  ``iam_s3_table``/``aws_storage_info`` (moto with IAM), ``azurite_table``/
  ``azure_storage_info``, ``fake_gcs_table``/``gcs_storage_info``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyiceberg.table import Table

from builders import tables as built_tables
from builders.tables import S3Options
from builders.tasks import batch_task, insert_row
from polaris_pipeline.cleanup.guard.paths import PathGuard
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import CATALOG_TYPE_CODE, NewTask, Prop
from tests.support.azurite import ACCOUNT, Azurite
from tests.support.gcs import FakeGcs
from tests.support.iceberg import recorded_drop_task
from tests.support.s3 import MotoIam

# The catalogId ``testing.tasks.dropped_entity`` records on every dropped entity.
CATALOG_ID = 1


def catalog_sweep(store: Metastore) -> Any:
    with Runner(store, resolver=StorageResolver()) as runner:
        return sweep_tasks(runner)


def guard_reasons(root: str, inside: str, sibling: str, other: str, dotdot: str) -> dict[str, str]:
    """Only ``inside`` is admitted; the sibling sharing the root's name as a string
    prefix, the ``..`` path and the root itself are refused for the usual reasons."""
    admitted, refused = PathGuard([root]).split([inside, sibling, other, dotdot, root])
    assert admitted == [inside]
    reasons = {r.path: r.reason for r in refused}
    assert "outside the table location" in reasons[sibling]
    assert reasons[dotdot] == "'..' segment"
    assert reasons[root] == "is a table location itself"
    assert other in reasons
    return reasons


def sweep_batch_error(store: Metastore, root: str, paths: list[str], storage_info: str) -> str:
    """End to end: the error a batch task naming ``paths`` records (it must record one)."""
    task = batch_task(
        "POLARIS",
        paths,
        internal={"storageLocation": root, STORAGE_CONFIG_KEY: storage_info},
    )
    store.insert_tasks([task])
    catalog_sweep(store)
    row = store.get_task("POLARIS", task.id)
    assert row is not None and Prop.ERROR in row.properties
    return row.properties[Prop.ERROR]


def polaris_catalog(
    store: Metastore, storage_info: str, *, realm_id: str = "POLARIS", catalog_id: int = CATALOG_ID
) -> None:
    """The catalog's row as Polaris keeps it: type CATALOG, its storage configuration
    in its internal properties."""
    insert_row(
        store,
        {
            "realm_id": realm_id,
            "catalog_id": 0,
            "id": catalog_id,
            "parent_id": 0,
            "name": f"catalog_{catalog_id}",
            "entity_version": 1,
            "type_code": CATALOG_TYPE_CODE,
            "sub_type_code": 0,
            "create_timestamp": 1,
            "drop_timestamp": 0,
            "purge_timestamp": 0,
            "to_purge_timestamp": 0,
            "last_update_timestamp": 1,
            "properties": {},
            "internal_properties": {STORAGE_CONFIG_KEY: storage_info},
            "grant_records_version": 1,
        },
    )


def pre_1_7_view_task(metadata_uri: str, location: str | None) -> NewTask:
    """A view's cleanup task as Polaris 1.0-1.6 write it: no internal properties at all;
    only the dropped entity records its ``location`` (when given) and metadata file."""
    recorded = {"location": location} if location is not None else None
    return recorded_drop_task(metadata_uri, name="v", is_view=True, entity_properties=recorded)


# -- S3 on moto with IAM enforced --------------------------------------------------------


def iam_s3_table(moto_iam: MotoIam, tmp_path: Path, bucket: str, name: str) -> Table:
    s3 = S3Options(
        endpoint=moto_iam.endpoint_url,
        access_key=moto_iam.admin.key,
        secret_key=moto_iam.admin.secret,
        region=moto_iam.region,
    )
    catalog = built_tables.open_catalog(
        f"s3://{bucket}/wh", tmp_path / f"{name}.db", name=name, s3=s3
    )
    return built_tables.build_table(catalog, ("ns", name), appends=1)


def aws_storage_info(moto_iam: MotoIam, bucket: str, role: str, **extra: Any) -> str:
    """The catalog's S3 config: assume ``role`` (external id ``ext-<role>``) at moto."""
    return json.dumps(
        {
            "@type": "AwsStorageConfigurationInfo",
            "storageType": "S3",
            "allowedLocations": [f"s3://{bucket}/wh"],
            "roleARN": moto_iam.role_arn(role),
            "externalId": f"ext-{role}",
            "region": moto_iam.region,
            "endpoint": moto_iam.endpoint_url,
            "pathStyleAccess": True,
            **extra,
        }
    )


# -- Azure on Azurite --------------------------------------------------------------------


def azure_location(container: str, path: str = "wh") -> str:
    return f"abfs://{container}@{ACCOUNT}.dfs.core.windows.net/{path}"


def azurite_table(azurite: Azurite, tmp_path: Path, container: str, name: str) -> Table:
    catalog = built_tables.open_catalog(
        azure_location(container),
        tmp_path / f"{name}.db",
        name=name,
        properties={
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "adls.connection-string": azurite.connection_string,
            "adls.account-name": ACCOUNT,
        },
    )
    return built_tables.build_table(catalog, ("ns", name), appends=1)


def azure_storage_info(container: str, allowed: str | None = None) -> str:
    return json.dumps(
        {
            "@type": "AzureStorageConfigurationInfo",
            "storageType": "AZURE",
            "allowedLocations": [allowed or azure_location(container)],
            "tenantId": "00000000-0000-0000-0000-000000000000",
        }
    )


# -- GCS on fake-gcs-server --------------------------------------------------------------


def fake_gcs_table(gcs: FakeGcs, tmp_path: Path, bucket: str, name: str) -> Table:
    catalog = built_tables.open_catalog(
        f"gs://{bucket}/wh",
        tmp_path / f"{name}.db",
        name=name,
        properties={
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "gcs.service.host": gcs.url,
            "gcs.oauth2.token": "anon",
            "gcs.project-id": "test",
        },
    )
    return built_tables.build_table(catalog, ("ns", name), appends=1)


def gcs_storage_info(bucket: str) -> str:
    return json.dumps(
        {
            "@type": "GcpStorageConfigurationInfo",
            "storageType": "GCS",
            "allowedLocations": [f"gs://{bucket}/wh"],
            "gcpServiceAccount": "purger@project.iam.gserviceaccount.com",
        }
    )
