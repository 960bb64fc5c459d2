"""S3 fixtures: a real moto HTTP server, fresh buckets, and a StorageConfig for them.

s3fs is never mocked: it talks HTTP to moto's server, so request shapes, XML
parsing and error handling are the real ones.

- ``moto_server`` (session): the running server, as a :class:`MotoS3`.
- ``s3_bucket`` (function): the name of a new, empty, uniquely named bucket.
- ``s3_storage_config`` (function): a callable ``(bucket, allowed_prefixes=())``
  returning a StorageConfig that points ``s3://<bucket>`` at the server.
- ``moto_iam`` (session): a second moto server, in its own process, with IAM
  authorization enforced (see :class:`MotoIam`). Its own process because moto
  keeps the enforcement switch in a process-wide setting, which would lock the
  shared ``moto_server`` out too.
- ``sweeper_identity`` (function): the default credential chain finds ``moto_iam``'s
  base user (who may only assume roles) in the environment, and nothing else.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from builders.ports import free_port
from polaris_pipeline.storage.config import StorageConfig, StorageRule
from tests.support.moto_backends import list_backends_once


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
    list_backends_once()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield MotoS3(endpoint_url=f"http://{host}:{port}")
    finally:
        server.stop()


def remove_bucket(client: Any, bucket: str) -> bool:
    """Delete every version of every object of ``bucket``, then the bucket; False when
    anything stays (a policy or a lock a test set)."""
    try:
        pages = client.get_paginator("list_object_versions").paginate(Bucket=bucket)
        for page in pages:
            doomed = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            ]
            if doomed:
                client.delete_objects(Bucket=bucket, Delete={"Objects": doomed, "Quiet": True})
        client.delete_bucket(Bucket=bucket)
    except client.exceptions.NoSuchBucket:
        return True
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def _s3_bucket_name() -> list[str]:
    """The name of this process's test bucket (a new one when the old cannot be removed)."""
    return [f"pp-test-{uuid.uuid4().hex[:16]}"]


@pytest.fixture
def s3_bucket(moto_server: MotoS3, _s3_bucket_name: list[str]) -> str:
    """A new, empty bucket for this test (the server is shared by the session). Its name
    is the same for every test of a process, deleted and created again, so that a
    warehouse's tables can be copied back (``tests/support/table_recipes.py``)."""
    client = moto_server.client()
    if not remove_bucket(client, _s3_bucket_name[0]):
        _s3_bucket_name[0] = f"pp-test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=_s3_bucket_name[0])
    return _s3_bucket_name[0]


@pytest.fixture
def s3_storage_config(moto_server: MotoS3) -> Callable[..., StorageConfig]:
    """``make(bucket, allowed_prefixes=())``: a StorageConfig for ``s3://<bucket>``."""
    return moto_server.storage_config


# -- moto with IAM enforced ------------------------------------------------------------

ACCOUNT = "123456789012"  # moto's default account


@dataclass(frozen=True)
class IamUser:
    name: str
    key: str
    secret: str


