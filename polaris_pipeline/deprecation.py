"""Names that moved: still importable from their old module for a release, with a warning."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved_names(old_module: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module``: each name of ``homes`` is imported from
    its new module (its value) with a ``DeprecationWarning`` naming that module; any other
    name is an ``AttributeError``, as for a module without one."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        warnings.warn(
            f"{old_module}.{name} is deprecated: import it from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)

    return __getattr__
