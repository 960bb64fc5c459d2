"""A number's bounds, each checked with one message: the settings' and the engine's."""

from __future__ import annotations

import math


def finite(value: float, what: str) -> float:
    """``value``; ValueError "<what> must be a finite number" for NaN or an infinity."""
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number")
    return value


def at_least(value: float, bound: float, what: str) -> None:
    """ValueError "<what> must be at least <bound>" when ``value`` is below ``bound``."""
    if value < bound:
        raise ValueError(f"{what} must be at least {bound:g}")
