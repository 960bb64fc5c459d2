"""``deploy/dagster.yaml``, the instance file operators copy, in a test's DAGSTER_HOME."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

DEPLOY_YAML = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


def deploy_config() -> dict[str, Any]:
    config = yaml.safe_load(DEPLOY_YAML.read_text())
    assert isinstance(config, dict)
    return config


def dagster_home_from_deploy(tmp_path: Path, replace: dict[str, Any] | None = None) -> Path:
    """A DAGSTER_HOME holding deploy/dagster.yaml: copied as is, or with sections replaced."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    if replace:
        (home / "dagster.yaml").write_text(yaml.safe_dump({**deploy_config(), **replace}))
    else:
        shutil.copy(DEPLOY_YAML, home / "dagster.yaml")
    return home
