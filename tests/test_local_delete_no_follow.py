"""A local delete never follows a directory swapped for a symlink after the guard's check.

The guard resolves a path's parent when it checks it; the delete then opens each
directory below the table's root with O_NOFOLLOW (``storage.local_walk``), so a
``data/`` replaced by a link between the two makes the delete fail that path,
leaving the file outside the table (and its checksum sidecar) alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polaris_pipeline.cleanup.guard.paths import PathGuard
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.delete import DeleteReport, bulk_delete
from polaris_pipeline.storage.resolve import StorageResolver

LINK_FAILURE = "not deleted: directory 'data' on its path is a symbolic link (never followed)"


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _delete(guard: PathGuard, uris: list[str]) -> DeleteReport:
    return bulk_delete(
        StorageResolver(),
        uris,
        sidecar_check=lambda uri: _admits(guard, uri),
        local_roots=guard.roots,
    )


def _admits(guard: PathGuard, uri: str) -> bool:
    try:
        guard.check(uri)
    except Exception:
        return False
    return True


def _swap_for_link(directory: Path, target: Path) -> None:
    shutil.rmtree(directory)
    directory.symlink_to(target, target_is_directory=True)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_directory_swapped_after_the_check_is_not_followed(tmp_path: Path, warm: bool) -> None:
    table = tmp_path / "wh" / "t"
    outside = tmp_path / "elsewhere"
    precious = _touch(outside / "f.parquet")
    precious_crc = _touch(outside / ".f.parquet.crc")
    _touch(table / "data" / "f.parquet")
    _touch(table / "data" / ".f.parquet.crc")
    _touch(table / "data" / "g.parquet")
    guard = PathGuard.for_table(str(table), {}, StorageConfig())
    target = str(table / "data" / "f.parquet")
    if warm:
        # An earlier check of a sibling in the same directory, as a manifest's entries do.
        guard.check(str(table / "data" / "g.parquet"))
    guard.check(target)

    _swap_for_link(table / "data", outside)
    report = _delete(guard, [target])

    assert report.failed == {target: LINK_FAILURE}
    assert report.deleted == [] and report.missing == [] and report.sidecars == []
    assert precious.exists() and precious_crc.exists()


def test_link_anywhere_below_the_root_fails_the_delete(tmp_path: Path) -> None:
    table = tmp_path / "wh" / "t"
    outside = tmp_path / "elsewhere"
    precious = _touch(outside / "p" / "f.parquet")
    _touch(table / "data" / "p" / "f.parquet")
    guard = PathGuard.for_table(str(table), {}, StorageConfig())
    target = str(table / "data" / "p" / "f.parquet")
    guard.check(target)
    # The deeper directory swapped this time, and the delete spelt as a file: URI.
    _swap_for_link(table / "data" / "p", outside / "p")
    report = _delete(guard, [f"file://{target}"])
    assert report.failed == {
        f"file://{target}": "not deleted: directory 'p' on its path is a symbolic link "
        "(never followed)"
    }
    assert precious.exists()


def test_unswapped_delete_keeps_its_semantics(tmp_path: Path) -> None:
    table = tmp_path / "wh" / "t"
    f = _touch(table / "data" / "f.parquet", b"12")
    crc = _touch(table / "data" / ".f.parquet.crc", b"1")
    _touch(table / "data" / ".gone.parquet.crc", b"1")
    (table / "data" / ".link.parquet.crc").symlink_to(f)
    _touch(table / "data" / "link.parquet")
    guard = PathGuard.for_table(str(table), {}, StorageConfig())
    uris = [str(f), str(table / "data" / "gone.parquet"), str(table / "nodir" / "x.parquet")]
    uris.append(str(table / "data" / "link.parquet"))
    report = _delete(guard, uris)
    assert report.deleted == [uris[0], uris[3]]
    assert report.missing == [uris[1], uris[2]]
    assert report.ok
    # The sidecar of a deleted file and of one found missing go; a symlink by a
    # sidecar's name is no sidecar.
    assert report.sidecars == [str(crc), str(table / "data" / ".gone.parquet.crc")]
    assert report.bytes_freed == 5  # f, link.parquet and the two sidecars
    assert (table / "data" / ".link.parquet.crc").is_symlink()


def test_link_above_the_root_is_the_operators_and_followed(tmp_path: Path) -> None:
    # Like /tmp -> /private/tmp: the table's location is spelt through a link that
    # lies above it. The walk starts at the root resolved, so the delete works...
    real = tmp_path / "real"
    f = _touch(real / "t" / "data" / "f.parquet")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    table = tmp_path / "alias" / "t"
    guard = PathGuard.for_table(str(table), {}, StorageConfig())
    uri = str(table / "data" / "f.parquet")
    guard.check(uri)
    # ...while a delete told of no root walks from "/" and follows no link at all.
    unanchored = bulk_delete(StorageResolver(), [uri])
    assert unanchored.failed == {
        uri: "not deleted: directory 'alias' on its path is a symbolic link (never followed)"
    }
    assert f.exists()
    assert _delete(guard, [uri]).deleted == [uri]
    assert not f.exists()
