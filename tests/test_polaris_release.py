"""The Polaris release value, what it decides, and how it is inferred (``tasks/release.py``).

The database side (the rows written for each release, on PostgreSQL and SQLite)
is in test_payload_versions.py and test_task_events.py.
"""

from __future__ import annotations

import json

import pytest

from polaris_pipeline.tasks.release import (
    BatchEvidence,
    PolarisRelease,
    ReleaseSource,
    batch_evidence,
    infer,
    schema_floor,
)


@pytest.mark.parametrize(
    ("raw", "text"),
    [("1.7", "1.7"), (" 1.4.1 ", "1.4.1"), ("1.7.0", "1.7"), ("1.0.0-incubating", "1.0")],
)
def test_a_release_is_parsed_and_written_back(raw: str, text: str) -> None:
    assert str(PolarisRelease.parse(raw)) == text == PolarisRelease.normalise(raw)


@pytest.mark.parametrize("raw", ["", "1", "v1.7", "1.7.x", "1.7-SNAPSHOT", "latest", "0.9"])
def test_a_malformed_release_says_what_is_expected(raw: str) -> None:
    with pytest.raises(ValueError, match=r"not a Polaris release \(e\.g\. 1\.7|not supported"):
        PolarisRelease.parse(raw)


def test_releases_compare_by_number() -> None:
    assert PolarisRelease.parse("1.10") > PolarisRelease.parse("1.7")
    assert PolarisRelease.parse("1.6.1") > PolarisRelease.parse("1.6")


@pytest.mark.parametrize(
    ("release", "batch_type", "events"),
    [("1.0", False, False), ("1.5.9", False, False), ("1.6", False, True), ("1.7", True, True)],
)
def test_what_a_release_decides(release: str, batch_type: bool, events: bool) -> None:
    r = PolarisRelease.parse(release)
    assert r.batch_has_type is batch_type and r.writes_task_events is events


@pytest.mark.parametrize(
    ("release", "schema", "catalog"),
    [
        ("1.6", 4, "__realm__"),
        ("1.6", 5, "__realm__"),
        ("1.7", 4, "__realm__"),
        ("1.7", 5, None),
        ("1.8", 5, None),
        ("1.7", None, "__realm__"),
    ],
)
def test_the_event_catalog(release: str, schema: int | None, catalog: str | None) -> None:
    assert PolarisRelease.parse(release).event_catalog_id(schema) == catalog


@pytest.mark.parametrize(
    ("schema", "floor"),
    [
        (None, "1.0"),
        (0, "1.0"),
        (1, "1.0"),
        (2, "1.1"),
        (3, "1.2"),
        (4, "1.4"),
        (5, "1.7"),
        (6, "1.7"),
    ],
)
def test_the_schema_version_is_a_floor(schema: int | None, floor: str) -> None:
    assert str(schema_floor(schema)) == floor


def _batch(typed: bool) -> str:
    doc = {"tableId": {"namespace": ["type"], "name": "t"}, "batchFiles": ["s3://b/x"]}
    if typed:
        doc["type"] = "TABLE_METADATA"
    return json.dumps(doc, separators=(",", ":"))


def test_evidence_reads_the_top_level_type_only() -> None:
    # A namespace named "type" is not a type field; undecodable data says nothing.
    assert batch_evidence([(1, "{"), (2, None), (3, _batch(False))]) == BatchEvidence(None, 3)
    assert batch_evidence([(4, _batch(True)), (3, _batch(False))]) == BatchEvidence(4, 3)


def test_a_typed_polaris_row_means_17_on_any_schema() -> None:
    resolved = infer("R", 4, BatchEvidence(typed_task_id=42, untyped_task_id=7))
    assert str(resolved.release) == "1.7" and resolved.at_least
    assert resolved.source is ReleaseSource.BATCH_ROWS
    assert "BATCH task 42" in resolved.text and "schema v4" in resolved.text


def test_without_typed_rows_the_floor_decides() -> None:
    untyped = infer("R", 4, BatchEvidence(untyped_task_id=7))
    assert str(untyped.release) == "1.4" and not untyped.release.batch_has_type
    assert "BATCH task 7" in untyped.evidence
    nothing = infer("R", 4, BatchEvidence())
    assert str(nothing.release) == "1.4" and nothing.source is ReleaseSource.SCHEMA_VERSION
    # Only 1.7+ creates a v5 database: an untyped row there is not the running release's.
    v5 = infer("R", 5, BatchEvidence(untyped_task_id=7))
    assert v5.release.batch_has_type and "ignored" in v5.evidence
    assert not infer("R", None, BatchEvidence()).release.batch_has_type
    assert nothing.to_json() == {
        "release": "1.4",
        "at_least": True,
        "source": "schema-version",
        "schema_version": 4,
        "evidence": "schema v4, no BATCH task written by Polaris",
    }
