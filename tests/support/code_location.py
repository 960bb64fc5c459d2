"""This repository's code location imported afresh: its modules read the environment
when they load, so a test that sets one imports them again."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

# The modules that read the environment when imported, dependencies first.
LOCATION_MODULES = (
    "resources.location",
    "jobs.location",
    "sensors.location",
    "assets.location",
    "definitions",
    "celery_definitions",
)


def import_location(monkeypatch: pytest.MonkeyPatch, module: str = "definitions") -> ModuleType:
    """``module`` imported under the current environment; the modules other tests
    imported are put back afterwards."""
    for name in LOCATION_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(module)
