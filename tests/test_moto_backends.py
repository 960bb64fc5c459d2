"""The tests' moto servers list moto's backends once and find the same ones."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import create_backend_app

from tests.support.moto_backends import MOTOS_OWN_LISTING, list_backends_once
from tests.support.s3 import MotoIam, MotoS3

_S3_REQUEST = {
    "PATH_INFO": "/a-bucket/a/key",
    "REQUEST_METHOD": "GET",
    "HTTP_HOST": "127.0.0.1:5000",
    "HTTP_AUTHORIZATION": (
        "AWS4-HMAC-SHA256 Credential=k/20261207/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=0"
    ),
}


@pytest.fixture
def unlisted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's own listing in place for the test (the session's servers may have replaced
    it already), and the session's put back after; returns moto's own."""
    monkeypatch.setattr(backends, "list_of_moto_modules", MOTOS_OWN_LISTING)
    yield MOTOS_OWN_LISTING


def test_the_listing_made_once_holds_the_same_names_in_the_same_order(unlisted: Any) -> None:
    before = list(unlisted())
    list_backends_once()
    assert list(backends.list_of_moto_modules()) == before
    assert "s3" in before and "sts" in before and "iam" in before


def test_after_the_first_listing_no_request_lists_the_directory(
    unlisted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_backends_once()
    app = DomainDispatcherApplication(create_backend_app)
    first = app.get_application(dict(_S3_REQUEST))
    listings: list[str] = []
    real_listdir = os.listdir

    def counting_listdir(path: Any = ".") -> list[str]:
        listings.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", counting_listdir)
    for _ in range(3):
        assert app.get_application(dict(_S3_REQUEST)) is first
    assert listings == []


def test_both_servers_answer_with_the_listing_made_once(
    moto_server: MotoS3, moto_iam: MotoIam
) -> None:
    # The in-process server finds its S3 backend; the IAM server (its own process,
    # started through tests.support.moto_backends) finds S3 and IAM and enforces the
    # set-up's policies: the sweeper may only assume roles.
    client = moto_server.client()
    client.create_bucket(Bucket="listed-once")
    assert "listed-once" in {b["Name"] for b in client.list_buckets()["Buckets"]}
    admin = moto_iam.client()
    admin.create_bucket(Bucket="listed-once-iam")
    assert "listed-once-iam" in {b["Name"] for b in admin.list_buckets()["Buckets"]}
    with pytest.raises(ClientError) as refused:
        moto_iam.client(user=moto_iam.sweeper).list_buckets()
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