@dataclass(frozen=True)
class MotoIam:
    """A moto server that checks every request against IAM policies.

    ``admin`` may do anything (tests arrange and inspect buckets with it);
    ``polaris`` may do anything on S3 but delete (Polaris's storage identity in a
    deployment that leaves every purge to us);
    ``sweeper`` may only call ``sts:AssumeRole`` on the roles in ``assumable``;
    role ``purger`` may touch every bucket, role ``powerless`` nothing at all,
    role ``forbidden`` exists but the sweeper may not assume it.
    """

    endpoint_url: str
    admin: IamUser
    sweeper: IamUser
    polaris: IamUser
    region: str = "us-east-1"

    @staticmethod
    def role_arn(name: str) -> str:
        return f"arn:aws:iam::{ACCOUNT}:role/{name}"

    def client(self, service: str = "s3", user: IamUser | None = None) -> Any:
        who = user or self.admin
        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=who.key,
            aws_secret_access_key=who.secret,
            region_name=self.region,
        )

    def storage_config(self, bucket: str, user: IamUser) -> StorageConfig:
        """A static rule: ``s3://<bucket>`` signed by ``user``'s own keys."""
        options = {
            "endpoint_url": self.endpoint_url,
            "key": user.key,
            "secret": user.secret,
            "client_kwargs": {"region_name": self.region},
        }
        return StorageConfig(rules=(StorageRule(f"s3://{bucket}", options),))

    def new_bucket(self) -> str:
        name = f"pp-iam-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> set[str]:
        """Every key of ``bucket`` (listed as admin)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {obj["Key"] for page in pages for obj in page.get("Contents", [])}

    def _moto_api(self, action: str) -> str:
        url = f"{self.endpoint_url}/moto-api/recorder/{action}"
        with urllib.request.urlopen(urllib.request.Request(url), timeout=30) as response:
            return str(response.read().decode("utf-8"))

    def start_recording(self) -> None:
        """From now on moto records every request it serves, headers included."""
        self._moto_api("reset-recording")
        self._moto_api("start-recording")

    def session_credentials_seen(self) -> dict[str, str]:
        """AccessKeyId -> session token of every temporary credential (``ASIA...``) a
        request recorded since ``start_recording`` was signed with, as moto saw it.

        (moto's state API, ``/moto-api/data.json``, fails once S3 holds an object
        written by multipart upload, so the sessions are learnt from the requests.)
        """
        seen: dict[str, str] = {}
        for line in self._moto_api("download-recording").splitlines():
            headers = json.loads(line).get("headers", {})
            found = re.search(r"Credential=(ASIA[A-Z0-9]+)/", headers.get("Authorization", ""))
            if found:
                seen[found.group(1)] = headers.get("X-Amz-Security-Token", "")
        return seen


def wait_http(
    url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30, *, accept_errors: bool = False
) -> None:
    """Wait until ``url`` answers (any HTTP status with ``accept_errors``) or ``proc`` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            if accept_errors:
                return
            time.sleep(0.1)
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"no answer from {url} within {timeout_s} s")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """End a server a fixture started: politely, then for sure."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


# How many calls _arrange_iam makes: moto lets exactly that many through unchecked
# (INITIAL_NO_AUTH_ACTION_COUNT) and authorizes every later one.
_SETUP_CALLS = 14

# What a Polaris storage identity without delete permission is denied: every way S3
# deletes an object (a batch delete is authorized as DeleteObject).
DELETE_ACTIONS = ["s3:DeleteObject", "s3:DeleteObjectVersion"]


def _arrange_iam(endpoint: str, region: str) -> tuple[IamUser, IamUser, IamUser]:
    """Users, roles and policies, created while moto still lets everyone in."""
    boot = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
        region_name=region,
    )
    calls: list[str] = []
    boot.meta.events.register("after-call.iam", lambda **kw: calls.append("call"))

    def user(name: str, policy: str) -> IamUser:
        boot.create_user(UserName=name)
        boot.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=policy)
        key = boot.create_access_key(UserName=name)["AccessKey"]
        return IamUser(name, key["AccessKeyId"], key["SecretAccessKey"])

    admin = user("admin", _policy({"Effect": "Allow", "Action": "*", "Resource": "*"}))
    polaris = user(
        "polaris",
        _policy(
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": DELETE_ACTIONS, "Resource": "*"},
        ),
    )
    sweeper = user(
        "sweeper",
        _policy(
            {
                "Effect": "Allow",
                "Action": "sts:AssumeRole",
                "Resource": [MotoIam.role_arn("purger"), MotoIam.role_arn("powerless")],
            }
        ),
    )
    trust = _policy(
        {
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/sweeper"},
            "Action": "sts:AssumeRole",
        }
    )
    for role in ("purger", "powerless", "forbidden"):
        boot.create_role(RoleName=role, AssumeRolePolicyDocument=trust)
    boot.put_role_policy(
        RoleName="purger",
        PolicyName="buckets",
        PolicyDocument=_policy({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}),
    )
    boot.put_role_policy(
        RoleName="powerless",
        PolicyName="nothing",
        PolicyDocument=_policy({"Effect": "Allow", "Action": "sqs:ListQueues", "Resource": "*"}),
    )
    if len(calls) != _SETUP_CALLS:
        raise RuntimeError(f"IAM set-up made {len(calls)} calls, expected {_SETUP_CALLS}")
    return admin, sweeper, polaris


@pytest.fixture(scope="session")
def moto_iam() -> Iterator[MotoIam]:
    """A moto server on 127.0.0.1 enforcing IAM, for the test process: starting one (a
    Python process importing moto, then its IAM set-up) costs about 1.5 s of CPU, and
    the tests of five modules spread over every xdist worker use it. Each test makes
    its own buckets and users (unique names); the set-up's users and roles are only read."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(_SETUP_CALLS)
    # Where MotoIam.start_recording's requests go (moto's default is the cwd).
    recording = tempfile.mkdtemp(prefix="moto-recording-")
    env["MOTO_RECORDER_FILEPATH"] = os.path.join(recording, "requests.jsonl")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.moto_backends", "-H", "127.0.0.1", "-p", str(port)],
        cwd=Path(__file__).resolve().parents[2],  # where ``tests`` is importable
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"{endpoint}/moto-api/", proc)
        # From the end of this on, every request is authorized against its policies.
        admin, sweeper, polaris = _arrange_iam(endpoint, "us-east-1")
        yield MotoIam(endpoint, admin, sweeper, polaris)
    finally:
        stop_process(proc)
        shutil.rmtree(recording, ignore_errors=True)


@pytest.fixture
def sweeper_identity(moto_iam: MotoIam, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The sweeper's default credential chain finds moto's base user in the environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_iam.sweeper.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_iam.sweeper.secret)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
