"""A number's bounds, each checked with one message: the settings' and the engine's."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# Polaris's ids, times and counts are Java longs: a larger number names nothing, and
# SQLite refuses to bind it.
JAVA_LONG_MAX = 2**63 - 1
# The most days a time of that kind can hold in milliseconds (a hold, a reclaim's age).
JAVA_LONG_MAX_DAYS = JAVA_LONG_MAX // 86_400_000


def finite(value: float, what: str) -> float:
    """``value``; ValueError "<what> must be a finite number" for NaN or an infinity."""
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number")
    return value


def at_least(value: float, bound: float, what: str) -> None:
    """ValueError "<what> must be at least <bound>" when ``value`` is below ``bound``."""
    if value < bound:
        raise ValueError(f"{what} must be at least {bound:g}")


def at_most(value: float, bound: float, what: str) -> None:
    """ValueError "<what> must be at most <bound>" when ``value`` is above ``bound``."""
    if value > bound:
        shown = f"{bound:d}" if isinstance(bound, int) else f"{bound:g}"
        raise ValueError(f"{what} must be at most {shown}")


def minimum(bound: float, what: str) -> Callable[[Any], Any]:
    """A field's validator: ``at_least`` (a float first ``finite``); None (unset) passes."""

    def check(value: Any) -> Any:
        if value is not None:
            at_least(finite(value, what) if isinstance(value, float) else value, bound, what)
        return value

    return check
