"""Peak memory of the manifest handler on manifests of 100,000 and 1,000,000 entries.

Manifests use the Iceberg v2 manifest-entry schema (the Avro schema pyiceberg
derives, written by fastavro in Java-sized deflate blocks, see
``bench/manifests.py``), each entry with the column metrics Java writers
record. They name local data files that do not exist: the handler finds every
one missing (which it counts and accepts) and then deletes the manifest, so
the work per entry is the handler's own: decode, guard check, one ``lstat``.

Every measurement runs in a fresh subprocess (``python -m bench.memory
--child``) and reports the process's peak resident set (``VmHWM``):

- *ours*: ``run_manifest_cleanup`` through a ``CleanupContext``;
- *baseline*: pyiceberg's ``ManifestFile.fetch_manifest_entry`` (every entry
  read into one list), the usual way to read a manifest in Python;
- *floor*: the same imports and nothing else.

The peak is taken twice: the process's high-water mark (imports included) and,
after resetting it once the imports are done (``/proc/self/clear_refs``), the
run's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import BenchResult, Figure

TITLE = "6. Manifest handler memory (100k and 1M entries)"
FULL = {"sizes": (100_000, 1_000_000)}
QUICK = {"sizes": (10_000, 100_000)}
MODES = ("floor", "ours", "baseline")
LIMIT_MB = 250
GROWTH_LIMIT = 0.20


# ------------------------------------------------------------------ the child


def _status_mb(key: str) -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_mb() -> float:
    return _status_mb("VmHWM")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux: ``5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(mode: str, manifest: str, location: str, entries: int) -> dict[str, Any]:
    # The same imports in every mode, so "floor" is the common starting point.
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestFile

    import polaris_pipeline.cleanup.manifest as handler_module
    from builders.manifests import WrittenManifest
    from builders.tasks import task_row
    from polaris_pipeline.cleanup.context import CleanupContext
    from polaris_pipeline.storage.config import StorageConfig
    from polaris_pipeline.storage.resolve import StorageResolver
    from polaris_pipeline.tasks.model import NewTask, TaskType
    from polaris_pipeline.tasks.payloads import (
        ManifestCleanupPayload,
        TableIdentifier,
        encode_manifest_cleanup,
        task_properties,
    )

    uri = "file://" + manifest
    written = WrittenManifest(manifest, entries, os.path.getsize(manifest), 1)
    out: dict[str, Any] = {"mode": mode, "entries": entries}
    # The imports above peak higher than they settle (pyarrow): keep that peak apart,
    # then measure the run's own peak from the settled RSS.
    import_peak = _peak_mb()
    out["reset"] = _reset_peak()
    start_mb = _status_mb("VmRSS")
    t0 = time.perf_counter()
    if mode == "ours":
        payload = ManifestCleanupPayload(TableIdentifier(("ns",), "t"), written.ref(uri))
        task = task_row(
            NewTask(
                realm_id="POLARIS",
                id=1,
                name="memory-bench",
                properties=task_properties(
                    TaskType.MANIFEST_FILE_CLEANUP, encode_manifest_cleanup(payload)
                ),
                internal_properties={"storageLocation": location},
            )
        )
        config = StorageConfig()
        result = handler_module.run_manifest_cleanup(
            CleanupContext(task=task, resolver=StorageResolver(config), config=config)
        )
        out.update(
            deleted=result.deleted,
            missing=result.missing,
            failed=len(result.failed),
            refused=len(result.refused),
        )
    elif mode == "baseline":
        mf = ManifestFile.from_args(
            manifest_path=uri,
            manifest_length=written.length,
            partition_spec_id=0,
            content=0,
            sequence_number=1,
            min_sequence_number=1,
            added_snapshot_id=1,
        )
        listed = mf.fetch_manifest_entry(PyArrowFileIO(), discard_deleted=False)
        out["listed"] = len(listed)
        out["first"] = listed[0].data_file.file_path if listed else None
    out["seconds"] = time.perf_counter() - t0
    out["start_mb"] = start_mb
    out["import_peak_mb"] = import_peak
    out["run_peak_mb"] = _peak_mb()  # since the reset: the run's own high-water mark
    out["peak_mb"] = max(import_peak, out["run_peak_mb"])  # the whole process
    out["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _run_child(mode: str, manifest: Path, location: str, entries: int, scratch: Path) -> Any:
    # The handler deletes the manifest when it is done: give every run its own copy.
    metadata = scratch / "wh" / "ns" / "t" / "metadata"
    metadata.mkdir(parents=True, exist_ok=True)
    copy = metadata / f"{mode}-{entries}-{manifest.name}"
    shutil.copyfile(manifest, copy)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.memory",
            "--child",
            mode,
            str(copy),
            location,
            str(entries),
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    copy.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} on {entries:,} entries failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ time per entry


def per_entry_costs(manifest: Path, location: str, entries: int) -> dict[str, float]:
    """Microseconds per entry of the handler's steps, measured one by one in this process."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from polaris_pipeline.cleanup.guard.paths import PathGuard
    from polaris_pipeline.cleanup.manifest import iter_manifest_entries
    from polaris_pipeline.storage.config import StorageConfig

    io = PyArrowFileIO()
    t0 = time.perf_counter()
    paths = [e.path for e in iter_manifest_entries(io.new_input(str(manifest)))]
    decode = time.perf_counter() - t0
    local_guard = PathGuard.for_table(location, {}, StorageConfig())
    t0 = time.perf_counter()
    for p in paths:
        local_guard.check(p)
    local = time.perf_counter() - t0
    s3_location = "s3://bucket/wh/ns/t"
    s3_paths = [s3_location + p[len(location) :] for p in paths]
    s3_guard = PathGuard.for_table(s3_location, {}, StorageConfig())
    t0 = time.perf_counter()
    for p in s3_paths:
        s3_guard.check(p)
    s3 = time.perf_counter() - t0
    t0 = time.perf_counter()
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.lstat(p.removeprefix("file://"))
    lstat = time.perf_counter() - t0
    return {
        "decode (iter_manifest_entries)": decode / entries * 1e6,
        "guard check, local path": local / entries * 1e6,
        "guard check, S3 path": s3 / entries * 1e6,
        "lstat of an absent file": lstat / entries * 1e6,
    }


