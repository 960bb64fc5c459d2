"""Storage: config, resolution through fsspec, literal bulk deletion, the path guard.

S3 tests run s3fs against moto's real HTTP server (tests/support/s3.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.cleanup.guard.paths import PathGuard
from polaris_pipeline.errors import GuardRefusal, StorageConfigError, StorageError
from polaris_pipeline.settings import CONFIG_ENV_VAR
from polaris_pipeline.storage.config import StorageConfig, StorageRule
from polaris_pipeline.storage.delete import bulk_delete
from polaris_pipeline.storage.redact import mask_options, redact
from polaris_pipeline.storage.resolve import StorageResolver
from tests.support.s3 import MotoS3

SECRET = "sUp3r-s3cret-VALUE"


# -- redact ------------------------------------------------------------------------


def test_mask_options_masks_secret_names_recursively() -> None:
    masked = mask_options(
        {
            "endpoint_url": "http://x",
            "key": "AKIA123",
            "secret": SECRET,
            "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": "tok"},
            "anon": False,
            "connection_string": f"AccountName=a;AccountKey={SECRET}",
            "endpoint": f"https://a.blob.core.windows.net/?sv=1&sig={SECRET}",
        }
    )
    assert masked == {
        "endpoint_url": "http://x",
        "key": "***",
        "secret": "***",
        "client_kwargs": {"region_name": "eu-west-1", "aws_session_token": "***"},
        "anon": False,
        "connection_string": "***",
        "endpoint": "https://a.blob.core.windows.net/?sv=1&sig=***",
    }


def test_redact_replaces_every_secret() -> None:
    text = f"failed with key AKIA123 and secret {SECRET} (again {SECRET})"
    assert redact(text, ["AKIA123", SECRET, ""]) == "failed with key *** and secret *** (again ***)"


# -- config ------------------------------------------------------------------------


def test_load_yaml_resolves_env_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PP_TEST_SECRET", SECRET)
    path = tmp_path / "storage.yaml"
    path.write_text(
        """
locations:
  - prefix: s3://bucket/wh
    options:
      endpoint_url: http://minio:9000
      key: AKIA123
      secret: {env: PP_TEST_SECRET}
      client_kwargs: {region_name: eu-west-1}
      anon: false
