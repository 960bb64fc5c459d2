"""``CleanupResult``: made once from a handler's tally, never changed after."""

from __future__ import annotations

import dataclasses

import pytest

from polaris_pipeline.cleanup.context import CleanupResult, CleanupTally
from polaris_pipeline.cleanup.stages import MANIFESTS
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.tasks.model import NewTask


def test_a_tally_and_a_result_have_the_same_fields() -> None:
    """A field added to one only would be lost on the way from a handler to an outcome."""
    tally = [f.name for f in dataclasses.fields(CleanupTally)]
    assert tally == [f.name for f in dataclasses.fields(CleanupResult)]


def test_a_result_is_frozen_and_keeps_what_it_was_made_with() -> None:
    child = NewTask("R", 7, "child", {}, {})
    tally = CleanupTally.start()
    tally.deleted = 2
    tally.refused.append(GuardRefusal("/x", "outside"))
    tally.child_stages.append((MANIFESTS, [child]))
    tally.notes.append("first")
    tally.failed["s3://b/k"] = "boom"
    result = tally.freeze()
    # The tally goes on; the result made from it does not.
    tally.deleted += 1
    tally.refused.append(GuardRefusal("/y", "outside"))
    tally.child_stages[0][1].append(child)
    tally.notes.append("second")
    tally.failed["s3://b/other"] = "boom"
    assert result.deleted == 2 and len(result.refused) == 1 and result.notes == ("first",)
    assert result.children == [child] and list(result.failed) == ["s3://b/k"]
    assert result.error_summary() == (
        "guard refused 1 path(s), first '/x': outside; 1 delete(s) failed, first 's3://b/k': boom"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.deleted = 0  # type: ignore[misc]


def test_a_thawed_result_is_a_new_tally() -> None:
    """The unreferenced phase adds to a thawed copy: the attempt's outcome keeps its own."""
    result = CleanupResult(deleted=1, notes=("kept",))
    tally = result.thaw()
    tally.notes.append("the phase's")
    tally.deleted += 4
    assert result == CleanupResult(deleted=1, notes=("kept",))
    assert tally.freeze() == CleanupResult(deleted=5, notes=("kept", "the phase's"))
    assert CleanupTally.start().freeze() == CleanupResult()
