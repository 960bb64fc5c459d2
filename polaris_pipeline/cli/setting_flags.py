"""The command line's flags for settings, generated from the schema.

A flag is its field's name, dashed (``--lease-timeout-ms``), but for five that keep
the names every example uses; its help is the field's description with its variable
and default; its value is read as the variable is (``settings/env.py``) and checked
by the section's own rule when the command line is parsed, so a bad value is
argparse's one line naming the flag. ``settings_for`` (context.py) applies them.
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from polaris_pipeline.settings import PipelineSettings, env_variable
from polaris_pipeline.settings.env import decode_text, is_list, optional_inner
from polaris_pipeline.settings.section import first_problem

# Names older than the rule, kept: every example and script uses them.
_NAMES = {
    ("metastore", "url"): "--metastore",
    ("metastore", "realms"): "--realm",
    ("storage", "config_path"): "--storage-config",
    ("leaks", "catalogs"): "--catalog",
    ("guard", "bound_s"): "--guard-bound-s",
}
# Where argparse keeps a setting's value: "setting:section.field".
_DEST = "setting:"
_DEFAULTS = PipelineSettings()


def flag_name(section: str, field: str) -> str:
    """The flag that sets ``section.field``."""
    return _NAMES.get((section, field), "--" + field.replace("_", "-"))


def add_setting(
    parser: argparse.ArgumentParser,
    section: str,
    field: str,
    *,
    metavar: str | None = None,
    default: str | None = None,
) -> None:
    """The flag of ``section.field`` on ``parser``; ``default`` says what unset means
    when the field's own default does not say it (``every realm with tasks``)."""
    info = PipelineSettings.section_type(section).model_fields[field]
    repeat = is_list(info.annotation)
    choices = _choices(info.annotation)
    value = getattr(getattr(_DEFAULTS, section), field)
    shown = default or ("none" if value is None else f"{value:g}" if _is_number(value) else value)
    help_text = f"{info.description} (default: ${env_variable(section, field)}, else {shown})"
    parser.add_argument(
        flag_name(section, field),
        dest=f"{_DEST}{section}.{field}",
        action="append" if repeat else "store",
        type=_checked(section, field),
        choices=choices,
        metavar=None if choices else metavar,
        help=help_text.replace("%", "%%") + ("; repeat for several" if repeat else ""),
    )


def flagged_settings(args: argparse.Namespace) -> tuple[dict[str, dict[str, Any]], dict[Any, str]]:
    """The settings the flags of ``args`` set (section -> field -> value), and each one's
    flag, for ``PipelineSettings.with_overrides``."""
    changes: dict[str, dict[str, Any]] = {}
    labels: dict[Any, str] = {}
    for dest, value in vars(args).items():
        if not dest.startswith(_DEST) or value is None:
            continue
        section, field = dest.removeprefix(_DEST).split(".")
        if isinstance(value, list) and all(isinstance(v, list) for v in value):
            value = [item for items in value for item in items]  # --realm A --realm B
        changes.setdefault(section, {})[field] = value
        labels[(section, field)] = flag_name(section, field)
    return changes, labels


def _checked(section: str, field: str) -> Callable[[str], Any]:
    section_type = PipelineSettings.section_type(section)

    def parse(text: str) -> Any:
        if not text.strip():
            raise argparse.ArgumentTypeError("an empty value")
        try:
            value = decode_text(section, field, text)
            return getattr(section_type(**{field: value}), field)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {first_problem(exc)}") from None
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    return parse


def _choices(annotation: Any) -> list[str] | None:
    kind = optional_inner(annotation)
    return list(typing.get_args(kind)) if typing.get_origin(kind) is typing.Literal else None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
