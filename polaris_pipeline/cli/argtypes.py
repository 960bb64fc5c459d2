"""Argument types shared by the CLI's parsers (``parser.py`` and the commands that add
their own, such as ``restore.py``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def text(what: str) -> Callable[[str], str]:
    """An argparse type: text that is not empty (an empty value would silently mean
    "unset" to the settings or match nothing)."""

    def parse(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"an empty value: {what} is expected")
        return value

    return parse
