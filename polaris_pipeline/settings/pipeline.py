"""The whole configuration, its sections nested, read from the environment and from flags.

The environment is read by pydantic-settings (``settings/env.py``, which spells each
variable). The executor section is read the same way, but by the process that runs the
steps (``executor_settings``): it is not a block of ``PipelineSettings``. The guard and
restore sections reach a Dagster deployment as its resources (the metastore resource's
``guard`` block, the ``restore`` resource), the CLI's flags and ``--set`` as blocks.
Nothing outside ``settings/`` reads a setting's variable.

An unset or blank variable means the default. A bad value is a ``SettingsError``
naming the variable (or the flag) and what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field, ValidationError

from polaris_pipeline.settings.alerts import AlertSection
from polaris_pipeline.settings.backlog import BacklogSection
from polaris_pipeline.settings.env import (
    decode_text,
    is_secret,
    read_section,
    warn_unknown_variables,
)
from polaris_pipeline.settings.executor import ExecutorSection
from polaris_pipeline.settings.guard import GuardSection
from polaris_pipeline.settings.leaks import LeakSection
from polaris_pipeline.settings.metastore import MetastoreSection
from polaris_pipeline.settings.restore import RestoreSection
from polaris_pipeline.settings.retention import RetentionSection
from polaris_pipeline.settings.section import Section, SettingsError, first_problem
from polaris_pipeline.settings.storage import StorageSection
from polaris_pipeline.settings.sweeper import SweeperSection


class PipelineSettings(Section):
    """What the engine, the CLI and the code location are configured with, by section."""

    metastore: MetastoreSection = Field(default_factory=MetastoreSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    sweeper: SweeperSection = Field(default_factory=SweeperSection)
    backlog: BacklogSection = Field(default_factory=BacklogSection)
    retention: RetentionSection = Field(default_factory=RetentionSection)
    leaks: LeakSection = Field(default_factory=LeakSection)
    alerts: AlertSection = Field(default_factory=AlertSection)
    guard: GuardSection = Field(default_factory=GuardSection)
    restore: RestoreSection = Field(default_factory=RestoreSection)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, warn: Callable[[str], None] | None = None
    ) -> PipelineSettings:
        """The defaults, with every variable of ``ENV_VARIABLES`` that is set and not blank;
        a variable under the prefix that names no setting is warned of (logged, or given
        to ``warn``)."""
        warn_unknown_variables(environ, warn)
        return cls.model_validate({name: read_section(name, environ) for name in cls.model_fields})

    @classmethod
    def section_type(cls, section: str) -> type[Section]:
        """The model of the block ``section``."""
        kind = cls.model_fields[section].annotation
        assert isinstance(kind, type) and issubclass(kind, Section)
        return kind

    def with_assignments(self, assignments: list[tuple[str, str, str]]) -> PipelineSettings:
        """These settings with each (section, field, text) set, the text read as its
        variable would be (``--set section.field=text``)."""
        changes: dict[str, dict[str, Any]] = {}
        labels: dict[tuple[str, str], str] = {}
        for section, field, text in assignments:
            label = f"--set {section}.{field}"
            try:
                changes.setdefault(section, {})[field] = decode_text(section, field, text)
            except ValueError as exc:
                raise SettingsError(f"{label}{_shown(section, field, text)}: {exc}") from None
            labels[(section, field)] = label
        return self.with_overrides(changes, labels)

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
                named = labels or {}
                loc = exc.errors()[0]["loc"]
                culprits = [str(loc[0])] if loc else list(update)
                # A rule over several fields (the storage's one source) names each one set.
                label = " / ".join(named.get((section, f), f"{section}.{f}") for f in culprits)
                value = update.get(culprits[0]) if len(culprits) == 1 else None
                value = ",".join(value) if isinstance(value, list | tuple) else value
                shown = "" if value is None else _shown(section, culprits[0], value)
                raise SettingsError(f"{label}{shown}: {first_problem(exc)}") from None
        return self.model_copy(update=sections)


def _shown(section: str, field: str, value: Any) -> str:
    """`` <value>`` in an error of ``section.field``; nothing for a secret's."""
    return "" if is_secret(section, field) else f" {value!r}"


def setting_from_env(section: str, field: str, environ: Mapping[str, str] | None = None) -> Any:
    """One field of a section, read from the environment and checked alone (a bad value
    of another field of the section is not this caller's error)."""
    return getattr(read_section(section, environ, only=field), field)


def executor_settings(environ: Mapping[str, str] | None = None) -> ExecutorSection:
    """The executor section, read from the environment of the process that runs the steps."""
    section = read_section("executor", environ)
    assert isinstance(section, ExecutorSection)
    return section
