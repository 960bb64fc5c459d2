"""This deployment's resources, read from the environment of the code server and of the runs.

The library reads the environment (``deployment_from_env``: the same reading as
``build_defs_from_env``, docs/dagster.md), so these are the objects
``build_defs_from_env`` would build; the URL stays an ``EnvVar``, so the UI shows
the variable's name, never the URL.
"""

from typing import Any

from polaris_pipeline.dagster.definitions import EnvDeployment, deployment_from_env

# Read once, when the code location loads: the jobs and sensors are built from it too.
DEPLOYMENT: EnvDeployment = deployment_from_env()

resources: dict[str, Any] = DEPLOYMENT.resources
