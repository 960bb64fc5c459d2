"""Access to the Polaris metastore: schema, connection, named statements, task state transitions."""

from polaris_pipeline.metastore.connection import make_engine, resolve_url
from polaris_pipeline.metastore.store import Metastore, new_entity_id
from polaris_pipeline.metastore.transitions import CompleteOutcome, FailOutcome

__all__ = [
    "CompleteOutcome",
    "FailOutcome",
    "Metastore",
    "make_engine",
    "new_entity_id",
    "resolve_url",
]
