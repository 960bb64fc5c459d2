"""The realms of the Polaris metastore as Dagster partitions.

``polaris_realms`` is a dynamic partitions definition: its keys live in the
Dagster instance. The sweeper sensor adds a realm as soon as it sees one (see
``sensors/sweeper.py``); an operator can add one by hand in the UI too. The
realm backfill job and the backlog asset and its checks are partitioned by it.
"""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition

REALM_PARTITIONS_NAME = "polaris_realms"

realm_partitions = DynamicPartitionsDefinition(name=REALM_PARTITIONS_NAME)

__all__ = ["REALM_PARTITIONS_NAME", "realm_partitions"]
