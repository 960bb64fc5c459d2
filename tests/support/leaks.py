"""Leaked table roots, made the way Polaris leaves them, and the catalog rows around them.

- ``catalog_entity`` (``builders/catalogs.py``, shared with the benchmarks): a catalog row.
- ``reclaim_job(store, roots)``: the reclaim job launched as the Launchpad does; its
  success and its observation's metadata (per root: refusal, deleted ...).
- ``drop_event(store, ...)``: a table's or view's drop event as Polaris 1.6+'s
  persistence listener records it (schema v3+).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterInstance

from builders.restricted_role import admin_connection
from polaris_pipeline.dagster import LeakSettings, PolarisStorageResource
from polaris_pipeline.dagster.leaks import LEAKS_ASSET, RECLAIM_OP, polaris_leak_reclaim_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.schema import events
from tests.support.dagster import metastore_resource


def drop_event(
    store: Metastore,
    *,
    catalog: str,
    namespace: Sequence[str],
    name: str,
    principal: str | None,
    timestamp_ms: int,
    kind: str = "TABLE",
    phase: str = "AFTER",
    realm_id: str = "POLARIS",
) -> None:
    """The ``<phase>_DROP_<kind>`` row of ``namespace.name`` in ``catalog``, shaped as
    Polaris 1.6/1.7's persistence listener writes it (``leaks/drops.py`` cites where):
    the catalog's name in ``catalog_id``, ``TableIdentifier.toString()`` in
    ``resource_identifier``, the attributes as strings in ``additional_properties``."""
    attributes: dict[str, str] = {
        "otel.trace_id": uuid.uuid4().hex,
        "catalog_name": catalog,
        "namespace": ".".join(namespace),
    }
    if kind == "TABLE":
        attributes |= {"table_name": name, "purge_requested": "true"}
    else:
        attributes["view_name"] = name
    with admin_connection(store) as conn:
        conn.execute(
            events.insert().values(
                realm_id=realm_id,
                catalog_id=catalog,
                event_id=str(uuid.uuid4()),
                request_id=None,
                event_type=f"{phase}_DROP_{kind}",
                timestamp_ms=timestamp_ms,
                principal_name=principal,
                resource_type=kind,
                resource_identifier=".".join([*namespace, name]),
                additional_properties=attributes,
            )
        )


def age_local_files(directory: Path, days: float) -> None:
    """Set every file under ``directory`` last modified ``days`` ago."""
    stamp = time.time() - days * 86_400
    for path in directory.rglob("*"):
        if path.is_file():
            os.utime(path, (stamp, stamp))


def reclaim_resources(
    store: Metastore, leaks: LeakSettings, record: Path | None = None
) -> dict[str, Any]:
    return {
        "metastore": metastore_resource(store),
        "storage": PolarisStorageResource(deletion_record=str(record) if record else None),
        "leaks": leaks,
    }


def reclaim_job(
    store: Metastore, roots: list[str], record: Path | None = None, **config: Any
) -> tuple[bool, dict[str, Any]]:
    """Launch the reclaim job as the Launchpad does; its success and its observation's metadata."""
    with DagsterInstance.ephemeral() as instance:
        result = polaris_leak_reclaim_job.execute_in_process(
            run_config={"ops": {RECLAIM_OP: {"config": {"roots": roots, **config}}}},
            resources=reclaim_resources(store, LeakSettings(), record),
            instance=instance,
            raise_on_error=False,
        )
        # As the asset's page reads it: from the instance's event log.
        observations = [
            e.dagster_event.asset_observation_data.asset_observation
            for e in instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_OBSERVATION)
            if e.dagster_event is not None
        ]
        meta = {}
        if observations:
            [observation] = observations
            assert observation.asset_key.to_user_string() == LEAKS_ASSET
            meta = {k: v.value for k, v in observation.metadata.items()}
        return result.success, meta
