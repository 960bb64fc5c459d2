"""The whole configuration, its sections nested, read from the environment and from flags.

Each variable is spelt from its field: ``POLARIS_PIPELINE_`` + the section's prefix +
the field's name (``sweeper.interval_seconds`` is
``POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS``), unless the field names its own
(``json_schema_extra={"env": ...}``: the metastore URL, the storage config) or none.

The executor, guard and restore sections are read the same way, but by the process that uses
them (``executor_settings``, ``setting_from_env``): they are not blocks of
``PipelineSettings``. Nothing outside ``settings/`` reads a setting's variable.

An unset or blank variable means the default. A bad value is a ``SettingsError``
naming the variable (or the flag) and what is wrong with it.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Mapping
from types import NoneType, UnionType
from typing import Any

from pydantic import Field, ValidationError

from polaris_pipeline.settings.alerts import AlertSection
from polaris_pipeline.settings.backlog import BacklogSection
from polaris_pipeline.settings.executor import ExecutorSection
from polaris_pipeline.settings.guard import GuardSection
from polaris_pipeline.settings.leaks import LeakSection
from polaris_pipeline.settings.metastore import MetastoreSection
from polaris_pipeline.settings.restore import RestoreSection
from polaris_pipeline.settings.retention import RetentionSection
from polaris_pipeline.settings.section import ENV_PREFIX, Section, SettingsError
from polaris_pipeline.settings.storage import StorageSection
from polaris_pipeline.settings.sweeper import SweeperSection
from polaris_pipeline.storage.redact import looks_secret, redact


class PipelineSettings(Section):
    """What the engine, the CLI and the code location are configured with, by section."""

    metastore: MetastoreSection = Field(default_factory=MetastoreSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    sweeper: SweeperSection = Field(default_factory=SweeperSection)
    backlog: BacklogSection = Field(default_factory=BacklogSection)
    retention: RetentionSection = Field(default_factory=RetentionSection)
    leaks: LeakSection = Field(default_factory=LeakSection)
    alerts: AlertSection = Field(default_factory=AlertSection)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PipelineSettings:
        """The defaults, with every variable of ``ENV_VARIABLES`` that is set and not blank."""
        env = os.environ if environ is None else environ
        return cls.model_validate({name: section_from_env(name, env) for name in _SECTIONS})

    def with_overrides(
        self,
        changes: Mapping[str, Mapping[str, Any]],
        labels: Mapping[tuple[str, str], str] | None = None,
    ) -> PipelineSettings:
        """These settings with each change that is not None (flags beat the environment).

        ``changes``: section -> field -> value; ``labels`` names each (section, field)
        as the user wrote it (a flag), for the error of a bad value.
        """
        sections: dict[str, Section] = {}
        for section, fields in changes.items():
            current: Section = getattr(self, section)
            update = {k: v for k, v in fields.items() if v is not None}
            if not update:
                continue
            try:
                sections[section] = type(current)(**{**current.model_dump(), **update})
            except ValidationError as exc:
                field = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
                label = (labels or {}).get((section, field), f"{section}.{field}")
                value = update.get(field)
                shown = ",".join(value) if isinstance(value, list | tuple) else value
                raise SettingsError(f"{label} {shown!r}: {_message(exc)}") from None
        return self.model_copy(update=sections)


def section_from_env(section: str, environ: Mapping[str, str] | None = None) -> Section:
    """One section, read from the environment (``from_env``'s reading, for a front end
    that needs only that section)."""
    return _read(section, _fields(section), environ)


def setting_from_env(section: str, field: str, environ: Mapping[str, str] | None = None) -> Any:
    """One field of a section, read from the environment and checked alone (a bad value
    of another field of the section is not this caller's error)."""
    name = env_variable(section, field)
    fields = [(field, name)] if name is not None else []
    return getattr(_read(section, fields, environ), field)


def executor_settings(environ: Mapping[str, str] | None = None) -> ExecutorSection:
    """The executor section, read from the environment of the process that runs the steps."""
    section = section_from_env("executor", environ)
    assert isinstance(section, ExecutorSection)
    return section


def restore_settings(environ: Mapping[str, str] | None = None) -> RestoreSection:
    """The restore section, read from the environment of the command or op that restores."""
    section = section_from_env("restore", environ)
    assert isinstance(section, RestoreSection)
    return section


def _read(
    section: str, fields: list[tuple[str, str]], environ: Mapping[str, str] | None
) -> Section:
    env = os.environ if environ is None else environ
    section_type = _READABLE[section]
    values: dict[str, Any] = {}
    raws: dict[str, tuple[str, str]] = {}
    for field, name in fields:
        found = _lookup(env, name, section, field)
        if found is None:
            continue
        variable, raw = found
        try:
            values[field] = _parse(section_type.model_fields[field].annotation, raw)
        except ValueError as exc:
            raise _named(variable, raw, section, field, str(exc)) from None
        raws[field] = (variable, raw)
    try:
        return section_type(**values)
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        variable, raw = raws.get(field, (_section_variables(section), ""))
        raise _named(variable, raw, section, field, _message(exc)) from None


_SECTIONS: dict[str, type[Section]] = {
    "metastore": MetastoreSection,
    "storage": StorageSection,
    "sweeper": SweeperSection,
    "backlog": BacklogSection,
    "retention": RetentionSection,
    "leaks": LeakSection,
    "alerts": AlertSection,
}
# Read by the process that uses them, not blocks of PipelineSettings (see the module doc).
_PROCESS_SECTIONS: dict[str, type[Section]] = {
    "executor": ExecutorSection,
    "guard": GuardSection,
    "restore": RestoreSection,
}
_READABLE = {**_SECTIONS, **_PROCESS_SECTIONS}
# The words a section's variables start with, after POLARIS_PIPELINE_.
_ENV_SECTION = {
    "metastore": "",
    "storage": "STORAGE_",
    "sweeper": "SWEEPER_",
    "backlog": "BACKLOG_",
    "retention": "RETENTION_",
    "leaks": "LEAK_",
    "alerts": "ALERT_",
    "executor": "",
    "guard": "GUARD_",
    "restore": "RESTORE_",
}


def env_variable(section: str, field: str) -> str | None:
    """The variable that sets ``section.field``; None: none does."""
    info = _READABLE[section].model_fields[field]
    extra = info.json_schema_extra
    if isinstance(extra, dict) and "env" in extra:
        named = extra["env"]
        return named if isinstance(named, str) else None
    return f"{ENV_PREFIX}{_ENV_SECTION[section]}{field.upper()}"


def _fields(section: str) -> list[tuple[str, str]]:
    names = [(f, env_variable(section, f)) for f in _READABLE[section].model_fields]
    return [(f, n) for f, n in names if n is not None]


# Every variable the settings read, by (section, field): the process sections' too.
ENV_VARIABLES: dict[tuple[str, str], str] = {
    (section, field): name for section in _READABLE for field, name in _fields(section)
}


def _lookup(env: Mapping[str, str], name: str, section: str, field: str) -> tuple[str, str] | None:
    raw = env.get(name)
    return (name, raw) if raw is not None and raw.strip() else None


def _parse(annotation: Any, raw: str) -> Any:
    """``raw`` as the field's type wants it: the words of a variable are not JSON."""
    kind = annotation
    if isinstance(kind, UnionType) or typing.get_origin(kind) is typing.Union:
        kinds = [k for k in typing.get_args(kind) if k is not NoneType]
        kind = kinds[0]
    origin = typing.get_origin(kind)
    text = raw.strip()
    if origin is list:
        items = list(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
        if not items:
            raise ValueError("names nothing (a comma-separated list, e.g. POLARIS,TEST)")
        return items
    if origin is dict:
        try:
            value = json.loads(text)
        except ValueError:
            raise ValueError('not JSON (e.g. {"TEST": {"lease_timeout_ms": 60000}})') from None
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        return value
    if kind is bool:
        return _boolean(text)
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError("not an integer") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError("not a number") from None
    return text


def _boolean(text: str) -> bool:
    value = text.lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError("not a boolean (true or false)")


def _message(exc: ValidationError) -> str:
    """The first problem, without the field the variable or flag already names."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    inner = ".".join(str(part) for part in first["loc"][1:])
    return f"{inner}: {message}" if inner else message


def _named(variable: str, raw: str, section: str, field: str, message: str) -> SettingsError:
    # Name the variable; a URL's value may hold a password, and a secret (a field kept out
    # of the repr) is never shown.
    info = _READABLE[section].model_fields.get(field)
    secret = field == "url" or looks_secret(field) or (info is not None and info.repr is False)
    shown = "" if secret or not raw else f"={redact(raw.strip())!r}"
    return SettingsError(f"{variable}{shown}: {message}")


def _section_variables(section: str) -> str:
    return " / ".join(name for _, name in _fields(section))
