"""S3 credentials scoped to one task's locations, the way Polaris vends them.

The sweeper's own AWS identity (botocore's default chain) calls STS AssumeRole on the
catalog's ``roleARN`` with its ``externalId`` and an inline session policy allowing read,
list and delete only under the task's locations: a second fence behind the path guard,
so even a guard bug cannot delete outside the table. Cached per (role, external id, STS
endpoint, region, location set).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.catalog_config import AwsStorage
from polaris_pipeline.storage.credentials.cache import DEFAULT_REFRESH_MARGIN_S, RefreshingCache
from polaris_pipeline.storage.named import NamedIdentity
from polaris_pipeline.storage.redact import MASK, maskable, redact
from polaris_pipeline.storage.uri import bucket_and_path

if TYPE_CHECKING:
    import botocore.session

SESSION_NAME = "polaris-pipeline"
DURATION_S = 3600


@dataclass(frozen=True, repr=False)
class AwsSession:
    """Temporary credentials from AssumeRole; ``expires_at`` in epoch seconds."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: float

    def secrets(self) -> list[str]:
        return [self.access_key_id, self.secret_access_key, self.session_token]

    def __repr__(self) -> str:
        return f"AwsSession(access_key_id={MASK!r}, expires_at={self.expires_at!r})"


def _escape_glob(value: str) -> str:
    """IAM policy variables make ``*``, ``?`` and ``$`` in a key literal (as Polaris does)."""
    return "".join({"*": "${*}", "?": "${?}", "$": "${$}"}.get(c, c) for c in value)


def _under(prefix: str) -> str:
    # Polaris's concatFilePrefixes(prefix, "*", "/"): a trailing "/*" so that a
    # sibling sharing the name as a string prefix ("t" vs "t2") is not covered.
    return f"{prefix}/*" if prefix else "*"


def session_policy(storage: AwsStorage, locations: Sequence[str]) -> dict[str, Any]:
    """The inline session policy for ``locations``: the shape Polaris builds, minus writes.

    Objects: GetObject/GetObjectVersion and DeleteObject under each location.
    Buckets: ListBucket with an ``s3:prefix`` condition per location, and
    GetBucketLocation and GetBucketVersioning (which Polaris does not grant: it is
    how a purge learns whether its deletes free anything). KMS: Decrypt/DescribeKey
    on the keys the catalog names, so SSE-KMS objects (manifests) can be read;
    nothing is written, so no key is granted for encryption.
    """
    arn = f"arn:{storage.partition}:s3:::"
    objects: list[str] = []
    list_prefixes: dict[str, list[str]] = {}
    for location in locations:
        bucket, key = bucket_and_path(location, "s3", "S3")
        objects.append(arn + _under(_escape_glob(f"{bucket}/{key}" if key else bucket)))
        list_prefixes.setdefault(bucket, []).append(_under(_escape_glob(key)))
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": ["s3:DeleteObject"], "Resource": objects},
    ]
    kms_keys = [k for k in (storage.current_kms_key, *storage.allowed_kms_keys) if k]
    if kms_keys and not storage.kms_unavailable:
        statements.append(
            {"Effect": "Allow", "Action": ["kms:DescribeKey", "kms:Decrypt"], "Resource": kms_keys}
        )
    for bucket, prefixes in list_prefixes.items():
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [arn + bucket],
                "Condition": {"StringLike": {"s3:prefix": prefixes}},
            }
        )
    for bucket in list_prefixes:
        statements.append(
            {
                "Effect": "Allow",
                # GetBucketVersioning: whether a delete frees the bytes or the bucket
                # keeps them (storage/retention_probe.py); read-only, bucket-level.
                "Action": ["s3:GetBucketLocation", "s3:GetBucketVersioning"],
                "Resource": [arn + bucket],
            }
        )
    statements.append(
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"], "Resource": objects}
    )
    return {"Version": "2012-10-17", "Statement": statements}


# (identity name, role, external id, STS endpoint, region, locations)
_CacheKey = tuple[str, str, str, str, str, tuple[str, ...]]


