"""The Polaris release each realm's rows are written for: configured, else inferred.

One ``ReleaseProbe`` lives for one sweep, one run or one sensor tick: it reads
the schema version once and, per realm, at most one bounded query of the BATCH
rows Polaris wrote (``queries.BATCH_EVIDENCE``), so a release Polaris changed
underneath (an upgrade) is seen at the next tick or run. The rules themselves
are ``tasks/release.py``.
"""

from __future__ import annotations

import logging

from polaris_pipeline.metastore.store import Metastore
from polaris_pipeline.tasks.release import (
    PolarisRelease,
    ResolvedRelease,
    batch_evidence,
    configured,
    infer,
)

log = logging.getLogger("polaris_pipeline.release")

# Rows read per realm: typed rows come first, so one would do; a few more survive a
# row whose data does not decode.
EVIDENCE_ROWS = 5


class ReleaseProbe:
    """Resolves, once per realm, the release of a metastore's realms."""

    def __init__(self, metastore: Metastore, schema_version: int | None = None) -> None:
        """``schema_version``: the caller's reading of the version row, when it has one."""
        self.metastore = metastore
        self._schema_version: tuple[int | None] | None = (
            (schema_version,) if schema_version is not None else None
        )
        self._by_realm: dict[str, ResolvedRelease] = {}

    def schema_version(self) -> int | None:
        if self._schema_version is None:
            self._schema_version = (self.metastore.check_schema(),)
        return self._schema_version[0]

    def resolve(self, realm_id: str) -> ResolvedRelease:
        """The release ``realm_id`` runs: its override, the setting, else the inference."""
        found = self._by_realm.get(realm_id)
        if found is None:
            found = self._resolve(realm_id)
            self._by_realm[realm_id] = found
            log.info("release of %s", found.text)
        return found

    def _resolve(self, realm_id: str) -> ResolvedRelease:
        version = self.schema_version()
        policy = self.metastore.policy
        text = policy.for_realm(realm_id).polaris_version
        if text is not None:
            override = policy.realm_overrides.get(realm_id)
            own = override is not None and override.polaris_version is not None
            return configured(realm_id, PolarisRelease.parse(text), version, for_realm=own)
        rows = self.metastore.batch_rows_of_polaris(realm_id, EVIDENCE_ROWS)
        return infer(realm_id, version, batch_evidence(rows))

    def release(self, realm_id: str) -> PolarisRelease:
        return self.resolve(realm_id).release
