"""S3 fixtures: a real moto HTTP server, fresh buckets, and a StorageConfig for them.

s3fs is never mocked: it talks HTTP to moto's server, so request shapes, XML
parsing and error handling are the real ones.

- ``moto_server`` (session): the running server, as a :class:`MotoS3`.
- ``s3_bucket`` (function): the name of a new, empty, uniquely named bucket.
- ``s3_storage_config`` (function): a callable ``(bucket, allowed_prefixes=())``
  returning a StorageConfig that points ``s3://<bucket>`` at the server.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from polaris_pipeline.storage.config import StorageConfig, StorageRule


@dataclass(frozen=True)
class MotoS3:
    """Where the moto server listens, and the (fake) credentials to use with it."""

    endpoint_url: str
    key: str = "pp-test-access-key"
    secret: str = "pp-test-secret-key"
    region: str = "us-east-1"

    def client(self) -> Any:
        """A boto3 S3 client for arranging and inspecting test state."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name=self.region,
        )

    def storage_options(self) -> dict[str, Any]:
        """s3fs keyword arguments for this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"region_name": self.region},
        }

    def storage_config(self, bucket: str, allowed_prefixes: Sequence[str] = ()) -> StorageConfig:
        return StorageConfig(
            rules=(StorageRule(f"s3://{bucket}", self.storage_options()),),
            allowed_prefixes=tuple(allowed_prefixes),
        )


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoS3]:
    """moto's S3 over HTTP on a free port of 127.0.0.1, for the whole session."""
    # werkzeug logs every request at INFO; thousands of lines drown test output.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield MotoS3(endpoint_url=f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(moto_server: MotoS3) -> str:
    """A new bucket for this test only (the server is shared by the session)."""
    name = f"pp-test-{uuid.uuid4().hex[:16]}"
    moto_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_storage_config(moto_server: MotoS3) -> Callable[..., StorageConfig]:
    """``make(bucket, allowed_prefixes=())``: a StorageConfig for ``s3://<bucket>``."""
    return moto_server.storage_config
