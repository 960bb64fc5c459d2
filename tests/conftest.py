"""Shared fixtures live in ``tests/support``; each module there is one concern."""

pytest_plugins = [
    "tests.support.metastore",
    "tests.support.s3",
    "tests.support.iceberg",
    "tests.support.iceberg_rest",
    "tests.support.dagster",
    "tests.support.daemon_fixtures",
    "tests.support.scheduling",
    "tests.support.polaris_report",
]
