"""The sections read from the environment, by pydantic-settings.

Every variable is ``POLARIS_PIPELINE_`` + its section's word + the field's name
(``sweeper.interval_seconds`` is ``POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS``), unless
the field names its own (``json_schema_extra={"env": ...}``: the metastore URL, the
storage config) or none (``{"env": None}``: the inline storage rules).

pydantic-settings finds and decodes the values (a mapping is JSON); two rules are
ours: a blank variable is unset, and a list is comma-separated words, not JSON. The
section then checks them, and a bad value is one ``SettingsError`` line naming the
variable. A variable under the prefix that names no setting is logged as a warning,
once per process, with the nearest name: it may be a typo.
"""

from __future__ import annotations

import json
import logging
import os
import typing
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import Any

from pydantic import Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from polaris_pipeline.settings.alerts import AlertSection
from polaris_pipeline.settings.backlog import BacklogSection
from polaris_pipeline.settings.executor import ExecutorSection
from polaris_pipeline.settings.guard import GuardSection
from polaris_pipeline.settings.leaks import LeakSection
from polaris_pipeline.settings.metastore import MetastoreSection
from polaris_pipeline.settings.restore import RestoreSection
from polaris_pipeline.settings.retention import RetentionSection
from polaris_pipeline.settings.section import Section, SettingsError, first_problem, nearest
from polaris_pipeline.settings.storage import StorageSection
from polaris_pipeline.settings.sweeper import SweeperSection
from polaris_pipeline.storage.redact import looks_secret, redact

_log = logging.getLogger(__name__)

# The one prefix of every variable the package reads (but the metastore URL's).
ENV_PREFIX = "POLARIS_PIPELINE_"

# Every section the environment sets, and the word its variables start with after the
# prefix. The executor section is read by the process that runs the steps
# (settings/pipeline.py), the others are blocks of PipelineSettings.
SECTIONS: dict[str, tuple[type[Section], str]] = {
    "metastore": (MetastoreSection, ""),
    "storage": (StorageSection, "STORAGE_"),
    "sweeper": (SweeperSection, "SWEEPER_"),
    "backlog": (BacklogSection, "BACKLOG_"),
    "retention": (RetentionSection, "RETENTION_"),
    "leaks": (LeakSection, "LEAK_"),
    "alerts": (AlertSection, "ALERT_"),
    "executor": (ExecutorSection, ""),
    "guard": (GuardSection, "GUARD_"),
    "restore": (RestoreSection, "RESTORE_"),
}

# Variables under the prefix that are no setting: the test suite's, the benchmark's and
# the demo's own (they configure those tools, never the engine).
_TOOL_PREFIXES = ("TEST_", "BENCH_", "DEMO_", "CHROMIUM")

_UNSET = object()


def _own_variable(info: FieldInfo) -> object:
    """The variable a field names itself: a name, None (no variable), or _UNSET."""
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "env" in extra:
        return extra["env"]
    return _UNSET


def env_variable(section: str, field: str) -> str | None:
    """The variable that sets ``section.field``; None: none does."""
    section_type, word = SECTIONS[section]
    own = _own_variable(section_type.model_fields[field])
    if own is _UNSET:
        return f"{ENV_PREFIX}{word}{field.upper()}"
    return own if isinstance(own, str) else None


def _variables(section: str) -> dict[str, str]:
    fields = SECTIONS[section][0].model_fields
    names = {field: env_variable(section, field) for field in fields}
    return {field: name for field, name in names.items() if name is not None}


# Every variable the settings read, by (section, field).
ENV_VARIABLES: dict[tuple[str, str], str] = {
    (section, field): name for section in SECTIONS for field, name in _variables(section).items()
}


def _environment_model(section: str) -> type[BaseSettings]:
    """The section's fields as pydantic-settings reads them: its prefix, and an alias
    for a field that names its own variable. Only read from, never validated: the
    section itself checks what it finds."""
    section_type, word = SECTIONS[section]
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {}
    for field in _variables(section):
        info = section_type.model_fields[field]
        annotations[field] = info.annotation
        own = _own_variable(info)
        namespace[field] = Field(None, validation_alias=own) if isinstance(own, str) else None
    namespace["__annotations__"] = annotations
    namespace["model_config"] = SettingsConfigDict(env_prefix=ENV_PREFIX + word, extra="ignore")
    return type(f"{section_type.__name__}Environment", (BaseSettings,), namespace)


