"""Whether a bucket or container keeps what is deleted from it, asked once per bucket.

A store that keeps deleted objects (S3 versioning Enabled or Suspended, Azure blob soft
delete, GCS versioning or soft-delete policy) frees nothing on delete, so reporting those
bytes as freed would be false: ``bulk_delete`` asks here before the first delete in each
bucket. The store is asked, never guessed; a refused answer is ``UNKNOWN``, never
reported as freed. Local files are never versioned.

- S3: ``GetBucketVersioning`` (needs ``s3:GetBucketVersioning``; a prefix-scoped session
  policy may lack it).
- Azure: ``get_service_properties``' ``delete_retention_policy``, an account-level call a
  container or directory SAS cannot make. Blob versioning is management-plane only: an
  account with versioning but no soft delete reads as not keeping.
- GCS: ``buckets.get``'s ``versioning.enabled`` and ``softDeletePolicy``.
"""

from __future__ import annotations

import threading
from enum import Enum
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from polaris_pipeline.storage.options import is_s3


class Retention(Enum):
    """What a store does with the bytes of an object deleted from it."""

    FREED = "freed"  # the bytes go with the object
    KEPT = "kept"  # versioning or soft delete keeps them until the store expires them
    UNKNOWN = "unknown"  # the store would not say (permission, unsupported call)


class RetentionProbe:
    """Each bucket's answer, asked at most once for the probe's life: shared by a resolver and
    the per-task resolvers it makes, so a run asks each bucket once.
    """

    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], Retention] = {}
        self._lock = threading.Lock()

    def retention(self, fs: AbstractFileSystem, bucket: str) -> Retention:
        """Whether ``bucket`` (S3 bucket, Azure container, GCS bucket) on ``fs`` keeps
        deleted objects."""
        if isinstance(fs, LocalFileSystem | MemoryFileSystem):
            return Retention.FREED  # no versions on a local disk or in memory
        key = (type(fs).__name__, bucket)
        with self._lock:
            known = self._answers.get(key)
        if known is not None:
            return known
        answer = ask_store(fs, bucket)
        with self._lock:
            self._answers.setdefault(key, answer)
            return self._answers[key]


def ask_store(fs: AbstractFileSystem, bucket: str) -> Retention:
    """The store's own answer for ``bucket``; UNKNOWN when it refuses to give one."""
    try:
        if is_s3(fs):
            return _s3(fs, bucket)
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        if {"abfs", "az", "abfss"} & set(protocols):
            return _azure(fs)
        if {"gs", "gcs"} & set(protocols):
            return _gcs(fs, bucket)
    except Exception:
        # Any refusal (AccessDenied, AuthorizationFailure, 403, not implemented) leaves
        # the question open: the bytes are reported as unknown, never as freed.
        return Retention.UNKNOWN
    return Retention.UNKNOWN  # a store we cannot ask


def _s3(fs: Any, bucket: str) -> Retention:
    answer = fs.call_s3("get_bucket_versioning", Bucket=bucket)
    # Suspended keeps the versions written while versioning was on, and a delete
    # of such a key still leaves them: kept too.
    return Retention.KEPT if answer.get("Status") in ("Enabled", "Suspended") else Retention.FREED


def _azure(fs: Any) -> Retention:
    from fsspec.asyn import sync

    props = sync(fs.loop, fs.service_client.get_service_properties)
    policy = props.get("delete_retention_policy")
    return Retention.KEPT if policy is not None and policy.enabled else Retention.FREED


def _gcs(fs: Any, bucket: str) -> Retention:
    meta = fs.call("GET", "b/{}", bucket, json_out=True)
    versioned = bool((meta.get("versioning") or {}).get("enabled"))
    soft = int((meta.get("softDeletePolicy") or {}).get("retentionDurationSeconds") or 0) > 0
    return Retention.KEPT if versioned or soft else Retention.FREED
