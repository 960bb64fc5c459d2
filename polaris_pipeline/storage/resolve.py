"""Map a URI to an fsspec filesystem and the path that filesystem expects.

Options come from the :class:`StorageConfig` rule with the longest matching prefix and
are passed as keyword arguments to the filesystem class. Whatever a rule does not set
is left to the filesystem's own defaults: fsspec's config (``FSSPEC_*`` variables and
config files) and, for S3, botocore's credential chain (``AWS_*`` variables, profiles,
instance roles).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.catalog_config import (
    AwsStorage,
    AzureStorage,
    CatalogStorage,
    FileStorage,
    GcsStorage,
    catalog_storage,
)
from polaris_pipeline.storage.config import S3_ENDPOINT_CLIENT, StorageConfig
from polaris_pipeline.storage.credentials.azure import (
    AzureCredentials,
    adlfs_options,
    parse_location,
)
from polaris_pipeline.storage.credentials.gcs import GcsCredentials, gcs_emulator
from polaris_pipeline.storage.credentials.s3 import StsCredentials, s3_options
from polaris_pipeline.storage.named import STORAGE_NAMES_KEY, NamedIdentity
from polaris_pipeline.storage.options import filesystem_class
from polaris_pipeline.storage.redact import maskable, redact
from polaris_pipeline.storage.retention_probe import RetentionProbe
from polaris_pipeline.storage.scope import task_scope
from polaris_pipeline.storage.uri import location_within, split_uri
from polaris_pipeline.tasks.model import TaskRow

if TYPE_CHECKING:
    from pyiceberg.io import InputFile

# How many filesystems with catalog-vended credentials a resolver keeps.
MAX_CATALOG_FILESYSTEMS = 32


class StorageResolver:
    """Filesystems for URIs, built once per (protocol, options) and reused. Cached here, not in
    fsspec's global instance cache, so one resolver owns its clients (and listing caches) for
    its life, across sensor ticks, whatever else the process does with fsspec.
    """

    def __init__(
        self,
        config: StorageConfig | None = None,
        *,
        sts: StsCredentials | None = None,
        azure: AzureCredentials | None = None,
        gcs: GcsCredentials | None = None,
    ) -> None:
        self.config = config if config is not None else StorageConfig()
        # Shared by every task's resolver: vended credentials outlive one task, so
        # the children of one table reuse their parent's.
        self.sts = sts if sts is not None else StsCredentials()
        self.azure = azure if azure is not None else AzureCredentials()
        self.gcs = gcs if gcs is not None else GcsCredentials()
        self._secrets = self.config.secrets()
        self._filesystems: dict[tuple[str, str], AbstractFileSystem] = {}
        self._lock = threading.Lock()
        # Filesystems holding catalog-vended credentials, shared by the tasks whose
        # credentials are the same (a table's children): a new s3fs client costs
        # about a second. Bounded, oldest out, since every table brings its own.
        self._catalog_filesystems: dict[tuple[str, str], AbstractFileSystem] = {}
        self._max_filesystems: int | None = None
        # Whether each bucket keeps deleted objects, asked once for this resolver's life
        # and shared with the resolvers it makes per task.
        self.retention = RetentionProbe()
        # The resolver of the static config alone: this one, or a task resolver's parent.
        self.static: StorageResolver = self

    def for_task(
        self, task: TaskRow, storage_properties: Mapping[str, str] | None = None
    ) -> StorageResolver:
        """The resolver for one task: catalog storage mode when the task carries
        ``storage_configuration_info``, the static config's otherwise.

        ``storage_properties`` replaces the task's internal properties (the catalog lookup for
        tasks Polaris wrote without them, ``execution/task_storage.py``). PayloadError for a
        malformed configuration; StorageError when the location cannot be scoped.
        """
        props = task.internal_properties if storage_properties is None else storage_properties
        storage = catalog_storage(props)
        if storage is None:
            return self.static
        return self.for_storage(storage, task_scope(storage, props))

    def for_storage(self, storage: CatalogStorage, scope: tuple[str, ...]) -> StorageResolver:
        """The resolver reaching ``scope`` with a catalog's ``storage`` configuration, credentials
        for ``scope`` only (a static storage rule still wins); for a task or a leak walk.
        StorageError when the ``storageName`` maps to an identity that cannot sign for it.
        """
        if (
            isinstance(storage, AwsStorage)
            and self.config.catalog_s3_endpoint == S3_ENDPOINT_CLIENT
        ):
            # A sweeper outside Polaris's network reaches S3 where clients do.
            storage = dataclasses.replace(storage, endpoint_internal=None)
        return CatalogStorageResolver(self.static, storage, scope, self._identity(storage))

    def _identity(self, storage: CatalogStorage) -> NamedIdentity | None:
        """Who signs for ``storage``: the identity its ``storageName`` maps to, else None
        (the default chain). Local files need no identity, so their name is ignored."""
        if isinstance(storage, FileStorage):
            return None
        identity = self.config.identity_for(storage.storage_name, storage.storage_type)
        keyed = identity is not None and not identity.default_identity
        if keyed and not isinstance(storage, AwsStorage):
            raise StorageError(
                f"{STORAGE_NAMES_KEY}.{storage.storage_name} holds S3 keys, but the catalog's "
                f"storage is {storage.storage_type}: map that storageName with "
                "default_identity: true"
            )
        return identity

    def _options(self, uri: str, protocol: str) -> dict[str, Any]:
        return self.config.options_for(uri)

    # -- resolution -----------------------------------------------------------------

    def filesystem(self, uri: str) -> tuple[AbstractFileSystem, str]:
        """The filesystem serving ``uri`` and ``uri`` as a path of that filesystem.

        Local paths come back as absolute paths, S3 URIs as ``bucket/key``, others as
        their implementation's ``_strip_protocol`` gives them.
        """
        scheme, rest = split_uri(uri)
        if not scheme:
            raise StorageError(f"not a URI or absolute path: {self.redact(uri)!r}")
        if scheme == "file":
            if not rest.startswith("/"):
                raise StorageError(f"not a local absolute path: {self.redact(uri)!r}")
            return self._get("file", LocalFileSystem, uri), rest
        if scheme == "s3":
            bucket = rest.split("/", 1)[0]
            if not bucket:
                raise StorageError(f"no bucket in {self.redact(uri)!r}")
            return self._get("s3", filesystem_class("s3"), uri), rest
        cls = self._filesystem_class(scheme)
        # It strips only its own schemes: hand it the one the URI is read as (wasbs: abfs).
        return self._get(scheme, cls, uri), cls._strip_protocol(f"{scheme}://{rest}")

    def _filesystem_class(self, scheme: str) -> type[AbstractFileSystem]:
        return filesystem_class(scheme)

    def _get(self, protocol: str, cls: type[AbstractFileSystem], uri: str) -> AbstractFileSystem:
        options = self._options(uri, protocol)
        key = (protocol, json.dumps(options, sort_keys=True, default=repr))
        with self._lock:
            fs = self._filesystems.pop(key, None)
            if fs is not None:
                self._filesystems[key] = fs  # most recently used last
            else:
                try:
                    # skip_instance_cache: this resolver's cache is the one that counts;
                    # sharing fsspec's would let unrelated code mutate our instance.
                    fs = cls(**options, skip_instance_cache=True)
                except Exception as e:
                    raise StorageError(
                        f"cannot create {protocol} filesystem: {self.describe(e)}"
                    ) from None
                self._filesystems[key] = fs
                if self._max_filesystems and len(self._filesystems) > self._max_filesystems:
                    del self._filesystems[next(iter(self._filesystems))]
            return fs

    # -- operations -----------------------------------------------------------------

    def input_file(self, uri: str) -> InputFile:
        """A pyiceberg ``InputFile`` reading ``uri`` through this resolver."""
        # pyiceberg costs a run about a second to import: only runs that read
        # metadata or manifests pay it, not one deleting a BATCH task's files.
        from polaris_pipeline.storage.input_file import ResolvedInputFile

        fs, path = self.filesystem(uri)
        return ResolvedInputFile(uri, fs, path, self)

    def _info(self, uri: str) -> dict[str, Any] | None:
        """``fs.info`` of ``uri``, None when it does not exist; any other error raises
        StorageError. fsspec's own ``exists`` answers False on *any* error (an expired
        credential, a 403), which a cleanup would read as "already deleted"."""
        fs, path = self.filesystem(uri)
        try:
            info: dict[str, Any] = fs.info(path)
        except FileNotFoundError:
            return None
        except Exception as e:
            raise StorageError(f"cannot stat {self.redact(uri)}: {self.describe(e)}") from None
        return info

    def size(self, uri: str) -> int | None:
        """Size in bytes; None when the file does not exist or has no size (a directory)."""
        info = self._info(uri)
        if info is None or info.get("type") == "directory":
            return None
        size = info.get("size", info.get("Size"))
        return int(size) if size is not None else None

    def exists(self, uri: str) -> bool:
        """Whether ``uri`` exists (see ``_info`` for errors)."""
        return self._info(uri) is not None

    # -- error text -----------------------------------------------------------------

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def describe(self, exc: BaseException) -> str:
        """One line naming the error's type and message, with credentials masked."""
        message = str(exc).strip().replace("\n", " ")
        name = type(exc).__name__
        return self.redact(f"{name}: {message}" if message else name)


