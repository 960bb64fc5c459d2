"""This repository's code location: what ``workspace.yaml`` loads.

Thin by design: everything comes from the library (``polaris_pipeline.dagster``),
configured from the environment of the code server and of the runs. The
variables (``POLARIS_METASTORE_URL``, ``POLARIS_PIPELINE_*``) are listed in
docs/dagster.md; the URL is read through ``EnvVar``, so the UI shows the
variable's name, never the URL.
"""

from polaris_pipeline.dagster import build_defs_from_env

# The only Definitions object at module scope: the code location.
defs = build_defs_from_env()
