"""The one formatter each for bytes, times and task names, on ordinary and hostile input."""

from __future__ import annotations

import uuid

import pytest

from polaris_pipeline.cli.table import Column, render
from polaris_pipeline.tasks.formatting import (
    error_cause,
    format_bytes,
    format_duration,
    iso_utc,
    iso_utc_seconds,
    relative_time,
    short_task_name,
    task_label,
    truncate,
)
from polaris_pipeline.tasks.payloads import batch_cleanup_task_name, manifest_cleanup_task_name

SUFFIX = uuid.UUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (500_000, "488.3 KiB"), (None, "unknown")],
)
def test_format_bytes(n: int | None, text: str) -> None:
    assert format_bytes(n) == text


def test_format_bytes_exact_adds_the_count_only_where_it_was_rounded() -> None:
    assert format_bytes(500_000, exact=True) == "488.3 KiB (500000 bytes)"
    assert format_bytes(1023, exact=True) == "1023 B"
    assert format_bytes(None, exact=True) == "unknown"


def test_iso_utc_and_hostile_times() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"
    assert iso_utc(1_764_583_540_123) == "2025-12-01T10:05:40.123Z"
    assert iso_utc(None) is None
    assert iso_utc(999_999_999_999_999_999) is None  # past the calendar: no error
    assert iso_utc(-(2**62)) is None


def test_iso_utc_seconds_cuts_to_the_second_and_survives_hostile_times() -> None:
    assert iso_utc_seconds(1_764_583_540_999) == "2025-12-01T10:05:40+00:00"  # cut, not rounded
    assert iso_utc_seconds(0) == "1970-01-01T00:00:00+00:00"
    assert iso_utc_seconds(None) is None
    assert iso_utc_seconds(999_999_999_999_999_999) is None
    assert iso_utc_seconds(-(2**62)) is None


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "0s"), (45_000, "45s"), (270_000, "4m30s"), (7_500_000, "2h05m"), (273_600_000, "3d04h")],
)
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration(ms) == text


def test_relative_time() -> None:
    assert relative_time(1_000 + 270_000, 1_000) == "in 4m30s"
    assert relative_time(1_000, 61_000) == "1m00s ago"
    assert relative_time(None, 0) == ""


def test_a_batch_child_name_loses_its_file_list() -> None:
    files = [f"s3://b/wh/ns/t/metadata/snap-{i}.avro" for i in range(40)]
    name = batch_cleanup_task_name("entityCleanup_42", files, suffix=SUFFIX)
    assert short_task_name(name) == "entityCleanup_42_[40 files]_1b4e28ba"
    one = batch_cleanup_task_name("entityCleanup_42", files[:1], suffix=SUFFIX)
    assert short_task_name(one) == "entityCleanup_42_[1 file]_1b4e28ba"
    empty = batch_cleanup_task_name("entityCleanup_42", [], suffix=SUFFIX)
    assert short_task_name(empty) == "entityCleanup_42_[0 files]_1b4e28ba"


def test_a_manifest_child_keeps_the_manifest_file_name() -> None:
    path = "s3://bucket/warehouse/sales/payments/metadata/" + "x" * 80 + "-m0.avro"
    name = manifest_cleanup_task_name("entityCleanup_42", path, suffix=SUFFIX)
    short = short_task_name(name)
    assert short.startswith("entityCleanup_42_…/") and short.endswith("-m0.avro_1b4e28ba")
    assert len(short) <= 60


def test_other_names_are_cut_in_the_middle_and_flattened() -> None:
    assert short_task_name("entityCleanup_42") == "entityCleanup_42"
    long = "a" * 100 + "Z"
    cut = short_task_name(long)
    assert len(cut) == 48 and "…" in cut and cut.endswith("Z")
    assert short_task_name("two\nlines") == "two lines"
    assert task_label("POLARIS", 7, "entityCleanup_42") == "POLARIS/7 entityCleanup_42"


def test_error_cause_drops_the_label_it_starts_with() -> None:
    name = batch_cleanup_task_name("entityCleanup_42", ["s3://b/a", "s3://b/b"], suffix=SUFFIX)
    full = f"POLARIS/7 {name!r}"
    assert error_cause(f"task {full}: bad payload", "POLARIS", 7, name) == "bad payload"
    # A later mention of the full label becomes the short one.
    lost = f"lease on {full} (attempt 2) lost"
    assert error_cause(lost, "POLARIS", 7, name) == (
        "lease on POLARIS/7 entityCleanup_42_[2 files]_1b4e28ba (attempt 2) lost"
    )
    # An abbreviated stored label (a bounded error) still goes.
    assert error_cause("task POLARIS/7 'entityCl…[9 chars]…b': gone", "POLARIS", 7, name) == "gone"
    # Another task's label is not this one's: kept.
    other = "task POLARIS/8 'x': other"
    assert error_cause(other, "POLARIS", 7, name) == other
    assert error_cause(None, "POLARIS", 7, name) == ""


def test_truncate_keeps_runs_of_spaces_and_cuts_with_an_ellipsis() -> None:
    assert truncate("done       a", 50) == "done       a"
    assert truncate("abcdef", 4) == "abc…"
    assert truncate("a\nb", 10) == "a b"
    assert truncate("abc", 0) == "" and truncate(None, 5) == ""


def test_a_table_fits_its_width_dropping_and_cutting_in_order() -> None:
    columns = [
        Column("ID"),
        Column("REALM", drop=2, same_is_free=True),
        Column("NAME", min_width=6, drop=1),
        Column("ERROR", min_width=8),
    ]
    rows = [["1234567890", "POLARIS", "n" * 30, "e" * 60], ["2", "POLARIS", "short", ""]]
    wide = render(columns, rows, None)
    assert wide.hidden == [] and wide.lines[2].startswith("1234567890  POLARIS  nnn")
    cut = render(columns, rows, 40)  # the minimums fit: values are cut, nothing dropped
    assert cut.hidden == [] and all(len(line) <= 40 for line in cut.lines)
    assert cut.lines[2].startswith("1234567890  POLARIS  ") and cut.lines[2].count("…") == 2
    fitted = render(columns, rows, 30)
    assert all(len(line) <= 30 for line in fitted.lines)
    assert fitted.hidden == ["REALM"]  # one value throughout: dropped before NAME
    assert fitted.lines[2].startswith("1234567890  ") and "…" in fitted.lines[2]
    narrow = render(columns, rows, 22)
    assert narrow.hidden == ["REALM", "NAME"]
    assert all(len(line) <= 22 for line in narrow.lines)
    assert narrow.lines[2].startswith("1234567890  eeeeeeee")  # the id is never cut


def test_a_table_too_narrow_for_its_whole_columns_becomes_one_record_per_block() -> None:
    columns = [Column("ID"), Column("ROOT"), Column("ERROR", min_width=8)]
    root = "s3://bucket/warehouse/sales/payments_2024"
    rows = [["1234567890", root, "Access Denied"], ["2", "s3://b/t", ""]]
    narrow = render(columns, rows, 30)
    assert narrow.blocks and narrow.hidden == []
    assert narrow.lines == [
        "ID     1234567890",
        f"ROOT   {root}",  # whole, although longer than the width: --reclaim takes it
        "ERROR  Access Denied",
        "",
        "ID     2",
        "ROOT   s3://b/t",
    ]
    # Wide enough for the whole columns and the error's minimum: a table again.
    table = render(columns, rows, len(root) + 24)
    assert not table.blocks and table.lines[2].split()[:2] == ["1234567890", root]
