"""Azure credentials for a task's location: a SAS limited to the table, as Polaris vends.

Signed by a configured account key (``AZURE_STORAGE_CONNECTION_STRING``, whose
``AccountName`` must be the location's and whose ``BlobEndpoint`` is honoured, or
``AZURE_STORAGE_ACCOUNT_NAME`` + ``_KEY``: a service SAS), else ``DefaultAzureCredential``
(a user delegation SAS, as Polaris's ``AzureCredentialsStorageIntegration``). With a
hierarchical namespace it is a directory SAS on the table; otherwise Azure has nothing
narrower than the container and the path guard is the only fence inside it
(docs/operator-guide.md). Read, list and delete only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.catalog_config import AzureStorage
from polaris_pipeline.storage.credentials.cache import (
    DEFAULT_REFRESH_MARGIN_S,
    RefreshingCache,
    made_or_explained,
)
from polaris_pipeline.storage.uri import azure_parts, split_uri

SAS_LIFETIME_S = 3600
# Hosts the location names: ``<account>.dfs.<suffix>`` (ADLS) or ``<account>.blob.<suffix>``.
_SERVICES = ("dfs", "blob")


@dataclass(frozen=True)
class AzureLocation:
    """``abfs[s]://container@account.dfs.core.windows.net/path`` (or ``wasb[s]://`` on
    ``account.blob.core.windows.net``: the same blobs) taken apart."""

    container: str
    account: str
    suffix: str  # "core.windows.net"
    path: str  # no leading or trailing slash

    @property
    def blob_endpoint(self) -> str:
        return f"https://{self.account}.blob.{self.suffix}"


def parse_location(uri: str) -> AzureLocation:
    """``uri`` taken apart for a SAS; StorageError unless it is on a dfs or blob endpoint."""
    scheme, rest = split_uri(uri)
    if scheme != "abfs":  # abfs[s]:// and wasb[s]:// are all read as abfs
        raise StorageError(f"not an Azure location: {uri!r}")
    authority, _, path = rest.partition("/")
    try:
        container, account, endpoint = azure_parts(authority)
    except ValueError:
        raise StorageError(f"Azure location {uri!r} is not container@account.host/path") from None
    service, _, suffix = endpoint.partition(".")
    if service not in _SERVICES or not suffix:
        host = f"{account}.{endpoint}"
        raise StorageError(f"Azure location {uri!r}: host {host!r} is not account.dfs|blob.suffix")
    return AzureLocation(container, account, suffix, path.strip("/"))


def _connection_string_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in text.split(";"):
        name, eq, value = part.partition("=")
        if eq:
            fields[name.strip()] = value.strip()
    return fields


@dataclass(frozen=True)
class AccountKey:
    """A configured key for one account, and where its blob service answers."""

    account: str
    key: str
    blob_endpoint: str | None


def configured_key(account: str) -> AccountKey | None:
    """The key the environment configures for ``account``, if any."""
    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
    if conn:
        fields = _connection_string_fields(conn)
        if fields.get("AccountName") == account and fields.get("AccountKey"):
            return AccountKey(account, fields["AccountKey"], fields.get("BlobEndpoint"))
    if os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") == account:
        key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY", "")
        if key:
            return AccountKey(account, key, None)
    return None


@dataclass(frozen=True, repr=False)
class AzureSas:
    token: str
    blob_endpoint: str
    expires_at: float

    def __repr__(self) -> str:
        return f"AzureSas(blob_endpoint={self.blob_endpoint!r}, expires_at={self.expires_at!r})"


class AzureCredentials:
    """SAS tokens per (account, container, directory), made again before they expire."""

    def __init__(
        self,
        *,
        refresh_margin_s: float = DEFAULT_REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.time,
        credential: Any = None,
    ) -> None:
        self._credential = credential  # DefaultAzureCredential unless given
        self._cache: RefreshingCache[tuple[str, str, str, bool], AzureSas] = RefreshingCache(
            lambda sas: sas.expires_at, refresh_margin_s=refresh_margin_s, clock=clock
        )

    def sas_for(self, storage: AzureStorage, root: AzureLocation) -> AzureSas:
        directory = root.path if storage.hierarchical else ""
        key = (root.account, root.container, directory, storage.hierarchical)
        what = f"cannot get a SAS for {root.container}@{root.account}"
        return self._cache.get(
            key, lambda: made_or_explained(lambda: self._make(root, directory), what)
        )

    def _make(self, root: AzureLocation, directory: str) -> AzureSas:
        from azure.storage.blob import (
            BlobServiceClient,
            ContainerSasPermissions,
            generate_container_sas,
        )

        now = datetime.now(UTC)
        start, expiry = now - timedelta(minutes=5), now + timedelta(seconds=SAS_LIFETIME_S)
        account_key = configured_key(root.account)
        endpoint = (account_key.blob_endpoint if account_key else None) or root.blob_endpoint
        signer: dict[str, Any]
        if account_key is not None:
            signer = {"account_key": account_key.key}
        else:
            credential = self._credential
            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = self._credential = DefaultAzureCredential()
            service = BlobServiceClient(endpoint, credential=credential)
            signer = {"user_delegation_key": service.get_user_delegation_key(start, expiry)}
        if directory:
            token = _directory_sas(root, directory, signer, start, expiry)
        else:
            token = generate_container_sas(
                root.account,
                root.container,
                permission=ContainerSasPermissions(read=True, list=True, delete=True),
                start=start,
                expiry=expiry,
                **signer,
            )
        return AzureSas(token, endpoint, expiry.timestamp())


def _directory_sas(
    root: AzureLocation, directory: str, signer: dict[str, Any], start: datetime, expiry: datetime
) -> str:
    try:
        from azure.storage.filedatalake import FileSasPermissions, generate_directory_sas
    except ImportError:
        raise StorageError(
            "the catalog's Azure storage is hierarchical: a directory SAS needs "
            "azure-storage-file-datalake (pip install azure-storage-file-datalake)"
        ) from None
    token: str = generate_directory_sas(
        root.account,
        root.container,
        directory,
        signer.get("account_key") or signer["user_delegation_key"],
        permission=FileSasPermissions(read=True, delete=True),
        start=start,
        expiry=expiry,
    )
    return token


def adlfs_options(account: str, sas: AzureSas) -> dict[str, Any]:
    """adlfs keyword arguments: the SAS inside a connection string, so that the
    blob endpoint (Azurite's, a sovereign cloud's) travels with it."""
    return {
        "account_name": account,
        "connection_string": (
            f"BlobEndpoint={sas.blob_endpoint};SharedAccessSignature={sas.token}"
        ),
    }