allowed_prefixes: [s3a://bucket/wh/]
"""
    )
    config = StorageConfig.load(str(path))
    (rule,) = config.rules
    assert rule.prefix == "s3://bucket/wh"
    assert rule.options["secret"] == SECRET
    assert rule.options["client_kwargs"] == {"region_name": "eu-west-1"}
    assert rule.options["anon"] is False
    # s3a folded to s3, trailing slash dropped.
    assert config.allowed_prefixes == ("s3://bucket/wh",)


def test_load_json(tmp_path: Path) -> None:
    path = tmp_path / "storage.json"
    path.write_text(
        json.dumps(
            {"locations": [{"prefix": "/data/wh", "options": {"auto_mkdir": False}}]},
            indent="\t",  # tabs: valid JSON, invalid YAML indentation
        )
    )
    config = StorageConfig.load(path)
    assert config.rules == (StorageRule("file:///data/wh", {"auto_mkdir": False}),)
    assert config.allowed_prefixes == ()


def test_the_resource_reads_the_path_from_the_environment_at_run_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from polaris_pipeline.dagster.resources.storage import (
        PolarisStorageResource,
        clear_storage_cache,
    )

    path = tmp_path / "storage.yml"
    path.write_text("allowed_prefixes: ['s3://b/wh']\n")
    resource = PolarisStorageResource()  # built with no path, as build_defs does
    monkeypatch.setenv(CONFIG_ENV_VAR, str(path))
    clear_storage_cache()
    assert resource.get_config().allowed_prefixes == ("s3://b/wh",)
    monkeypatch.delenv(CONFIG_ENV_VAR)
    clear_storage_cache()
    assert resource.get_config() == StorageConfig()


def test_missing_env_var_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PP_TEST_UNSET", raising=False)
    path = tmp_path / "storage.yaml"
    path.write_text("locations:\n  - prefix: s3://b\n    options: {secret: {env: PP_TEST_UNSET}}\n")
    with pytest.raises(StorageConfigError, match="'PP_TEST_UNSET' is not set") as err:
        StorageConfig.load(path)
    assert "locations[0].options.secret" in str(err.value)


def test_a_merge_key_and_the_keys_beside_it_are_no_key_given_twice(tmp_path: Path) -> None:
    """YAML's merge (``<<: *defaults``) still loads, and a key written beside it overrides
    the merged one, as YAML says: only a key written twice in one mapping is refused."""
    path = tmp_path / "storage.yaml"
    path.write_text(
        "locations:\n"
        "  - &s3 {prefix: s3://a/, options: {anon: true}}\n"
        "  - {<<: *s3, prefix: s3://b/}\n"
    )
    config = StorageConfig.load(path)
    assert [rule.prefix for rule in config.rules] == ["s3://a", "s3://b"]
    assert config.rules[1].options == {"anon": True}


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "bad.yaml",
            f"locations: [\n  - prefix: s3://b\n    secret: {SECRET}\n",
            "invalid YAML at line",
        ),
        ("bad.json", '{"locations": [' + f'"{SECRET}"', "invalid JSON at line 1"),
        ("shape.yaml", "locations: {prefix: s3://b}\n", "'locations' must be a list"),
        ("typo.yaml", "location: []\n", "unknown key 'location'"),
        # A key YAML reads as a number is refused as any other, not a TypeError.
        ("number.yaml", "locations: []\n1: a\nb: c\n", "unknown key '1'"),
        ("rule.yaml", "locations: [{prefix: s3://b, 2: x}]\n", "locations[0]: unknown key '2'"),
        # A typo names the key it is nearest, as an unknown key of a settings block does.
        ("near.yaml", "allowed_prefix: []\n", "'allowed_prefix' (did you mean allowed_prefixes?)"),
        ("near_rule.yaml", "locations: [{prefix: /wh, option: {}}]\n", "(did you mean options?)"),
        (
            "near_name.yaml",
            "storage_names: {a: {defualt_identity: true}}\n",
            "storage_names.a: unknown key 'defualt_identity' (did you mean default_identity?)",
        ),
        ("noprefix.yaml", "locations: [{options: {}}]\n", "locations[0].prefix must be"),
        ("relative.yaml", "locations: [{prefix: data/wh}]\n", "neither a URI nor an absolute"),
        # A key given twice: the parsers keep the last, so the first rules would go unread.
        (
            "twice.yaml",
            "allowed_prefixes: [s3://b/wh/]\nlocations: []\nallowed_prefixes: [s3://]\n",
            "invalid YAML at line 1, column 1: key 'allowed_prefixes' given twice",
        ),
        (
            "twice_rule.yaml",
            f"locations: [{{prefix: s3://b, options: {{key: a, key: {SECRET}}}}}]\n",
            "key 'key' given twice",
        ),
        (
            "twice.json",
            '{"allowed_prefixes": ["s3://b/wh/"], "allowed_prefixes": ["s3://"]}',
            "invalid JSON: key 'allowed_prefixes' given twice",
        ),
        ("list.yaml", "- a\n- b\n", "top level must be a mapping"),
        ("empty.yaml", "", "file is empty"),
    ],
)
def test_malformed_file_is_one_clear_line(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(StorageConfigError) as err:
        StorageConfig.load(path)
    message = str(err.value)
    assert expected in message
    assert "\n" not in message
    assert SECRET not in message  # parser messages quote lines; ours must not


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StorageConfigError, match="file not found"):
        StorageConfig.load(tmp_path / "nope.yaml")


def test_repr_masks_secrets() -> None:
    config = StorageConfig.from_mapping(
        {
            "locations": [
                {
                    "prefix": "s3://b",
                    "options": {
                        "key": "AKIA123",
                        "secret": SECRET,
                        "token": "tok-123",
                        "client_kwargs": {"aws_secret_access_key": SECRET, "region_name": "r1"},
                        "endpoint_url": "http://e",
                    },
                }
            ]
        }
    )
    for text in (repr(config), str(config), repr(config.rules[0]), f"{config}"):
        assert SECRET not in text
        assert "AKIA123" not in text
        assert "tok-123" not in text
        assert "http://e" in text
        assert "r1" in text


def test_rule_for_longest_prefix_at_segment_boundary() -> None:
    config = StorageConfig(
        rules=(
            StorageRule("s3://b", {"n": 1}),
            StorageRule("s3://b/wh/", {"n": 2}),
            StorageRule("s3a://b/wh/special", {"n": 3}),
            StorageRule("/data", {"n": 4}),
        )
    )
    assert config.rule_for("s3://b/x").options == {"n": 1}  # type: ignore[union-attr]
    assert config.rule_for("s3a://b/wh/t/f").options == {"n": 2}  # type: ignore[union-attr]
    assert config.rule_for("s3n://b/wh/special/f").options == {"n": 3}  # type: ignore[union-attr]
    # "special2" is a sibling of "special", not inside it.
    assert config.rule_for("s3://b/wh/special2/f").options == {"n": 2}  # type: ignore[union-attr]
    assert config.rule_for("file:///data/x").options == {"n": 4}  # type: ignore[union-attr]
    assert config.rule_for("file:/data/x").options == {"n": 4}  # type: ignore[union-attr]
    assert config.rule_for("/database/x") is None
    assert config.rule_for("s3://b2/x") is None
    assert config.rule_for("gs://b/x") is None


# -- resolver ----------------------------------------------------------------------


def test_resolve_local_forms(tmp_path: Path) -> None:
    resolver = StorageResolver()
    f = tmp_path / "x[1].json"
    f.write_bytes(b"12345")
    for uri in (str(f), f"file://{f}", f"file:{f}", f"file://localhost{f}"):
        fs, path = resolver.filesystem(uri)
        assert isinstance(fs, LocalFileSystem)
        assert path == str(f)
        assert resolver.exists(uri)
        assert resolver.size(uri) == 5
    assert not resolver.exists(str(tmp_path / "x1.json"))
    assert resolver.size(str(tmp_path / "x1.json")) is None
    assert resolver.size(str(tmp_path)) is None  # a directory has no file size


def test_resolve_rejects_relative_and_hosts() -> None:
    resolver = StorageResolver()
    with pytest.raises(StorageError, match="not a URI or absolute path"):
        resolver.filesystem("data/x.parquet")
    with pytest.raises(StorageError, match="not a local absolute path"):
        resolver.filesystem("file://otherhost/x")
    with pytest.raises(StorageError, match="no bucket"):
        resolver.filesystem("s3:///key")


def test_resolve_unknown_scheme_and_missing_package() -> None:
    resolver = StorageResolver()
    with pytest.raises(StorageError, match="no filesystem for scheme 'nosuchfs'"):
        resolver.filesystem("nosuchfs://b/x")
    # gcsfs and adlfs are dependencies now: ossfs and ocifs are not installed.
    with pytest.raises(StorageError) as err:
        resolver.filesystem("oss://bucket/x")
    assert str(err.value) == "no filesystem for scheme 'oss': install ossfs"
    with pytest.raises(StorageError, match="no filesystem for scheme 'oci': install ocifs"):
        resolver.filesystem("oci://bucket@namespace/x")


def test_resolver_caches_filesystems(moto_server: MotoS3, s3_bucket: str) -> None:
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    fs1, path = resolver.filesystem(f"s3://{s3_bucket}/wh/a")
    fs2, _ = resolver.filesystem(f"s3a://{s3_bucket}/wh/b")
    fs3, _ = resolver.filesystem(f"s3n://{s3_bucket}/other")
    assert fs1 is fs2 is fs3
    assert path == f"{s3_bucket}/wh/a"
    # A bucket without a rule gets default options: another filesystem.
    other, _ = resolver.filesystem("s3://some-other-bucket/x")
    assert other is not fs1
    assert resolver.filesystem("s3://some-other-bucket/y")[0] is other
    assert resolver.filesystem("/tmp/a")[0] is resolver.filesystem("file:///b")[0]
    # Another resolver builds its own, even with equal options.
    assert StorageResolver(resolver.config).filesystem(f"s3://{s3_bucket}/x")[0] is not fs1


def test_resolve_s3_against_moto(moto_server: MotoS3, s3_bucket: str) -> None:
    moto_server.client().put_object(
        Bucket=s3_bucket, Key="wh/t/metadata/v1.metadata.json", Body=b"{}x"
    )
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    uri = f"s3a://{s3_bucket}/wh/t/metadata/v1.metadata.json"
    assert resolver.exists(uri)
    assert resolver.size(uri) == 3
    assert not resolver.exists(f"s3://{s3_bucket}/wh/t/metadata/v2.metadata.json")
    assert resolver.size(f"s3://{s3_bucket}/wh/t/metadata/v2.metadata.json") is None

    # pyiceberg InputFile: location stays the URI given, reads go through the resolver.
    input_file = resolver.input_file(uri)
    assert input_file.location == uri
    assert input_file.exists()
    assert len(input_file) == 3
    with input_file.open() as stream:
        assert stream.read() == b"{}x"
    missing = resolver.input_file(f"s3://{s3_bucket}/wh/none")
    assert not missing.exists()
    with pytest.raises(FileNotFoundError):
        missing.open()


def test_resolver_error_text_is_redacted() -> None:
    config = StorageConfig(rules=(StorageRule("s3://b", {"key": "AKIA123", "secret": SECRET}),))
    resolver = StorageResolver(config)
    assert SECRET not in resolver.describe(RuntimeError(f"signature for {SECRET} mismatch"))
    assert resolver.describe(RuntimeError("key AKIA123")) == "RuntimeError: key ***"


# -- bulk_delete: local ------------------------------------------------------------


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_local_delete_is_literal(tmp_path: Path) -> None:
    targets = [_touch(tmp_path / n, b"12") for n in ("a[1].parquet", "b*.parquet", "c?.parquet")]
    bystanders = [_touch(tmp_path / n) for n in ("a1.parquet", "bx.parquet", "cx.parquet")]
    uris = [str(targets[0]), f"file://{targets[1]}", f"file:{targets[2]}"]
    report = bulk_delete(StorageResolver(), uris)
    assert report.deleted == uris
    assert report.ok and not report.missing
    assert report.bytes_freed == 6
    assert report.requests == 3
    assert not any(p.exists() for p in targets)
    assert all(p.exists() for p in bystanders)


def test_local_missing_is_not_an_error(tmp_path: Path) -> None:
    present = _touch(tmp_path / "present")
    report = bulk_delete(StorageResolver(), [str(tmp_path / "gone"), str(present), str(present)])
    assert report.missing == [str(tmp_path / "gone")]
    assert report.deleted == [str(present)]  # the duplicate is deleted once
    assert report.ok


def test_local_refuses_directories(tmp_path: Path) -> None:
    d = tmp_path / "dir"
    _touch(d / "inner")
    report = bulk_delete(StorageResolver(), [str(d)])
    assert "is a directory" in report.failed[str(d)]
    assert (d / "inner").exists()


def test_local_symlink_removes_the_link_not_the_target(tmp_path: Path) -> None:
    target = _touch(tmp_path / "outside" / "precious")
    link = tmp_path / "table" / "link"
    link.parent.mkdir()
    link.symlink_to(target)
    report = bulk_delete(StorageResolver(), [str(link)])
    assert report.deleted == [str(link)]
    assert target.exists() and not link.is_symlink()


def test_local_failure_parent_is_a_file(tmp_path: Path) -> None:
    # Tests run as root, so a read-only directory stops nothing. A path under a
    # regular file fails with ENOTDIR: the layout is not what the manifest says,
    # which is reported as a failure rather than silently as "missing".
    _touch(tmp_path / "file")
    ok = _touch(tmp_path / "ok")
    bad = str(tmp_path / "file" / "child")
    report = bulk_delete(StorageResolver(), [bad, str(ok)])
    assert not report.ok
    assert report.failed[bad] == "not deleted: 'file' on its path is not a directory"
    assert report.deleted == [str(ok)]


@pytest.fixture
def immutable_file(tmp_path: Path) -> Iterator[Path]:
    """A file with the immutable attribute: even root cannot unlink it."""
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("chattr not available")
    path = _touch(tmp_path / "immutable")
    if subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("filesystem or capabilities do not allow chattr +i")
    try:
        yield path
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_local_failure_permission(immutable_file: Path) -> None:
    report = bulk_delete(StorageResolver(), [str(immutable_file)])
    assert report.failed == {str(immutable_file): "PermissionError: Operation not permitted"}
    assert report.bytes_freed == 0
    assert immutable_file.exists()


def test_unresolvable_uri_is_a_failure_not_an_exception(tmp_path: Path) -> None:
    f = _touch(tmp_path / "f")
    report = bulk_delete(StorageResolver(), ["oss://b/x", str(f)])
    assert report.failed == {"oss://b/x": "no filesystem for scheme 'oss': install ossfs"}
    assert report.deleted == [str(f)]


def test_other_filesystem_uses_literal_rm_file() -> None:
    root = f"memory://pp-{uuid.uuid4().hex}"
    mem = fsspec.filesystem("memory")
    mem.pipe({f"{root}/a[1]": b"1", f"{root}/a1": b"1"})
    report = bulk_delete(StorageResolver(), [f"{root}/a[1]", f"{root}/gone"])
    assert report.deleted == [f"{root}/a[1]"]
    assert report.missing == [f"{root}/gone"]
    assert report.bytes_freed is None  # not fetched
    assert mem.exists(f"{root}/a1")
    mem.rm(root, recursive=True)


# -- bulk_delete: S3 (moto server) -------------------------------------------------


def _keys(server: MotoS3, bucket: str) -> list[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_s3_delete_is_literal(moto_server: MotoS3, s3_bucket: str) -> None:
    client = moto_server.client()
    names = ["a[1].parquet", "a1.parquet", "b*.parquet", "bx.parquet", "c?.parquet", "cx.parquet"]
    for n in names:
        client.put_object(Bucket=s3_bucket, Key=f"wh/t/data/{n}", Body=b"x")
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    targets = [
        f"s3://{s3_bucket}/wh/t/data/{n}" for n in ("a[1].parquet", "b*.parquet", "c?.parquet")
    ]
    report = bulk_delete(resolver, targets)
    assert sorted(report.deleted) == sorted(targets)
    assert report.ok
    assert report.requests == 1
    assert report.bytes_freed is None
    assert _keys(moto_server, s3_bucket) == [
        f"wh/t/data/{n}" for n in ("a1.parquet", "bx.parquet", "cx.parquet")
    ]


def test_s3_missing_keys_count_as_deleted(moto_server: MotoS3, s3_bucket: str) -> None:
    # S3 answers DeleteObjects for an absent key as "Deleted"; without a HEAD per
    # key the two cannot be told apart.
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    report = bulk_delete(resolver, [f"s3://{s3_bucket}/never/existed"])
    assert report.deleted == [f"s3://{s3_bucket}/never/existed"]
    assert report.ok


def test_s3_missing_bucket_is_missing(moto_server: MotoS3) -> None:
    bucket = f"pp-gone-{uuid.uuid4().hex[:12]}"
    resolver = StorageResolver(moto_server.storage_config(bucket))
    report = bulk_delete(resolver, [f"s3://{bucket}/a", f"s3://{bucket}/b"])
    assert report.missing == [f"s3://{bucket}/a", f"s3://{bucket}/b"]
    assert report.ok and report.requests == 1


def test_s3_batches_of_1000(moto_server: MotoS3, s3_bucket: str) -> None:
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    fs, _ = resolver.filesystem(f"s3://{s3_bucket}/")
    # Every 10th key exists (2,500 PUTs against moto take ~15 s); the others are
    # still sent and answered, so request counting and batching are exercised fully.
    fs.pipe({f"{s3_bucket}/wh/t/data/{i:05d}.parquet": b"x" for i in range(0, 2500, 10)})
    uris = [f"s3://{s3_bucket}/wh/t/data/{i:05d}.parquet" for i in range(2500)]
    report = bulk_delete(resolver, uris)
    assert report.requests == 3
    assert sorted(report.deleted) == sorted(uris)
    assert report.ok
    assert _keys(moto_server, s3_bucket) == []

    small = bulk_delete(resolver, uris[:25], chunk_size=10)
    assert small.requests == 3
    with pytest.raises(ValueError, match="chunk_size"):
        bulk_delete(resolver, uris, chunk_size=1001)


def test_s3_per_key_errors(moto_server: MotoS3, s3_bucket: str) -> None:
    # A bucket policy denying s3:DeleteObject under one prefix makes the real moto
    # server answer DeleteObjects with per-key <Error> entries (HTTP 200), the way
    # S3 does for object-lock or policy denials.
    client = moto_server.client()
    for key in ("wh/t/locked/1.parquet", "wh/t/locked/2.parquet", "wh/t/data/3.parquet"):
        client.put_object(Bucket=s3_bucket, Key=key, Body=b"x")
    client.put_bucket_policy(
        Bucket=s3_bucket,
        Policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Deny",
                        "Principal": "*",
                        "Action": "s3:DeleteObject",
                        "Resource": f"arn:aws:s3:::{s3_bucket}/wh/t/locked/*",
                    }
                ],
            }
        ),
    )
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    locked = [f"s3://{s3_bucket}/wh/t/locked/1.parquet", f"s3a://{s3_bucket}/wh/t/locked/2.parquet"]
    free = f"s3://{s3_bucket}/wh/t/data/3.parquet"
    report = bulk_delete(resolver, [*locked, free])
    assert report.requests == 1
    assert not report.ok
    assert report.failed == {u: "AccessDenied: Access Denied" for u in locked}
    assert report.deleted == [free]
    assert _keys(moto_server, s3_bucket) == ["wh/t/locked/1.parquet", "wh/t/locked/2.parquet"]


def test_s3_delete_invalidates_listing_cache(moto_server: MotoS3, s3_bucket: str) -> None:
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    fs, _ = resolver.filesystem(f"s3://{s3_bucket}/")
    fs.pipe({f"{s3_bucket}/wh/t/a": b"x", f"{s3_bucket}/wh/t/b": b"x"})
    assert len(fs.ls(f"{s3_bucket}/wh/t")) == 2  # fills s3fs's listing cache
    report = bulk_delete(resolver, [f"s3://{s3_bucket}/wh/t/a"])
    assert report.deleted == [f"s3://{s3_bucket}/wh/t/a"]
    assert fs.ls(f"{s3_bucket}/wh/t") == [f"{s3_bucket}/wh/t/b"]
    assert not resolver.exists(f"s3://{s3_bucket}/wh/t/a")


def test_s3_request_failure_is_redacted(moto_server: MotoS3) -> None:
    # Nothing listens on port 9 of 127.0.0.1: the whole request fails, and
    # botocore's message quotes the endpoint URL, which here carries the secret.
    options = {
        **moto_server.storage_options(),
        "secret": SECRET,
        "endpoint_url": f"http://127.0.0.1:9/{SECRET}",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
    }
    config = StorageConfig(rules=(StorageRule("s3://b", options),))
    resolver = StorageResolver(config)
    fs, _ = resolver.filesystem("s3://b/x")
    fs.retries = 1  # s3fs's own retry loop, on top of botocore's
    report = bulk_delete(resolver, ["s3://b/x"])
    reason = report.failed["s3://b/x"]
    assert reason.startswith("DeleteObjects failed: EndpointConnectionError")
    assert SECRET not in reason and "***" in reason
    with pytest.raises(StorageError) as err:
        resolver.exists("s3://b/x")  # fsspec's exists() would say False
    assert SECRET not in str(err.value)
    # s3fs rewrites config_kwargs["retries"] in place; the config must not change
    # (and so the cache key stays the same).
    assert config.rules[0].options["config_kwargs"]["retries"] == {"max_attempts": 1}
    assert resolver.filesystem("s3://b/y")[0] is fs


def test_mixed_local_and_s3(moto_server: MotoS3, s3_bucket: str, tmp_path: Path) -> None:
    moto_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    f = _touch(tmp_path / "f", b"abc")
    resolver = StorageResolver(moto_server.storage_config(s3_bucket))
    report = bulk_delete(resolver, [str(f), f"s3://{s3_bucket}/k"])
    assert sorted(report.deleted) == sorted([str(f), f"s3://{s3_bucket}/k"])
    assert report.requests == 2
    assert report.bytes_freed is None  # the S3 size is unknown


# -- guard ---------------------------------------------------------------------------

T = "s3://b/wh/ns/t"


def _guard(
    props: dict[str, str] | None = None,
    allowed: tuple[str, ...] = (),
    location: str = T,
) -> PathGuard:
    return PathGuard.for_table(location, props or {}, StorageConfig(allowed_prefixes=allowed))


def _refusal(guard: PathGuard, uri: str) -> str:
    with pytest.raises(GuardRefusal) as err:
        guard.check(uri)
    assert err.value.path == uri
    return err.value.reason


def test_guard_admits_paths_inside() -> None:
    guard = _guard()
    guard.check(f"{T}/data/x.parquet")
    guard.check("s3a://b/wh/ns/t/metadata/v1.metadata.json")
    guard.check("s3n://b/wh/ns/t/data/a[1]?.parquet")


def test_guard_other_bucket() -> None:
    assert _refusal(_guard(), "s3://other/wh/ns/t/data/x") == "other bucket 'other'"


def test_guard_other_scheme() -> None:
    assert _refusal(_guard(), "gs://b/wh/ns/t/data/x") == "other scheme 'gs' (table location is s3)"
    assert "other scheme 'file'" in _refusal(_guard(), "/wh/ns/t/data/x")


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        (f"{T}/../t2/x", "'..' segment"),
        (f"{T}/data/../../t2/x", "'..' segment"),
        (f"{T}/./x", "'.' segment"),
        (f"{T}//x", "empty segment ('//')"),
        (f"{T}/data/", "empty segment ('//')"),
    ],
)
def test_guard_dot_segments_and_empty_segments(uri: str, reason: str) -> None:
    assert _refusal(_guard(), uri) == reason


def test_guard_prefix_sibling() -> None:
    assert _refusal(_guard(), "s3://b/wh/ns/t2/x") == f"outside the table location {T}"
    assert _refusal(_guard(), "s3://b/wh/ns/x") == f"outside the table location {T}"


def test_guard_root_itself() -> None:
    assert _refusal(_guard(), T) == "is a table location itself"
    assert _refusal(_guard(), "s3a://b/wh/ns/t") == "is a table location itself"
    assert _refusal(_guard(), f"{T}/") == "empty segment ('//')"
    data = f"{T}/data"
    assert _refusal(_guard({"write.data.path": data}), data) == "is a table location itself"


def test_guard_nul_and_control_characters() -> None:
    assert _refusal(_guard(), f"{T}/x\x00.parquet") == "NUL byte"
    assert _refusal(_guard(), f"{T}/x\n.parquet") == "control character"
    assert _refusal(_guard(), f"{T}/x\x7f") == "control character"


def test_guard_control_character_range() -> None:
    # C0, DEL and C1 (U+0080 to U+009F) are refused; U+00A0 onwards is text.
    for c in ("\x01", "\x1f", "\x7f", "\x80", "\x85", "\x9f"):
        assert _refusal(_guard(), f"{T}/x{c}y") == "control character"
    _guard().check(f"{T}/x\xa0y\u00e9\u2028")


def test_guard_relative_path() -> None:
    assert _refusal(_guard(), "wh/ns/t/x") == "not a URI or absolute path"


def test_guard_symlink_escape(tmp_path: Path) -> None:
    table = tmp_path / "wh" / "t"
    outside = tmp_path / "elsewhere"
    _touch(outside / "precious")
    _touch(table / "data" / "f.parquet")
    (table / "escape").symlink_to(outside, target_is_directory=True)
    (table / "inner").symlink_to(table / "data", target_is_directory=True)
    guard = PathGuard.for_table(f"file://{table}", {}, StorageConfig())
    guard.check(str(table / "data" / "f.parquet"))
    guard.check(f"file:{table}/inner/f.parquet")  # resolves inside the table
    reason = _refusal(guard, str(table / "escape" / "precious"))
    assert reason == f"resolves outside the table location (to {outside / 'precious'})"
    # A file symlink pointing out is fine: unlinking removes the link only.
    (table / "data" / "link").symlink_to(outside / "precious")
    guard.check(str(table / "data" / "link"))


def test_guard_resolves_every_check_afresh_but_never_the_file(tmp_path: Path) -> None:
    # Parent directories are resolved on every check, never from an earlier one: a
    # directory checked once and then swapped for a link is judged as it is now.
    table = tmp_path / "wh" / "t"
    outside = tmp_path / "elsewhere"
    _touch(outside / "precious")
    _touch(table / "data" / "f.parquet")
    (table / "data" / "link").symlink_to(outside / "precious")
    (table / "data" / "escape").symlink_to(outside, target_is_directory=True)
    (table / "data" / "up").symlink_to(tmp_path / "wh", target_is_directory=True)
    guard = PathGuard.for_table(str(table), {}, StorageConfig())
    guard.check(str(table / "data" / "f.parquet"))
    # A file symlink is not followed...
    guard.check(str(table / "data" / "link"))
    guard.check(str(table / "data" / "absent.parquet"))
    # ...while an escaping directory symlink is refused, each time.
    for name in ("precious", "other"):
        reason = _refusal(guard, str(table / "data" / "escape" / name))
        assert reason == f"resolves outside the table location (to {outside / name})"
    # A directory that resolves to the table location's parent: "t" is the root
    # itself, never strictly inside it.
    assert _refusal(guard, str(table / "data" / "up" / "t")).startswith(
        "resolves outside the table location"
    )
    # The checked data/ swapped for a link out of the table: the same path is refused.
    shutil.rmtree(table / "data")
    (table / "data").symlink_to(outside, target_is_directory=True)
    reason = _refusal(guard, str(table / "data" / "precious"))
    assert reason == f"resolves outside the table location (to {outside / 'precious'})"


def test_guard_symlinked_table_location(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _touch(real / "t" / "f")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    guard = PathGuard.for_table(str(tmp_path / "alias" / "t"), {}, StorageConfig())
    guard.check(str(tmp_path / "alias" / "t" / "f"))


def test_guard_write_paths_are_roots() -> None:
    guard = _guard(
        {
            "write.data.path": "s3://data-bucket/tables/t/",
            "write.metadata.path": "s3://b/meta/t",
            "write.object-storage.path": "s3://objects/t",
            "write.folder-storage.path": "",
        }
    )
    guard.check("s3://data-bucket/tables/t/00/x.parquet")
    guard.check("s3://b/meta/t/v3.metadata.json")
    guard.check("s3://objects/t/a/b")
    assert _refusal(guard, "s3://data-bucket/tables/t2/x") == (
        f"outside the table locations {T}, s3://data-bucket/tables/t, s3://b/meta/t, s3://objects/t"
    )


def test_guard_allowed_prefixes_narrow() -> None:
    props = {"write.data.path": "s3://data-bucket/t"}
    guard = _guard(props, allowed=("s3://b/wh",))
    guard.check(f"{T}/data/x")
    # write.data.path lies outside every allowed prefix: it is not a root.
    assert guard.roots == (T,)
    assert _refusal(guard, "s3://data-bucket/t/x") == "other bucket 'data-bucket'"
    # A table located outside the allowed prefixes can delete nothing.
    outside = _guard(allowed=("s3://b/other",))
    assert _refusal(outside, f"{T}/data/x") == "table location is outside the allowed prefixes"
    # Whole-bucket allowed prefix, s3a spelling.
    _guard(allowed=("s3a://b",)).check(f"{T}/x")


def test_guard_allowed_prefixes_local_symlink(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    other = tmp_path / "other"
    _touch(other / "t" / "f")
    allowed.mkdir()
    (allowed / "t").symlink_to(other / "t", target_is_directory=True)
    guard = PathGuard.for_table(
        str(allowed / "t"), {}, StorageConfig(allowed_prefixes=(str(allowed),))
    )
    assert _refusal(guard, str(allowed / "t" / "f")).startswith(
        "resolves outside the allowed prefixes"
    )


def test_guard_refuses_bucket_root_location() -> None:
    with pytest.raises(GuardRefusal, match="bucket or filesystem root"):
        _guard(location="s3://b/")
    with pytest.raises(GuardRefusal, match=r"'\.\.' segment"):
        _guard(location="s3://b/wh/../x")


def test_guard_split() -> None:
    ok, refused = _guard().split([f"{T}/a", "s3://x/a", f"{T}/b", f"{T}/../c"])
    assert ok == [f"{T}/a", f"{T}/b"]
    assert [(r.path, r.reason) for r in refused] == [
        ("s3://x/a", "other bucket 'x'"),
        (f"{T}/../c", "'..' segment"),
    ]


def test_guard_and_delete_together(tmp_path: Path) -> None:
    table = tmp_path / "t"
    inside = _touch(table / "data" / "a.parquet")
    sibling = _touch(tmp_path / "t2" / "a.parquet")
    guard = PathGuard.for_table(str(table), {}, StorageConfig())
    ok, refused = guard.split([str(inside), str(sibling)])
    report = bulk_delete(StorageResolver(), ok)
    assert report.deleted == [str(inside)]
    assert [r.path for r in refused] == [str(sibling)]
    assert sibling.exists()
    assert os.path.exists(table)
