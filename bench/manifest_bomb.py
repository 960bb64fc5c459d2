"""Peak memory reading a manifest bomb vs a real manifest of the same compressed size.

The bomb (``builders/avro_bomb.py``) is what issue 45 found: one entry whose
``file_path`` is 200 MB of one character, deflated in one block to about 195 KB.
The real manifest is a v2 data manifest in Java-sized deflate blocks
(``bench/manifests.py``) with as many entries as make it the same size on disk.
Each run is a fresh subprocess whose high-water mark (VmHWM) is reset after its
imports, so the figure is the read's own peak:

- *bounded, bomb* and *bounded, real*: ``iter_manifest_entries``, every entry
  (``cleanup/avro_blocks.py``: each block inflated within ``MAX_BLOCK_BYTES``);
- *unbounded, bomb*: fastavro's container reader, what the handler used before.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.memory import _peak_mb, _reset_peak, _status_mb
from bench.report import BenchResult, Figure

TITLE = "11. A manifest bomb vs a real manifest of the same size (peak RSS)"
BOMB_PATH_CHARS = 200_000_000
QUICK_BOMB_PATH_CHARS = 100_000_000
MODES = ("floor", "bounded-real", "bounded-bomb", "unbounded-bomb")
# What a refused bomb may add to a worker: one block's bound plus slack.
SLACK_MB = 32


def child(mode: str, manifest: str) -> dict[str, Any]:
    # The same imports in every mode, so "floor" is the common starting point.
    import fastavro

    from polaris_pipeline.cleanup.manifest import iter_manifest_entries
    from polaris_pipeline.errors import StorageError
    from polaris_pipeline.storage.resolve import StorageResolver

    out: dict[str, Any] = {"mode": mode, "reset": _reset_peak()}
    start_mb = _status_mb("VmRSS")
    t0 = time.perf_counter()
    entries, error = 0, None
    try:
        if mode.startswith("bounded"):
            for _ in iter_manifest_entries(StorageResolver().input_file("file://" + manifest)):
                entries += 1
        elif mode == "unbounded-bomb":
            with open(manifest, "rb") as f:
                for _ in fastavro.reader(f):
                    entries += 1
    except StorageError as e:
        error = str(e)
    out.update(
        entries=entries,
        error=error,
        seconds=time.perf_counter() - t0,
        start_mb=start_mb,
        run_peak_mb=_peak_mb(),
    )
    return out


def _run_child(mode: str, manifest: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.manifest_bomb", "--child", mode, str(manifest)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed: {proc.stderr[-2000:]}")
    one: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return one


def _real_manifest(path: Path, size: int) -> int:
    """A real manifest about ``size`` bytes on disk; its entries."""
    from builders.manifests import data_file_paths, write_with_fastavro

    location = "file:///wh/ns/t"
    n = 1000
    written = write_with_fastavro(str(path), data_file_paths(location, n), n)
    n = max(1, round(n * size / written.length))
    write_with_fastavro(str(path), data_file_paths(location, n), n)
    return n


def run(quick: bool = False) -> BenchResult:
    from builders.avro_bomb import write_manifest_bomb
    from polaris_pipeline.cleanup.avro_blocks import MAX_BLOCK_BYTES

    chars = QUICK_BOMB_PATH_CHARS if quick else BOMB_PATH_CHARS
    bound_mb = MAX_BLOCK_BYTES / 2**20
    result = BenchResult(
        name="manifest_bomb",
        title=TITLE,
        command="python -m bench manifest_bomb" + (" --quick" if quick else ""),
        scale="quick" if quick else "full",
        params={
            "bomb": f"one entry, file_path of {chars:,} characters, one deflate block",
            "real manifest": "v2 data entries with column metrics, ~64 kB deflate blocks, "
            "as many entries as make it the bomb's size on disk",
            "bound": f"MAX_BLOCK_BYTES = {MAX_BLOCK_BYTES:,}",
            "measure": "VmHWM of a fresh subprocess per run, reset after its imports",
        },
    )
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="pp-bench-bomb-") as tmp:
        bomb, real = Path(tmp) / "bomb.avro", Path(tmp) / "real.avro"
        bomb_size = write_manifest_bomb(str(bomb), chars)
        real_entries = _real_manifest(real, bomb_size)
        print(
            f"  bomb {bomb_size / 1024:.0f} KiB; real manifest {real.stat().st_size / 1024:.0f} "
            f"KiB, {real_entries:,} entries",
            flush=True,
        )
        for mode in MODES:
            one = _run_child(mode, real if mode == "bounded-real" else bomb)
            one["file_kib"] = (real if mode == "bounded-real" else bomb).stat().st_size / 1024
            runs[mode] = one
            growth = one["run_peak_mb"] - one["start_mb"]
            print(
                f"  {mode:15s} peak {one['run_peak_mb']:.0f} MB (from {one['start_mb']:.0f} MB, "
                f"+{growth:.0f}) in {one['seconds']:.1f} s; {one['entries']:,} entries, "
                f"error: {(one['error'] or '-')[-90:]}",
                flush=True,
            )

    def grew(mode: str) -> float:
        return float(runs[mode]["run_peak_mb"] - runs[mode]["start_mb"])

    refused = "exceeds MAX_BLOCK_BYTES" in (runs["bounded-bomb"]["error"] or "")
    result.add(
        Figure(
            "RSS growth reading the bomb (refused)",
            grew("bounded-bomb"),
            "MB",
            baseline=grew("unbounded-bomb"),
            ratio=grew("unbounded-bomb") / max(grew("bounded-bomb"), 1),
            target=f"< {bound_mb + SLACK_MB:.0f} MB (one block's bound + {SLACK_MB})",
            met=refused and grew("bounded-bomb") < bound_mb + SLACK_MB,
            why="baseline: fastavro's container reader, as the handler read manifests "
            "before; ratio = baseline / ours"
            + ("" if refused else f"; NOT refused: {runs['bounded-bomb']}"),
        ),
        Figure(
            f"RSS growth reading a real manifest of the same size ({real_entries:,} entries)",
            grew("bounded-real"),
            "MB",
            why=f"{runs['bounded-real']['file_kib']:.0f} KiB on disk, bomb "
            f"{runs['bounded-bomb']['file_kib']:.0f} KiB; every entry read",
        ),
    )
    lines = [
        "| run | file KiB | RSS before MB | peak MB | growth MB | seconds | entries | error |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for mode in MODES:
        r = runs[mode]
        lines.append(
            f"| {mode} | {r['file_kib']:.0f} | {r['start_mb']:.0f} | {r['run_peak_mb']:.0f} | "
            f"{grew(mode):.0f} | {r['seconds']:.1f} | {r['entries']:,} | {r['error'] or ''} |"
        )
    result.section("Runs", "\n".join(lines))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, metavar=("MODE", "MANIFEST"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
