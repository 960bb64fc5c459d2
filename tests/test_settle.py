"""``settle`` and ``write_after`` (tests/support/unreferenced.py) wait for storage's own
times, as the unreferenced phase reads them: a file dated ahead of the clock holds
``settle`` back until the clock passes it; ``write_after`` gives a file dated after a drop."""

from __future__ import annotations

import os
import time
from pathlib import Path

from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.listing import list_prefix
from polaris_pipeline.storage.resolve import StorageResolver
from tests.support.unreferenced import settle, write_after


def test_settle_waits_until_the_clock_is_past_a_file_dated_ahead(tmp_path: Path) -> None:
    table = tmp_path / "t"
    (table / "data").mkdir(parents=True)
    ahead = table / "data" / "ahead.parquet"
    ahead.write_bytes(b"x")
    ahead_ns = time.time_ns() + 300_000_000
    os.utime(ahead, ns=(ahead_ns, ahead_ns))

    settle(StorageResolver(StorageConfig()), table.as_uri())

    assert time.time_ns() // 1_000_000 > ahead_ns // 1_000_000


def test_write_after_dates_the_file_after_the_given_time(tmp_path: Path) -> None:
    resolver = StorageResolver(StorageConfig())
    after_ms = time.time_ns() // 1_000_000 + 200
    uri = write_after(resolver, f"{tmp_path.as_uri()}/data/new.parquet", b"new", after_ms)

    [[listed]] = list_prefix(resolver, f"{tmp_path.as_uri()}/data")
    assert listed.uri == uri and listed.mtime_ms is not None and listed.mtime_ms > after_ms
