"""The reliability worker's Polaris-style executor: what Polaris 1.4.1's executor does with a
BATCH_FILE_CLEANUP row it leased, as its own handlers show it (tests/polaris/oracle).
tests/test_polaris_oracle_faults.py's ``test_the_workers_polaris_executor_leaves_what_polaris_
leaves`` compares the rows and deletes of this model with the oracle's for the same rows.

Polaris's rules, as the oracle runs them:

- BatchFileCleanupTaskHandler checks each file's existence first: a missing file gets no
  delete call; a batch whose files are all missing succeeds;
- it tries each delete up to 3 times; one still failing makes it return false, and the
  executor then leaves the row (leased: another executor takes it after the timeout). No
  executor retry follows a false (TaskExecutorImpl retries a handler that throws);
- when every delete succeeded the executor drops the row;
- a row whose payload does not decode makes the executor's handler lookup throw (it
  decodes the payload to choose a handler): tried 3 times, then left as it is.

Only BATCH rows are modelled (the oracle runs Polaris's own handlers for the others): a row
of another type is left and reported as not modelled. ``type`` in a BATCH payload is read
past: 1.7 writes it, 1.0 to 1.6 refuse it (tests/test_polaris_classes.py holds that rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from sqlalchemy import Engine, select

from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.tasks.model import Prop, TaskType

# BatchFileCleanupTaskHandler's tries of one delete before it gives up on the batch.
DELETE_ATTEMPTS = 3


class Verdict(StrEnum):
    """What becomes of a leased row."""

    DONE = "done"  # every delete succeeded: the executor drops the row
    LEFT = "left"  # a delete failed 3 times: the handler returned false, the row stays
    UNDECODABLE = "does not decode"  # the handler lookup throws on it, 3 times: the row stays
    NOT_MODELLED = "not modelled"  # not a BATCH row: left (the oracle covers it)


def batch_files(properties: Any) -> list[str] | Verdict:
    """The files of a BATCH row's properties, or why no BATCH handler runs it."""
    if isinstance(properties, str):
        try:
            properties = json.loads(properties)
        except ValueError:
            return Verdict.UNDECODABLE
    if not isinstance(properties, dict):
        return Verdict.UNDECODABLE
    if str(properties.get(Prop.TASK_TYPE)) != TaskType.BATCH_FILE_CLEANUP.code:
        return Verdict.NOT_MODELLED
    try:
        files = json.loads(properties.get(Prop.DATA, ""))["batchFiles"]
    except (ValueError, TypeError, KeyError):
        return Verdict.UNDECODABLE
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return Verdict.UNDECODABLE
    return files


def row_properties(engine: Engine, realm_id: str, task_id: int) -> Any:
    """The row's properties as stored, None when the row is gone."""
    with engine.connect() as conn:
        return conn.execute(
            select(entities.c.properties).where(
                entities.c.realm_id == realm_id, entities.c.id == task_id
            )
        ).scalar_one_or_none()


def run_batch(
    files: list[str], *, exists: Callable[[str], bool], delete: Callable[[str], None]
) -> Verdict:
    """The handler over ``files``: missing files skipped, each delete tried up to
    DELETE_ATTEMPTS times (``delete`` raising OSError is a failed try)."""
    ok = True
    for uri in files:
        if not exists(uri):
            continue
        for _ in range(DELETE_ATTEMPTS):
            try:
                delete(uri)
                break
            except OSError:
                continue
        else:
            ok = False
    return Verdict.DONE if ok else Verdict.LEFT
