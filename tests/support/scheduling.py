"""How ``make test`` spreads the suite over pytest-xdist workers (``--dist loadgroup``).

- A module whose module-scoped servers or builds should start once runs all its tests
  on one worker (``ONE_WORKER_MODULES``); every other test is a unit of its own.
  xdist's own ``xdist_group`` marker cannot say this here: pytest-xdist 3.8 renames
  ``item._nodeid``, which pytest 9 no longer reads, so the marker groups nothing.
- Tests marked ``slow`` are collected first, so the long ones start while there is
  still other work to fill the remaining workers, instead of ending the run alone.
"""

from __future__ import annotations

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

ONE_WORKER_MODULES = frozenset(
    {
        "tests/browser/test_ui.py",  # one `dagster dev` and one browser for the module
        "tests/test_java_spark_purge.py",  # Spark writes the tables once (half a minute)
        "tests/test_java_manifest_codec.py",  # one JVM judge
        "tests/test_polaris_classes.py",  # one scenario per Polaris release, for the module
        "tests/test_polaris_oracle.py",  # three purges per table shape, for the module
        "tests/test_packaging.py",  # builds the wheel in the checkout (build/, *.egg-info)
        "tests/test_catalog_storage_azure.py",  # one Azurite
        "tests/test_catalog_storage_gcs.py",  # one fake-gcs-server
        "tests/test_catalog_storage_s3.py",  # one IAM-enforcing moto server
        "tests/test_restorable_clouds.py",  # one Azurite, fake-gcs-server, IAM moto each
        "tests/test_test_layout.py",  # the suite's syntax trees, parsed once
    }
)


class ModuleGroupScheduling(LoadScopeScheduling):
    """xdist's load-by-scope scheduling, a scope being a module of ONE_WORKER_MODULES
    or else a single test."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return module if module in ONE_WORKER_MODULES else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None  # another --dist: xdist's own scheduler
    return ModuleGroupScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable: the order within the slow tests and within the others is unchanged, and
    # every worker collects the same order, as xdist requires.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