# ------------------------------------------------------------------------ main


def run(quick: bool = False) -> BenchResult:
    from builders.manifests import data_file_paths, write_with_fastavro

    sizes = (QUICK if quick else FULL)["sizes"]
    small, large = sizes
    result = BenchResult(
        name="memory",
        title=TITLE,
        command="python -m bench memory" + (" --quick" if quick else ""),
        scale="quick" if quick else "full",
        params={
            "manifest entries": " and ".join(f"{n:,}" for n in sizes),
            "entries": "v2 data-file entries with column sizes, value/null/NaN counts and "
            "lower/upper bounds for 3 columns (as Java writers record them)",
            "files named": "local paths under the table location, absent (counted as missing)",
            "measure": "VmHWM of a fresh subprocess per run",
        },
    )
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pp-bench-memory-") as tmp:
        scratch = Path(tmp)
        location = f"file://{scratch}/wh/ns/t"
        manifests: dict[int, Path] = {}
        for n in sizes:
            path = scratch / f"manifest-{n}.avro"
            t0 = time.perf_counter()
            written = write_with_fastavro(str(path), data_file_paths(location, n), n)
            manifests[n] = path
            print(
                f"  wrote a {n:,}-entry manifest ({written.length / 1e6:.1f} MB) "
                f"in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        for n in sizes:
            for mode in MODES:
                one = _run_child(mode, manifests[n], location, n, scratch)
                one["file_mb"] = manifests[n].stat().st_size / 1e6
                runs.append(one)
                print(
                    f"  {mode:8s} {n:>9,}: process peak {one['peak_mb']:.0f} MB, run peak "
                    f"{one['run_peak_mb']:.0f} MB (from {one['start_mb']:.0f} MB) in "
                    f"{one['seconds']:.1f} s",
                    flush=True,
                )

        costs = per_entry_costs(manifests[small], location, small)

    def get(mode: str, n: int) -> dict[str, Any]:
        return next(r for r in runs if r["mode"] == mode and r["entries"] == n)

    for n in sizes:
        ours, base = get("ours", n), get("baseline", n)
        ok = ours["missing"] == n and ours["failed"] == 0 and ours["deleted"] == 1
        fig = Figure(
            f"peak RSS of the process, {n:,} entries",
            ours["peak_mb"],
            "MB",
            baseline=base["peak_mb"],
            ratio=base["peak_mb"] / ours["peak_mb"],
            target=f"< {LIMIT_MB} MB",
            met=ours["peak_mb"] < LIMIT_MB and ok,
            why=(
                "ratio = baseline / ours (times less); the process's high-water mark, "
                f"imports included (imports alone peak at {get('floor', n)['peak_mb']:.0f} MB)"
                if n == small
                else ""
            ),
        )
        if not ok:
            fig.why = f"handler result unexpected: {ours}"
        result.add(fig)
    for n in sizes:
        ours, base = get("ours", n), get("baseline", n)
        result.add(
            Figure(
                f"peak RSS during the run, {n:,} entries",
                ours["run_peak_mb"],
                "MB",
                baseline=base["run_peak_mb"],
                ratio=base["run_peak_mb"] / ours["run_peak_mb"],
                why=(
                    f"high-water mark reset after the imports (RSS then {ours['start_mb']:.0f}"
                    " MB), so the import spike does not hide the run's own peak"
                    if n == small
                    else ""
                ),
            )
        )

    def growth_of(mode: str) -> float:
        return float(get(mode, large)["run_peak_mb"] / get(mode, small)["run_peak_mb"] - 1)

    growth, base_growth = growth_of("ours"), growth_of("baseline")
    growth_fig = Figure(
        f"peak RSS growth from {small:,} to {large:,} entries (during the run)",
        growth * 100,
        "%",
        baseline=base_growth * 100,
        target=f"< {GROWTH_LIMIT:.0%}",
        met=growth < GROWTH_LIMIT,
    )
    file_growth = get("ours", large)["file_mb"] - get("ours", small)["file_mb"]
    process_growth = get("ours", large)["peak_mb"] / get("ours", small)["peak_mb"] - 1
    if not growth_fig.met:
        growth_fig.why = (
            f"the {large:,}-entry file is {get('ours', large)['file_mb']:.0f} MB, "
            f"{file_growth:.0f} MB more than the {small:,}-entry one; whole-process peak "
            f"growth {process_growth * 100:.0f} %"
        )
    else:
        growth_fig.why = (
            f"manifests of {get('ours', small)['file_mb']:.0f} and "
            f"{get('ours', large)['file_mb']:.0f} MB; whole-process peak growth "
            f"{process_growth * 100:.1f} %"
        )
    result.add(growth_fig)
    result.add(
        Figure(
            f"entries per second, {large:,} entries",
            large / get("ours", large)["seconds"],
            "entries/s",
            baseline=large / get("baseline", large)["seconds"],
            ratio=get("baseline", large)["seconds"] / get("ours", large)["seconds"],
            why="ratio = baseline time / ours: below 1 means ours is slower. Ours decodes, "
            "guard-checks and lstat()s every entry and deletes in chunks; the baseline only "
            "decodes them into a list",
        )
    )

    lines = [
        "| entries | manifest MB | run | process peak MB | RSS before the run MB | "
        "peak during the run MB | seconds | result |",
        "|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    labels = {
        "floor": "floor: imports only",
        "ours": "ours: run_manifest_cleanup",
        "baseline": "baseline: pyiceberg fetch_manifest_entry",
    }
    for r in runs:
        if r["mode"] == "ours":
            res = f"{r['missing']:,} missing, {r['deleted']} deleted, {r['failed']} failed"
        elif r["mode"] == "baseline":
            res = f"{r['listed']:,} entries listed"
        else:
            res = ""
        lines.append(
            f"| {r['entries']:,} | {r['file_mb']:.1f} | {labels[r['mode']]} | "
            f"{r['peak_mb']:.0f} | {r['start_mb']:.0f} | {r['run_peak_mb']:.0f} | "
            f"{r['seconds']:.1f} | {res} |"
        )
    result.section("Runs", "\n".join(lines))
    result.section(
        f"Where the handler's time goes (µs per entry, {small:,}-entry manifest)",
        "| step | µs per entry |\n|---|---:|\n"
        + "\n".join(f"| {k} | {v:.1f} |" for k, v in costs.items())
        + "\n\nMeasured step by step in the benchmark's own process. The guard's check "
        "of a path searches it for control characters with one compiled regex and splits "
        "it into segments (`cleanup/guard/paths.py` `_parse`); for a local path it resolves the "
        "parent directory on every check (`os.path.realpath`, never cached: a directory "
        "checked once can be swapped for a link; the file name itself is never resolved, "
        "since unlinking a symlink removes the link).",
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=4, metavar=("MODE", "MANIFEST", "LOCATION", "ENTRIES"))
    args = parser.parse_args()
    if args.child:
        mode, manifest, location, entries = args.child
        print(json.dumps(child(mode, manifest, location, int(entries))))
