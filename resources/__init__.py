"""This code location's resources: ``resources.location`` reads them from the environment
(the library's reading, ``deployment_from_env``) for ``definitions.py``.

The library names this package re-exported in earlier releases still import from here,
with a ``DeprecationWarning`` naming the library module to import them from.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "PolarisMetastoreResource": "polaris_pipeline.dagster.resources",
        "PolarisStorageResource": "polaris_pipeline.dagster.resources",
        "SweeperSettings": "polaris_pipeline.dagster.resources",
    },
)
