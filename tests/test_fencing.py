"""Fencing: ``LeaseDeadlines`` never calls a lease held past its end, on a real metastore
(PostgreSQL and SQLite).

The database says how much longer a lease lasts when it reads its clock; the answer may
arrive much later (a busy database, a slow network: when a heartbeat fails too). The
period the fence then trusts without asking again counts from before the question.
"""

from __future__ import annotations

import time

import pytest

from builders.tasks import batch_task
from polaris_pipeline.errors import LeaseLost
from polaris_pipeline.execution.fencing import LeaseDeadlines
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.ref import Lease

LEASE_MS = 1000
SLOW_ANSWER_S = 0.7

pytestmark = pytest.mark.lease_policy(grace_ms=0, lease_timeout_ms=LEASE_MS)


def test_a_late_answer_does_not_stretch_the_period_the_fence_trusts(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    metastore.insert_tasks([batch_task("R", create_timestamp=metastore.now_ms() - 60_000)])
    (lease,) = metastore.lease_available("pp:sweep:fencing", 1, ["R"])
    asked = metastore.held_for_ms

    def answered_late(held: Lease) -> int | None:
        remaining = asked(held)
        time.sleep(SLOW_ANSWER_S)
        return remaining

    monkeypatch.setattr(metastore, "held_for_ms", answered_late)
    deadlines = LeaseDeadlines(metastore)
    deadlines.fence(lease)  # held: nearly the whole lease was left when the database read it
    # Now past the lease's end (it started before the question), and nothing renewed it.
    time.sleep(LEASE_MS / 1000 - SLOW_ANSWER_S + 0.1)
    with pytest.raises(LeaseLost):
        deadlines.still_held(lease)