class CatalogStorageResolver(StorageResolver):
    """One task's filesystems, reached with credentials from the catalog's storage config.

    A URI under a static storage rule still goes through that rule (the explicit override);
    any other is reached as Polaris reaches it, with credentials scoped to ``scope``, cached
    here (not in the parent) so they go away with the task.
    """

    def __init__(
        self,
        parent: StorageResolver,
        storage: CatalogStorage,
        scope: tuple[str, ...],
        identity: NamedIdentity | None = None,
    ) -> None:
        super().__init__(parent.config, sts=parent.sts, azure=parent.azure, gcs=parent.gcs)
        self._filesystems = parent._catalog_filesystems
        self._lock = parent._lock
        self._max_filesystems = MAX_CATALOG_FILESYSTEMS
        self.retention = parent.retention
        self.static = parent
        self.storage = storage
        self.scope = scope
        # The credentials the catalog's storageName maps to; None: the default chain.
        self.identity = identity
        self._session_secrets: list[str] = []

    def filesystem(self, uri: str) -> tuple[AbstractFileSystem, str]:
        if self.config.rule_for(uri) is not None:
            return self.static.filesystem(uri)
        return super().filesystem(uri)

    def _options(self, uri: str, protocol: str) -> dict[str, Any]:
        storage = self.storage
        if isinstance(storage, FileStorage) and protocol == "file":
            return {}
        if isinstance(storage, AwsStorage) and protocol == "s3":
            session = self.sts.get(storage, self.scope, self.identity)
            if session is not None:
                self._session_secrets = session.secrets()
            return s3_options(storage, session, self.identity)
        if isinstance(storage, AzureStorage) and protocol == "abfs":
            root = parse_location(self._scope_root(uri))
            sas = self.azure.sas_for(storage, root)
            self._session_secrets = [sas.token]
            return adlfs_options(root.account, sas)
        if isinstance(storage, GcsStorage) and protocol == "gs":
            return self.gcs.gcsfs_options(storage, self.scope)
        raise StorageError(
            f"{self.redact(uri)!r} is not {storage.storage_type} storage, which the "
            "catalog's storage configuration describes"
        )

    def _filesystem_class(self, scheme: str) -> type[AbstractFileSystem]:
        if scheme == "gs" and isinstance(self.storage, GcsStorage) and gcs_emulator():
            # gcsfs's default class asks GCS's gRPC control plane for each bucket's
            # layout, which no emulator serves (a 60 s timeout, again and again).
            from gcsfs.core import GCSFileSystem

            cls: type[AbstractFileSystem] = GCSFileSystem
            return cls
        return filesystem_class(scheme)

    def _scope_root(self, uri: str) -> str:
        """The scope location holding ``uri``: credentials are made for that one."""
        for root in self.scope:
            if location_within(uri, root):
                return root
        raise StorageError(
            f"{self.redact(uri)!r} is outside the locations this task's credentials "
            f"cover ({', '.join(self.scope)})"
        )

    def redact(self, text: str) -> str:
        external_id = getattr(self.storage, "external_id", None) or ""
        return redact(text, [*self._secrets, *self._session_secrets, *maskable([external_id])])
