"""Storage configuration: per-location filesystem options and allowed prefixes.

The file (YAML or JSON)::

    locations:
      - prefix: s3://bucket/wh
        options:
          endpoint_url: http://minio:9000
          key: {env: WH_ACCESS_KEY}
          secret: {env: WH_SECRET_KEY}
    allowed_prefixes: [s3://bucket/wh]
    catalog_s3_endpoint: endpointInternal   # or endpoint
    storage_names: {}                       # see storage.named

Options go to the fsspec filesystem; one it does not accept is refused at load
(``storage.options``). ``{env: NAME}`` is read from the environment at load, keeping
secrets out of the file.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from polaris_pipeline.errors import StorageConfigError
from polaris_pipeline.settings.section import nearest
from polaris_pipeline.storage.named import (
    STORAGE_NAMES_KEY,
    NamedIdentity,
    parse_named_identities,
    unmapped,
)
from polaris_pipeline.storage.options import check_options
from polaris_pipeline.storage.redact import mask_options, secret_values
from polaris_pipeline.storage.uri import location_within, normalize_uri, split_uri

# Which S3 endpoint of a catalog's AwsStorageConfigurationInfo the sweeper uses.
# Polaris's own file access prefers ``endpointInternal`` (the default: a sweeper
# beside Polaris, in its network); ``endpoint`` is where clients outside reach S3.
S3_ENDPOINT_INTERNAL = "endpointInternal"
S3_ENDPOINT_CLIENT = "endpoint"
S3_ENDPOINT_CHOICES = (S3_ENDPOINT_INTERNAL, S3_ENDPOINT_CLIENT)


@dataclass(frozen=True, repr=False)
class StorageRule:
    """Filesystem options for every URI under ``prefix``."""

    prefix: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not self.prefix:
            raise StorageConfigError("storage rule: prefix must be a non-empty string")
        if not isinstance(self.options, dict):
            raise StorageConfigError(f"storage rule {self.prefix!r}: options must be a mapping")
        object.__setattr__(self, "prefix", _prefix(self.prefix, "storage rule: prefix"))

    def __repr__(self) -> str:
        return f"StorageRule(prefix={self.prefix!r}, options={mask_options(self.options)!r})"


# Said once when a process starts deleting with no allowed_prefixes: the operator
# guide's "where deleting is allowed at all" is then the catalogs' word alone.
UNBOUNDED_WARNING = (
    "no allowed_prefixes (no storage config, or one without them): only the catalogs' own "
    "locations bound the deletes (each table's recorded location, inside its catalog's "
    "allowedLocations when the catalog states any); set allowed_prefixes to confine them"
)


@dataclass(frozen=True, repr=False)
class StorageConfig:
    """Options per location prefix, and the prefixes deletion is confined to."""

    rules: tuple[StorageRule, ...] = ()
    allowed_prefixes: tuple[str, ...] = ()
    catalog_s3_endpoint: str = S3_ENDPOINT_INTERNAL
    # storageName -> the credentials that name signs with (``storage.named``).
    storage_names: Mapping[str, NamedIdentity] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        prefixes = tuple(_prefix(p, "allowed prefix") for p in self.allowed_prefixes)
        object.__setattr__(self, "allowed_prefixes", prefixes)
        if self.catalog_s3_endpoint not in S3_ENDPOINT_CHOICES:
            raise StorageConfigError(
                f"catalog_s3_endpoint must be one of {', '.join(S3_ENDPOINT_CHOICES)}, "
                f"not {str(self.catalog_s3_endpoint)[:40]!r}"
            )
        object.__setattr__(self, "storage_names", dict(self.storage_names))

    def identity_for(self, storage_name: str | None, storage_type: str) -> NamedIdentity | None:
        """The credentials a catalog's ``storageName`` signs with; None without a name
        (the default identity, as Polaris's). An unmapped name raises StorageError."""
        if storage_name is None:
            return None
        identity = self.storage_names.get(storage_name)
        if identity is None:
            raise unmapped(storage_name, storage_type)
        return identity

    # -- lookups -------------------------------------------------------------------

    def rule_for(self, uri: str) -> StorageRule | None:
        """The rule with the longest prefix containing ``uri``, if any."""
        matching = [rule for rule in self.rules if location_within(uri, rule.prefix)]
        return max(matching, key=lambda rule: len(rule.prefix), default=None)

    def options_for(self, uri: str) -> dict[str, Any]:
        """A deep copy of the options for ``uri``: filesystems may mutate what they
        are given (s3fs rewrites ``config_kwargs["retries"]`` in place)."""
        rule = self.rule_for(uri)
        return copy.deepcopy(rule.options) if rule else {}

    def secrets(self) -> list[str]:
        """Every secret value held by any rule, for redacting error text."""
        out: list[str] = []
        for rule in self.rules:
            out.extend(secret_values(rule.options))
        for identity in self.storage_names.values():
            out.extend(identity.secrets())
        return out

    # -- construction --------------------------------------------------------------

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, source: str = "storage config"
    ) -> StorageConfig:
        """Build a config from parsed YAML/JSON, resolving ``{env: NAME}`` values."""
        if not isinstance(data, Mapping):
            raise StorageConfigError(f"{source}: top level must be a mapping")
        _refuse_unknown(
            data,
            ("locations", "allowed_prefixes", "catalog_s3_endpoint", STORAGE_NAMES_KEY),
            source,
        )
        locations = data.get("locations") or []
        if not isinstance(locations, list):
            raise StorageConfigError(f"{source}: 'locations' must be a list")
        rules = []
        for i, entry in enumerate(locations):
            where = f"locations[{i}]"
            if not isinstance(entry, Mapping):
                raise StorageConfigError(f"{source}: {where} must be a mapping")
            _refuse_unknown(entry, ("prefix", "options"), f"{source}: {where}")
            prefix = entry.get("prefix")
            if not isinstance(prefix, str) or not prefix:
                raise StorageConfigError(f"{source}: {where}.prefix must be a non-empty string")
            options = entry.get("options") or {}
            if not isinstance(options, Mapping):
                raise StorageConfigError(f"{source}: {where}.options must be a mapping")
            resolved = _resolve_env(dict(options), f"{where}.options", source)
            try:
                rule = StorageRule(prefix, resolved)
            except StorageConfigError as e:
                raise StorageConfigError(f"{source}: {where}: {e}") from None
            check_options(split_uri(rule.prefix)[0], rule.options, f"{source}: {where}.options")
            rules.append(rule)
        allowed = data.get("allowed_prefixes") or []
        if not isinstance(allowed, list) or not all(isinstance(p, str) for p in allowed):
            raise StorageConfigError(f"{source}: 'allowed_prefixes' must be a list of strings")
        endpoint = data.get("catalog_s3_endpoint", S3_ENDPOINT_INTERNAL)
        named = parse_named_identities(
            _resolve_env(data.get(STORAGE_NAMES_KEY), STORAGE_NAMES_KEY, source),
            f"{source}: {STORAGE_NAMES_KEY}",
        )
        try:
            return cls(tuple(rules), tuple(allowed), endpoint, named)
        except StorageConfigError as e:
            raise StorageConfigError(f"{source}: {e}") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StorageConfig:
        """Load the file at ``path`` (the storage section's ``config_path``)."""
        p = Path(path)
        source = f"storage config {p}"
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise StorageConfigError(f"{source}: file not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise StorageConfigError(f"{source}: cannot read: {type(e).__name__}") from None
        data = _parse(text, json_only=p.suffix.lower() == ".json", source=source)
        if data is None:
            # An empty file is more likely a mistake than a wish for no rules and no
            # allowed prefixes, which would silently widen what may be deleted.
            raise StorageConfigError(f"{source}: file is empty")
        return cls.from_mapping(data, source=source)

    def __repr__(self) -> str:
        return (
            f"StorageConfig(rules={self.rules!r}, allowed_prefixes={self.allowed_prefixes!r}, "
            f"catalog_s3_endpoint={self.catalog_s3_endpoint!r}, "
            f"storage_names={list(self.storage_names.values())!r})"
        )


def _refuse_unknown(data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    # As text: YAML reads a key such as 1 as a number, which sorts with no string.
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        hint = nearest(unknown[0], known) or f" (expected {', '.join(repr(k) for k in known)})"
        raise StorageConfigError(f"{where}: unknown key {unknown[0]!r}{hint}")


def _prefix(value: object, what: str) -> str:
    """``value`` in the location rule's one spelling; refused unless it is a location."""
    if not isinstance(value, str) or not split_uri(value)[0]:
        raise StorageConfigError(f"{what} {value!r} is neither a URI nor an absolute path")
    return normalize_uri(value)


# A key given twice in one mapping is refused, in JSON and YAML alike: their parsers keep
# the last silently, so an allowed_prefixes written twice would keep only the second.
def _once(keys: Iterable[object]) -> None:
    seen: list[object] = []
    for key in keys:
        if key in seen:
            raise ValueError(f"key {key!r} given twice")
        seen.append(key)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    _once(key for key, _ in pairs)
    return dict(pairs)


class _YamlLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            # The keys written here; a merge (``<<: *defaults``) is no key, and a key
            # written beside it overrides what it merges, as YAML says.
            keys = (
                self.construct_object(key, deep=deep)
                for key, _ in node.value
                if key.tag != "tag:yaml.org,2002:merge"
            )
            try:
                _once(keys)
            except ValueError as e:
                raise yaml.constructor.ConstructorError(
                    None, None, str(e), node.start_mark
                ) from None
        return super().construct_mapping(node, deep=deep)


def _parse(text: str, *, json_only: bool, source: str) -> Any:
    # Error messages are built from positions only: parser messages quote the
    # offending line, which may hold a secret.
    if json_only:
        try:
            return json.loads(text, object_pairs_hook=_json_object) if text.strip() else None
        except json.JSONDecodeError as e:
            raise StorageConfigError(
                f"{source}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}"
            ) from None
        except ValueError as e:  # a key given twice
            raise StorageConfigError(f"{source}: invalid JSON: {e}") from None
    try:
        return yaml.load(text, Loader=_YamlLoader)  # a SafeLoader: no object is built
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise StorageConfigError(f"{source}: invalid YAML{where}: {e.problem}") from None
    except yaml.YAMLError:
        raise StorageConfigError(f"{source}: invalid YAML") from None


def _resolve_env(value: Any, where: str, source: str) -> Any:
    """Replace each ``{"env": "NAME"}`` in ``value`` by the variable's value."""
    if isinstance(value, Mapping):
        if "env" in value:
            extra = sorted(str(k) for k in value if k != "env")
            if extra:
                # {env: NAME, default: x} is not supported: a fallback for a secret would
                # hide a missing variable, and any other key is a typo.
                raise StorageConfigError(
                    f"{source}: {where}: unknown key {extra[0]!r} beside 'env' "
                    "(write {env: NAME} alone)"
                )
            name = value["env"]
            if not isinstance(name, str) or not name:
                raise StorageConfigError(f"{source}: {where}: 'env' must name a variable")
            if name not in os.environ:
                # Name the variable, never a value.
                raise StorageConfigError(
                    f"{source}: {where}: environment variable {name!r} is not set"
                )
            return os.environ[name]
        return {k: _resolve_env(v, f"{where}.{k}", source) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_env(v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    return value