_MODELS = {section: _environment_model(section) for section in SECTIONS}


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping, blank values unset."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._given = environ  # read by _load_env_vars, which the base's __init__ calls
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._given.items() if v is not None and v.strip()}

    def prepare_field_value(
        self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool
    ) -> Any:
        # The words of a variable are not JSON: a list is comma-separated.
        if isinstance(value, str) and is_list(field.annotation):
            items = list(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))
            if not items:
                raise ValueError("names nothing (a comma-separated list, e.g. POLARIS,TEST)")
            return items
        if isinstance(value, str) and not _is_mapping(field.annotation):
            value = value.strip()
            number = optional_inner(field.annotation)
            if number in (bool, int, float):
                # Typed here, as pydantic reads a string: a section's own rule may refuse
                # text (a quoted "7" in YAML is a typo, a variable's 7 is not).
                try:
                    return TypeAdapter(number).validate_python(value)
                except ValidationError as exc:
                    raise ValueError(first_problem(exc)) from None
        try:
            return super().prepare_field_value(field_name, field, value, value_is_complex)
        except ValueError:
            raise ValueError('not JSON (e.g. {"TEST": {"lease_timeout_ms": 60000}})') from None


def optional_inner(annotation: Any) -> Any:
    """``X`` of an ``X | None`` annotation; any other annotation as it is."""
    if isinstance(annotation, UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [k for k in typing.get_args(annotation) if k is not NoneType]
        return kinds[0] if len(kinds) == 1 else annotation
    return annotation


def is_list(annotation: Any) -> bool:
    """Whether a field of ``annotation`` holds a list (optional or not)."""
    return typing.get_origin(optional_inner(annotation)) is list


def _is_mapping(annotation: Any) -> bool:
    return typing.get_origin(optional_inner(annotation)) is dict


def decode_text(section: str, field: str, raw: str) -> Any:
    """``raw`` as the variable of ``section.field`` would be read (a list comma-separated,
    a mapping or a field with no variable JSON, a number typed): the CLI's ``--set``
    values are read by this one rule. ValueError: it cannot be."""
    model = _MODELS[section]
    info = model.model_fields.get(field)
    if info is None:  # no variable (the inline storage rules): JSON, as YAML would give
        try:
            return json.loads(raw)
        except ValueError:
            raise ValueError("not JSON") from None
    return _Environment(model, {}).prepare_field_value(field, info, raw, False)


def read_section(
    section: str, environ: Mapping[str, str] | None = None, only: str | None = None
) -> Section:
    """``section`` from the environment: its defaults, and each variable set and not blank.

    ``only``: read that field alone (a bad value of another field of the section is
    not this caller's error).
    """
    env = os.environ if environ is None else environ
    section_type = SECTIONS[section][0]
    model = _MODELS[section]
    source = _Environment(model, env)
    values: dict[str, Any] = {}
    raws: dict[str, str] = {}
    for field, info in model.model_fields.items():
        if only is not None and field != only:
            continue
        raw, _, complex_value = source.get_field_value(info, field)
        if raw is None:
            continue
        raws[field] = raw
        try:
            values[field] = source.prepare_field_value(field, info, raw, complex_value)
        except ValueError as exc:
            raise named_error(section, field, raw, str(exc)) from None
    try:
        return section_type(**values)
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        field = str(loc[0]) if loc else ""
        if field in raws:
            raise named_error(section, field, raws[field], first_problem(exc)) from None
        # A rule over several fields (the storage's one source): name them all.
        names = " / ".join(_variables(section).values())
        raise SettingsError(f"{names}: {first_problem(exc)}") from None


def is_secret(section: str, field: str) -> bool:
    """Whether an error never shows the value of ``section.field``: a URL's (it may hold a
    password) or a secret's (a field kept out of the repr)."""
    info = SECTIONS[section][0].model_fields.get(field)
    return field == "url" or looks_secret(field) or (info is not None and info.repr is False)


def named_error(section: str, field: str, raw: str, message: str) -> SettingsError:
    """``message`` as the error of ``section.field``'s variable, set to ``raw`` (shown
    unless ``is_secret``)."""
    variable = env_variable(section, field) or f"{section}.{field}"
    shown = "" if is_secret(section, field) or not raw else f"={redact(raw.strip())!r}"
    return SettingsError(f"{variable}{shown}: {message}")


_warned: set[str] = set()


def warn_unknown_variables(
    environ: Mapping[str, str] | None = None, warn: Callable[[str], None] | None = None
) -> list[str]:
    """A warning (once per process) for each variable under the prefix that names no
    setting, with the nearest name: logged, or given to ``warn`` (the CLI says it on
    stderr, whose log is silent without -v); returns the names warned of now."""
    env = os.environ if environ is None else environ
    known = set(ENV_VARIABLES.values())
    unknown = [
        name
        for name in env
        if name.upper().startswith(ENV_PREFIX)
        and name.upper() not in known
        and not name.upper().removeprefix(ENV_PREFIX).startswith(_TOOL_PREFIXES)
        and name not in _warned
    ]
    for name in sorted(unknown):
        _warned.add(name)
        hint = nearest(name.upper(), known)
        (warn or _log.warning)(f"{name} names no setting of polaris-pipeline and is ignored{hint}")
    return sorted(unknown)