class StsCredentials:
    """AssumeRole results per (role, external id, endpoint, region, locations), refreshed early.
    ``session``: the botocore session whose default chain is the sweeper's identity.
    """

    def __init__(
        self,
        *,
        session: botocore.session.Session | None = None,
        refresh_margin_s: float = DEFAULT_REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._session = session
        self._clock = clock
        self._cache: RefreshingCache[_CacheKey, AwsSession] = RefreshingCache(
            lambda s: s.expires_at, refresh_margin_s=refresh_margin_s, clock=clock
        )
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._clients_lock = threading.Lock()

    def get(
        self,
        storage: AwsStorage,
        locations: Sequence[str],
        identity: NamedIdentity | None = None,
    ) -> AwsSession | None:
        """Credentials for ``locations``, asked for by ``identity`` (the catalog's
        ``storageName`` mapped; None: the default chain). None when the catalog says
        STS is unavailable (then that identity reaches the bucket, as Polaris's does)."""
        if storage.sts_unavailable:
            return None
        if not storage.role_arn:
            raise StorageError("the catalog's S3 storage configuration names no roleARN")
        key: _CacheKey = (
            _identity_name(identity),
            storage.role_arn,
            storage.external_id or "",
            storage.sts_url or "",
            storage.region or "",
            tuple(sorted(set(locations))),
        )
        return self._cache.get(key, lambda: self._assume(storage, key[5], identity))

    def _client(self, storage: AwsStorage, identity: NamedIdentity | None) -> Any:
        region = storage.region or "us-east-1"
        client_key = (_identity_name(identity), storage.sts_url or "", region)
        with self._clients_lock:
            client = self._clients.get(client_key)
            if client is None:
                # botocore is imported only when a task needs STS: every run imports
                # this module, few assume a role.
                import botocore.session
                from botocore.config import Config

                session = self._session or botocore.session.Session()
                client = session.create_client(
                    "sts",
                    region_name=region,
                    endpoint_url=storage.sts_url,
                    config=Config(retries={"max_attempts": 3, "mode": "standard"}),
                    **_client_credentials(identity),
                )
                self._clients[client_key] = client
            return client

    def _assume(
        self, storage: AwsStorage, locations: tuple[str, ...], identity: NamedIdentity | None
    ) -> AwsSession:
        request: dict[str, Any] = {
            "RoleArn": storage.role_arn,
            "RoleSessionName": SESSION_NAME,
            "Policy": json.dumps(session_policy(storage, locations), separators=(",", ":")),
            "DurationSeconds": DURATION_S,
        }
        if storage.external_id:
            request["ExternalId"] = storage.external_id
        hidden = maskable([storage.external_id or ""])
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._client(storage, identity).assume_role(**request)
        except (ClientError, BotoCoreError) as e:
            if isinstance(e, ClientError):
                error = e.response.get("Error", {})
                why = f"{error.get('Code', 'error')}: {error.get('Message', '')}"
            else:
                # No credentials, no endpoint, a timeout: botocore's text names no secret,
                # but it is masked all the same.
                why = f"{type(e).__name__}: {e}"
            failed = f"STS AssumeRole on {storage.role_arn} failed: {why}"
            raise StorageError(redact(failed.rstrip(": "), hidden)) from None
        creds = response["Credentials"]
        expiration = creds.get("Expiration")
        expires_at = (
            expiration.timestamp()
            if hasattr(expiration, "timestamp")
            else self._clock() + DURATION_S
        )
        return AwsSession(
            creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"], expires_at
        )


def _identity_name(identity: NamedIdentity | None) -> str:
    # "" is the default chain; a mapped name is never empty.
    return identity.name if identity is not None else ""


def _client_credentials(identity: NamedIdentity | None) -> dict[str, Any]:
    """botocore ``create_client`` keywords signing as ``identity``; none: the default chain."""
    if identity is None or identity.default_identity:
        return {}
    return {
        "aws_access_key_id": identity.key,
        "aws_secret_access_key": identity.secret,
        "aws_session_token": identity.token,
    }


def s3_options(
    storage: AwsStorage, session: AwsSession | None, identity: NamedIdentity | None = None
) -> dict[str, Any]:
    """s3fs keyword arguments for the catalog's endpoint, region and addressing style. With no
    session (STS unavailable) the named identity's keys sign, else botocore's default chain.
    """
    options: dict[str, Any] = {}
    if session is not None:
        options.update(
            key=session.access_key_id,
            secret=session.secret_access_key,
            token=session.session_token,
        )
    elif identity is not None and not identity.default_identity:
        options.update(key=identity.key, secret=identity.secret)
        if identity.token:
            options["token"] = identity.token
    if storage.s3_endpoint:
        options["endpoint_url"] = storage.s3_endpoint
    if storage.region:
        options["client_kwargs"] = {"region_name": storage.region}
    if storage.path_style_access:
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return options
