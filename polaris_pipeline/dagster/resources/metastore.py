"""The ``metastore`` resource: the Polaris metastore and the lease rules, for Dagster.

Dagster builds resources again for every sensor tick and every op process, so
the resource itself is only configuration; the ``Metastore`` (a SQLAlchemy
engine with its connection pool) is kept in a module-level cache, one per
process and per (url, lease policy).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from polaris_pipeline.execution.runner import DEFAULT_EXECUTOR_PREFIX, make_executor_id
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.connection import resolve_url, safe_url
from polaris_pipeline.tasks.model import LeasePolicy, RealmOverride
from polaris_pipeline.tasks.release import ALWAYS, TaskEvents
from polaris_pipeline.tasks.unreferenced_mode import DEFAULT_UNREFERENCED_MODE, UnreferencedMode

# The library's defaults, written once in LeasePolicy.
_DEFAULTS = LeasePolicy()

_cache: dict[tuple[int, str, LeasePolicy], Metastore] = {}
_cache_lock = threading.Lock()


def cached_metastore(url: str, policy: LeasePolicy) -> Metastore:
    """The process's Metastore for ``url`` and ``policy``, created on first use.

    The process id is part of the key: a forked child must not share its
    parent's pooled connections.
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


class PolarisMetastoreResource(ConfigurableResource):
    """The Polaris metastore that holds the TASK entities, and how tasks are leased.

    Set ``url`` with ``EnvVar("POLARIS_METASTORE_URL")``: the UI then shows the
    variable's name, never the URL or its password.
    """

    url: str = Field(
        description=(
            "SQLAlchemy URL of the Polaris metastore, e.g. "
            "postgresql+psycopg://user:pass@host/polaris or sqlite:///polaris.db. "
            "Pass it as EnvVar('POLARIS_METASTORE_URL') so the password stays out of the UI."
        )
    )
    realms: list[str] | None = Field(
        default=None, description="Realms to sweep; null sweeps every realm that has tasks."
    )
    lease_timeout_ms: int = Field(
        default=_DEFAULTS.lease_timeout_ms,
        description="Lease period; must equal Polaris's POLARIS_TASK_TIMEOUT_MILLIS.",
    )
    grace_ms: int | None = Field(
        default=None,
        description=(
            "How old a never-leased task must be before the sweeper takes it (a Polaris "
            "server may be running it in-process); null means the lease timeout."
        ),
    )
    max_attempts: int = Field(
        default=_DEFAULTS.max_attempts,
        description="Attempts before a task is dead-lettered (then only requeue).",
    )
    metadata_batch_size: int = Field(
        default=_DEFAULTS.metadata_batch_size,
        description="Paths per metadata batch child; Polaris's TABLE_METADATA_CLEANUP_BATCH_SIZE.",
    )
    realm_overrides: dict[str, dict[str, int]] | None = Field(
        default=None,
        description=(
            "Realm -> its own lease_timeout_ms, grace_ms, metadata_batch_size "
            "(Polaris allows realm overrides of both)."
        ),
    )
    realm_unreferenced: dict[str, str] | None = Field(
        default=None,
        description="Realm -> its own unreferenced mode (off, report, delete).",
    )
    polaris_version: str | None = Field(
        default=None,
        description=(
            "The Polaris release serving the metastore (1.7, 1.4.1): the shape of the rows "
            "we write (BATCH payload type, task events). Null: inferred per realm from the "
            "rows Polaris wrote and the schema version (docs/polaris-releases.md)."
        ),
    )
    realm_polaris_version: dict[str, str] | None = Field(
        default=None,
        description="Realm -> the Polaris release serving that realm.",
    )
    unreferenced: str = Field(
        default=DEFAULT_UNREFERENCED_MODE.value,
        description=(
            "What a dropped table's run does, last, with the files under its location that "
            "its metadata no longer names: off, report (list, delete nothing) or delete."
        ),
    )
    write_task_events: bool = Field(
        default=False,
        description=(
            "Write Polaris's BEFORE/AFTER_ATTEMPT_TASK rows to its events table where the "
            "realm's Polaris release writes them (1.6 and later)."
        ),
    )
    # Dagster's config types have no bool-or-word union: the settings' "always" is
    # this second flag here.
    task_events_every_release: bool = Field(
        default=False,
        description=(
            "With write_task_events: write them for every release, those before 1.6 too "
            "(which persist none themselves)."
        ),
    )
    executor_prefix: str = Field(
        default=DEFAULT_EXECUTOR_PREFIX,
        description="First part of the executor ids written to lastAttemptExecutorId.",
    )

    def task_events(self) -> TaskEvents:
        """The task-events setting these two fields spell (the Runner's argument)."""
        if not self.write_task_events:
            return False
        return ALWAYS if self.task_events_every_release else True

    def policy(self) -> LeasePolicy:
        # A realm's text overrides are fields of their own (Dagster config has no
        # mixed-type maps), merged here into its RealmOverride.
        texts: dict[str, dict[str, str]] = {}
        for key, by_realm in (
            ("unreferenced", self.realm_unreferenced),
            ("polaris_version", self.realm_polaris_version),
        ):
            for realm, value in (by_realm or {}).items():
                texts.setdefault(realm, {})[key] = value
        values: dict[str, dict[str, Any]] = {realm: {} for realm in texts}
        values.update(self.realm_overrides or {})
        overrides = {
            realm: RealmOverride.from_json_obj({**v, **texts.get(realm, {})}, realm=realm)
            for realm, v in values.items()
        }
        return LeasePolicy(
            lease_timeout_ms=self.lease_timeout_ms,
            grace_ms=self.grace_ms,
            max_attempts=self.max_attempts,
            metadata_batch_size=self.metadata_batch_size,
            unreferenced=UnreferencedMode.parse(self.unreferenced),
            polaris_version=self.polaris_version,
            realm_overrides=overrides,
        )

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
        """The executor id of a Dagster run: the same in every op process of the run.

        So a child created by the root op is already held by the op that runs it
        (adopting it is a no-op), and any op's heartbeat renews every lease the
        run holds. Run ids are UUIDs, which keeps the id unique per holder.
        """
        return f"{self.executor_prefix}:run:{run_id}"

    def __repr_args__(self) -> Any:
        # pydantic's repr would print the URL with its password.
        for name, value in super().__repr_args__():
            if name == "url" and isinstance(value, str):
                try:
                    value = self.display_url
                except Exception:
                    value = "***"
            yield name, value
