"""The ``metastore`` resource: the Polaris metastore and the lease rules, for Dagster.

Dagster builds resources again for every sensor tick and every op process, so
the resource itself is only configuration; the ``Metastore`` (a SQLAlchemy
engine with its connection pool) is kept in a module-level cache, one per
process and per (url, lease policy, guard bound).
"""

from __future__ import annotations

import os
import threading

from dagster import Config, ConfigurableResource, EnvVar
from pydantic import Field

from polaris_pipeline.execution.holder import make_executor_id
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.connection import resolve_url, safe_url
from polaris_pipeline.settings import GuardSection, MetastoreSection
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.tasks.model import TaskPolicy

_cache: dict[tuple[int, str, TaskPolicy, float], Metastore] = {}
_cache_lock = threading.Lock()


def cached_metastore(url: str, policy: TaskPolicy, guard_bound_s: float) -> Metastore:
    """The process's Metastore for ``url``, ``policy`` and the guard's bound, created on first
    use; keyed by process id too: a forked child must not share its parent's pooled connections.
    """
    parsed = resolve_url(url)
    key = (os.getpid(), parsed.render_as_string(hide_password=False), policy, guard_bound_s)
    with _cache_lock:
        store = _cache.get(key)
        if store is None:
            store = Metastore(url, policy=policy, guard_bound_s=guard_bound_s)
            _cache[key] = store
        return store


def clear_metastore_cache() -> None:
    """Dispose of every cached engine (tests, and the demo before it wipes its files)."""
    with _cache_lock:
        stores = list(_cache.values())
        _cache.clear()
    for store in stores:
        store.dispose()


class RealmOverrideConfig(Config, RealmOverride):
    """A realm's own task policy in Dagster's config: ``RealmOverride`` with Dagster's base
    (Dagster nests only its own config classes)."""


class GuardConfig(Config, GuardSection):
    """The guard section in Dagster's config: ``GuardSection`` with Dagster's base."""


class PolarisMetastoreResource(ConfigurableResource, MetastoreSection):
    """The Polaris metastore holding the TASK entities, and how tasks are leased: fields of
    ``MetastoreSection``, and the guard section as its ``guard`` block (the bound of each
    shared-location check of its store). Set ``url`` with ``EnvVar("POLARIS_METASTORE_URL")``
    so the UI shows the variable's name, never the URL or its password.
    """

    url: str = Field(description=MetastoreSection.model_fields["url"].description)
    # Dagster's own config class in place of the section's (a subclass of it).
    realm_overrides: dict[str, RealmOverrideConfig] = Field(  # type: ignore[assignment]
        default_factory=dict,
        description=MetastoreSection.model_fields["realm_overrides"].description,
    )
    # Here, not a resource of its own: every guard check of a run is a query of this
    # resource's Metastore, built in each step's process from this config.
    guard: GuardConfig = Field(default_factory=GuardConfig, description=GuardSection.__doc__)

    @classmethod
    def from_section(
        cls, section: MetastoreSection, url: str | EnvVar, guard: GuardSection | None = None
    ) -> PolarisMetastoreResource:
        """The resource of ``section`` and ``guard`` (None: its defaults), its URL given as the
        UI should show it."""
        values = section.model_dump(exclude={"url"})
        if guard is not None:
            values["guard"] = guard.model_dump()
        return cls(**values, url=url)

    def policy(self) -> TaskPolicy:
        """The task policy this resource's section gives."""
        return TaskPolicy.from_section(self)

    def get_metastore(self) -> Metastore:
        """The shared Metastore of this process for this configuration."""
        return cached_metastore(self.url, self.policy(), self.guard.bound_s)

    @property
    def display_url(self) -> str:
        """The URL with its password masked: the only form fit for logs."""
        return safe_url(resolve_url(self.url))

    def executor_id(self, kind: str) -> str:
        """A fresh executor id (host, pid, random part) for one holder, e.g. a sensor tick."""
        return make_executor_id(kind, self.executor_prefix)

    def run_executor_id(self, run_id: str) -> str:
        """The executor id of a Dagster run, the same in every op process: a child the root op
        created is already held by the op running it, and any op's heartbeat renews every lease
        of the run. Run ids are UUIDs: unique per holder.
        """
        return f"{self.executor_prefix}:run:{run_id}"
