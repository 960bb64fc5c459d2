"""One emulated cloud store holding a pyiceberg table, as a task's catalog storage reaches it.

- ``Cloud``: the table, its objects (list, write, delete by URI) and the
  ``storage_configuration_info`` Polaris would copy onto its drop task.
- ``open_cloud(kind, request, tmp_path, monkeypatch)``: ``azure`` (Azurite, the
  connection string in the environment), ``gcs`` (fake-gcs-server, its host in the
  environment) or ``s3`` (moto with IAM enforced, reached by assuming the ``purger``
  role; the sweeper's base user in the environment). The module using it imports the
  ``azurite`` / ``fake_gcs`` / ``moto_iam`` fixtures it parametrizes over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.table import Table

from tests.support.azurite import Azurite
from tests.support.catalog_storage import (
    aws_storage_info,
    azure_storage_info,
    azurite_table,
    fake_gcs_table,
    gcs_storage_info,
    iam_s3_table,
)
from tests.support.gcs import EMULATOR_ENV, FakeGcs
from tests.support.s3 import MotoIam


@dataclass(frozen=True)
class Cloud:
    """One emulated store: its table, its object names, a way to write and remove one."""

    table: Table
    names: Callable[[], set[str]]
    put: Callable[[str, bytes], None]
    remove: Callable[[str], None]  # by object name
    storage_info: str
    prefix: str  # the table's object names start with this (no trailing /)
    root: str  # a URI is this followed by its object name

    def object_name(self, uri: str) -> str:
        assert uri.startswith(self.root), (uri, self.root)
        return uri[len(self.root) :]

    def delete(self, uri: str) -> None:
        self.remove(self.object_name(uri))


def open_cloud(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Cloud:
    """A fresh container or bucket of ``kind`` holding table ``ns.t`` (one append)."""
    if kind == "azure":
        emu: Azurite = request.getfixturevalue("azurite")
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", emu.connection_string)
        container = emu.new_container()
        table = azurite_table(emu, tmp_path, container, "t")
        root = table.location().split(".core.windows.net/", 1)[0] + ".core.windows.net/"
        return Cloud(
            table,
            lambda: emu.names(container),
            lambda name, data: emu.put(container, name, data),
            lambda name: emu.service().get_blob_client(container, name).delete_blob(),
            azure_storage_info(container),
            table.location()[len(root) :].rstrip("/"),
            root,
        )
    if kind == "gcs":
        gcs: FakeGcs = request.getfixturevalue("fake_gcs")
        monkeypatch.setenv(EMULATOR_ENV, gcs.url)
        bucket = gcs.new_bucket()
        table = fake_gcs_table(gcs, tmp_path, bucket, "t")
        root = f"gs://{bucket}/"
        return Cloud(
            table,
            lambda: gcs.names(bucket),
            lambda name, data: gcs.put(bucket, name, data),
            lambda name: gcs.fs().rm(f"{bucket}/{name}"),
            gcs_storage_info(bucket),
            table.location()[len(root) :].rstrip("/"),
            root,
        )
    if kind == "s3":
        iam: MotoIam = request.getfixturevalue("moto_iam")
        request.getfixturevalue("sweeper_identity")
        bucket = iam.new_bucket()
        table = iam_s3_table(iam, tmp_path, bucket, "t")
        root = f"s3://{bucket}/"
        admin = iam.client()
        return Cloud(
            table,
            lambda: iam.keys(bucket),
            lambda name, data: admin.put_object(Bucket=bucket, Key=name, Body=data),
            lambda name: admin.delete_object(Bucket=bucket, Key=name),
            aws_storage_info(iam, bucket, "purger"),
            table.location()[len(root) :].rstrip("/"),
            root,
        )
    raise ValueError(f"unknown cloud {kind!r}")
