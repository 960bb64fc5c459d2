"""The unreferenced phase's report: made once from its tally, frozen, read back whole."""

from __future__ import annotations

import dataclasses
import json

import pytest

from polaris_pipeline.unreferenced.report import UnreferencedReport, UnreferencedTally


def test_the_report_is_made_once_from_its_tally() -> None:
    tally = UnreferencedTally.start("delete", False)
    tally.listed = 2
    tally.add_paths(["s3://b/t/a", "s3://b/t/b"], cap=1)
    report = tally.freeze()
    # Later additions to the tally never reach the report made from it.
    tally.listed += 1
    tally.paths.append("s3://b/t/c")
    tally.failed["s3://b/t/d"] = "AccessDenied"
    assert (report.listed, report.paths, report.more_paths) == (2, ("s3://b/t/a",), 1)
    assert report.failed == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.listed = 3  # type: ignore[misc]
    # An empty tally is the report's own defaults.
    assert UnreferencedTally.start("report", True).freeze() == UnreferencedReport(
        "report", dry_run=True
    )


def test_a_step_record_reads_the_report_back_equal() -> None:
    tally = UnreferencedTally.start("report", False)
    tally.add_paths(["s3://b/t/x"])
    tally.kept_sample.append("s3://b/t/y: newer than the drop: kept")
    report = tally.freeze()
    stored = json.loads(json.dumps(report.to_record()))
    assert stored["paths"] == ["s3://b/t/x"]
    assert UnreferencedReport.from_record(stored) == report
