"""This code location's resources: ``resources.location`` reads them from the environment
(the library's reading, ``deployment_from_env``) for ``definitions.py``.

Its re-exports of earlier releases still import, with a ``DeprecationWarning``.
"""

from polaris_pipeline.deprecation import moved_names as _moved_names

__getattr__ = _moved_names(
    __name__,
    {
        "polaris_pipeline.dagster.resources": (
            "PolarisMetastoreResource",
            "PolarisStorageResource",
            "SweeperSettings",
        ),
    },
)
