"""The ``metastore`` resource: the Polaris metastore and the lease rules, for Dagster.

Dagster builds resources again for every sensor tick and every op process, so
the resource itself is only configuration; the ``Metastore`` (a SQLAlchemy
engine with its connection pool) is kept in a module-level cache, one per
process and per (url, lease policy).
"""

from __future__ import annotations

import os
import threading

from dagster import Config, ConfigurableResource, EnvVar
from pydantic import Field

from polaris_pipeline.execution.holder import make_executor_id
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.connection import resolve_url, safe_url
from polaris_pipeline.settings import MetastoreSection
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.tasks.model import TaskPolicy

_cache: dict[tuple[int, str, TaskPolicy], Metastore] = {}
_cache_lock = threading.Lock()


def cached_metastore(url: str, policy: TaskPolicy) -> Metastore:
    """The process's Metastore for ``url`` and ``policy``, created on first use; keyed by process
    id too: a forked child must not share its parent's pooled connections.
    """
    parsed = resolve_url(url)
    key = (os.getpid(), parsed.render_as_string(hide_password=False), policy)
    with _cache_lock:
        store = _cache.get(key)
        if store is None:
            store = Metastore(url, policy=policy)
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


class PolarisMetastoreResource(ConfigurableResource, MetastoreSection):
    """The Polaris metastore holding the TASK entities, and how tasks are leased: fields of
    ``MetastoreSection``. Set ``url`` with ``EnvVar("POLARIS_METASTORE_URL")`` so the UI shows
    the variable's name, never the URL or its password.
    """

    url: str = Field(description=MetastoreSection.model_fields["url"].description)
    # Dagster's own config class in place of the section's (a subclass of it).
    realm_overrides: dict[str, RealmOverrideConfig] = Field(  # type: ignore[assignment]
        default_factory=dict,
        description=MetastoreSection.model_fields["realm_overrides"].description,
    )

    @classmethod
    def from_section(cls, section: MetastoreSection, url: str | EnvVar) -> PolarisMetastoreResource:
        """The resource of ``section``, its URL given as the UI should show it."""
        return cls(**{**section.model_dump(exclude={"url"}), "url": url})

    def policy(self) -> TaskPolicy:
        """The task policy this resource's section gives."""
        return TaskPolicy.from_section(self)

    def get_metastore(self) -> Metastore:
        """The shared Metastore of this process for this configuration."""
        return cached_metastore(self.url, self.policy())

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
