"""The storage config refuses, when it loads, what its filesystem would not accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import s3fs
from fsspec.implementations.local import LocalFileSystem

from polaris_pipeline.errors import StorageConfigError, StorageError
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.options import BASE_OPTIONS, accepted_options, filesystem_class


def config(prefix: str, options: dict[str, Any]) -> StorageConfig:
    return StorageConfig.from_mapping({"locations": [{"prefix": prefix, "options": options}]})


def test_s3_accepts_its_own_parameters_fsspec_s_and_the_session_s() -> None:
    accepted = accepted_options(s3fs.S3FileSystem)
    assert {"endpoint_url", "key", "secret", "client_kwargs", "config_kwargs"} <= accepted
    assert "profile" in accepted  # s3fs hands **kwargs to aiobotocore's session
    assert accepted >= BASE_OPTIONS
    # Not AsyncFileSystem's batch_size: s3fs's **kwargs never reach its base class.
    assert "batch_size" not in accepted


def test_the_guide_s_s3_options_load() -> None:
    loaded = config(
        "s3://lakehouse/warehouse",
        {
            "endpoint_url": "https://s3.example",
            "key": "k",
            "secret": "s",
            "client_kwargs": {"region_name": "eu-central-1"},
            "config_kwargs": {"retries": {"max_attempts": 1}},
            "use_listings_cache": False,
        },
    )
    assert loaded.rules[0].options["client_kwargs"] == {"region_name": "eu-central-1"}


@pytest.mark.parametrize(
    ("prefix", "options", "message"),
    [
        ("s3://b", {"endpoint": "x"}, "S3FileSystem (s3://) accepts no option 'endpoint'; did you"),
        ("s3a://b/wh", {"region_name": "x"}, "botocore client options go under client_kwargs"),
        ("s3://b", {"batch_size": 3}, "accepts no option 'batch_size'"),
        ("/data/wh", {"anon": True}, "LocalFileSystem (file://) accepts no option 'anon'"),
        ("file:///data", {"auto_mkdirs": True}, "did you mean 'auto_mkdir'?"),
    ],
)
def test_an_option_the_filesystem_does_not_take_is_refused(
    prefix: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(StorageConfigError) as err:
        config(prefix, options)
    assert message in str(err.value) and "locations[0].options" in str(err.value)


def test_local_options_and_base_options_load() -> None:
    assert accepted_options(LocalFileSystem) == BASE_OPTIONS | {"auto_mkdir"}
    assert config("/data", {"auto_mkdir": False, "skip_instance_cache": True}).rules


def test_gcs_and_azure_are_checked_like_the_others() -> None:
    assert config("gs://bucket/wh", {"token": "anon", "project": "p"}).rules
    with pytest.raises(StorageConfigError, match="accepts no option 'anything'"):
        config("gs://bucket/wh", {"token": "anon", "anything": 1})
    assert config("abfss://c@acct.dfs.core.windows.net/wh", {"account_name": "acct"}).rules


def test_an_implementation_that_is_not_installed_is_not_checked() -> None:
    # Nothing to check against; using it fails with "install <package>" instead.
    with pytest.raises(StorageError, match="install ocifs"):
        filesystem_class("oci")
    assert config("oci://bucket@ns/wh", {"anything": 1}).rules[0].options == {"anything": 1}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"env": "PP_OPT_SET", "default": "x"}, "unknown key 'default' beside 'env'"),
        ({"env": "PP_OPT_SET", "Env": "x"}, "unknown key 'Env' beside 'env'"),
        ({"env": ""}, "'env' must name a variable"),
        ({"env": "PP_OPT_UNSET"}, "environment variable 'PP_OPT_UNSET' is not set"),
    ],
)
def test_env_indirection_takes_the_one_key(
    value: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PP_OPT_SET", "sekrit")
    monkeypatch.delenv("PP_OPT_UNSET", raising=False)
    with pytest.raises(StorageConfigError) as err:
        config("s3://b", {"secret": value})
    assert message in str(err.value) and "sekrit" not in str(err.value)
    assert "locations[0].options.secret" in str(err.value)


def test_a_file_with_a_bad_option_fails_when_loaded(tmp_path: Path) -> None:
    path = tmp_path / "storage.yaml"
    path.write_text("locations:\n  - prefix: s3://b\n    options: {endpoint: http://x}\n")
    with pytest.raises(StorageConfigError, match=rf"storage config {path}: .*'endpoint'"):
        StorageConfig.load(path)
