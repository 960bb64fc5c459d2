"""``build_defs``' resources: one statement of them (``DeploymentResources``), the
public keyword arguments that take them, and their defaults."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
from dagster import EnvVar

from polaris_pipeline.dagster import (
    LeakSettings,
    RetentionSettings,
    SweeperSettings,
    build_defs,
    build_defs_from_env,
)
from polaris_pipeline.dagster.definitions import (
    DeploymentResources,
    build_resources,
    deployment_from_env,
)
from polaris_pipeline.settings import URL_ENV

RESOURCE_KEYS = ["metastore", "storage", "sweeper", "backlog", "retention", "leaks", "restore"]
# build_defs' signature as users call it: keyword-only, in this order.
PUBLIC_PARAMETERS = [
    *RESOURCE_KEYS,
    "executor",
    "io_manager",
    "alerts",
    "translator",
]


def _resources(defs: Any) -> dict[str, Any]:
    return dict(defs.resources or {})


def _dumps(resources: dict[str, Any]) -> dict[str, Any]:
    return {key: value.model_dump() for key, value in resources.items()}


def test_build_defs_keeps_its_public_keyword_arguments() -> None:
    parameters = inspect.signature(build_defs).parameters
    assert list(parameters) == PUBLIC_PARAMETERS
    assert all(
        p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None for p in parameters.values()
    )


def test_build_defs_resource_arguments_are_the_deployment_resources_fields() -> None:
    """The one restatement there is (the signature users type-check against) agrees with
    ``DeploymentResources``: same names, same types, None for "its default"."""
    fields = dataclasses.fields(DeploymentResources)
    assert [f.name for f in fields] == RESOURCE_KEYS
    assert all(f.default is None for f in fields)
    hints = typing.get_type_hints(build_defs)
    field_types = typing.get_type_hints(DeploymentResources)
    assert {key: hints[key] for key in RESOURCE_KEYS} == field_types


def test_nothing_given_is_every_resource_at_its_default() -> None:
    resources = DeploymentResources().by_key()
    assert list(resources) == RESOURCE_KEYS
    # The metastore's URL is a reference to its variable, never read here.
    assert resources["metastore"].url == EnvVar(URL_ENV)
    assert isinstance(resources["metastore"].url, EnvVar)
    assert _dumps(_resources(build_defs())) == _dumps(resources)
    assert _dumps(build_resources()) == _dumps(resources)


def test_a_resource_given_is_the_one_deployed_beside_the_others_defaults() -> None:
    sweeper = SweeperSettings(interval_seconds=5)
    leaks = LeakSettings(min_age_days=30)
    resources = _resources(build_defs(sweeper=sweeper, leaks=leaks))
    assert resources["sweeper"] is sweeper
    assert resources["leaks"] is leaks
    defaults = DeploymentResources().by_key()
    others = [key for key in RESOURCE_KEYS if key not in ("sweeper", "leaks")]
    assert {k: resources[k].model_dump() for k in others} == {
        k: defaults[k].model_dump() for k in others
    }


def test_build_defs_from_env_deploys_the_resources_deployment_from_env_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {
        URL_ENV: f"sqlite:///{tmp_path}/unused.db",
        "POLARIS_PIPELINE_REALMS": "POLARIS,TEST",
        "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS": "7",
    }
    deployed = _resources(build_defs_from_env(env))
    read = deployment_from_env(env).resources
    assert _dumps(deployed) == _dumps(read)
    # The environment reached them (not merely the defaults).
    assert deployed["metastore"].realms == ["POLARIS", "TEST"]
    assert deployed["retention"] != RetentionSettings()


def test_an_unknown_keyword_argument_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'realm'"):
        build_defs(realm="POLARIS")  # type: ignore[call-arg]
