"""Argument types shared by the CLI's parsers (the commands of ``parser.py``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from polaris_pipeline.settings import PipelineSettings
from polaris_pipeline.settings.section import nearest


def text(what: str) -> Callable[[str], str]:
    """An argparse type: text that is not empty (an empty value would silently mean
    "unset" to the settings or match nothing)."""

    def parse(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"an empty value: {what} is expected")
        return value

    return parse


def assignment(text: str) -> tuple[str, str, str]:
    """An argparse type: ``section.field=value``, one setting of ``PipelineSettings`` named
    as its YAML block and field are (``sweeper.interval_seconds=30``); the value is read
    later, by the rule its variable is read by."""
    name, equals, value = text.partition("=")
    section, dot, field = name.strip().partition(".")
    if not equals or not dot:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a setting is section.field=value, e.g. sweeper.interval_seconds=30"
        )
    sections = PipelineSettings.model_fields
    if section not in sections:
        raise argparse.ArgumentTypeError(
            f"{name.strip()!r}: no section {section!r}{nearest(section, sections)}"
        )
    fields = PipelineSettings.section_type(section).model_fields
    if field not in fields:
        raise argparse.ArgumentTypeError(
            f"{name.strip()!r}: no setting {field!r} in {section}{nearest(field, fields)}"
        )
    return section, field, value
