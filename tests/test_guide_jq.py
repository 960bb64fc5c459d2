"""Every ``jq`` line of ``docs/operator-guide.md``, run with jq 1.6 and jq 1.7 on deletion
records the CLI wrote (a purge's, with its children's, and a reclaim's).

jq 1.6 reads every number as a double, so a 63-bit id written as a JSON number comes
out rounded (3912837558989358673 as 3912837558989358600); 1.7 keeps a literal's
digits. The records write ids as strings: both versions must print every id whole,
and the same output line for line. jq 1.6 is Debian bookworm's ``/usr/bin/jq``;
1.7.1 is built beside it by ``scripts/install-jq.sh``, which prints its path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builders import tasks as built_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings.storage import DELETION_RECORD_ENV
from tests.support.catalog_storage import polaris_catalog
from tests.support.cli import POLICY_FLAGS, run, url_of
from tests.support.iceberg import Warehouse
from tests.support.leaks import age_local_files

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "operator-guide.md"
INSTALL_JQ = ROOT / "scripts" / "install-jq.sh"
# Past 2**53: a double cannot hold it (jq 1.6 prints 3912837558989358600).
CATALOG_ID = 3912837558989358673

# jq 1.7.1 is built from source where missing (about 1.5 minutes): `make test` builds
# it first (scripts/install-system-packages.sh), `make test-fast` leaves this out.
pytestmark = pytest.mark.slow


def guide_jq_lines() -> list[str]:
    """The guide's ``$ jq ...`` command lines, as written there, comments cut."""
    return [
        line[2:].split("   #")[0]
        for line in GUIDE.read_text().splitlines()
        if line.startswith("$ jq ")
    ]


def _version(jq: str) -> str:
    return subprocess.run([jq, "--version"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def jq_binaries() -> dict[str, str]:
    """Version -> binary: Debian's jq 1.6 and the 1.7.1 ``scripts/install-jq.sh`` builds."""
    old = shutil.which("jq")
    if old is None or _version(old) != "jq-1.6":
        pytest.fail(
            f"jq 1.6 expected on PATH, found {old and _version(old)}: {INSTALL_JQ} installs it"
        )
    done = subprocess.run(["bash", str(INSTALL_JQ)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    new = done.stdout.strip().splitlines()[-1]
    assert _version(new) == "jq-1.7.1", new
    return {"1.6": old, "1.7": new}


def _records_the_cli_wrote(store: Metastore, wh: Warehouse, workdir: Path) -> set[str]:
    """In ``workdir``: ``records/``, one purge's records (a table's and its children's,
    as the guide copies one task's), and ``reclaims/<catalog>/``, a reclaim's (the
    deletion record's prefix is ``workdir/audit``). Returns the task ids the purge's
    records name (their directories)."""
    audit = workdir / "audit"
    purged = wh.build("purged", appends=2)
    store.insert_tasks([built_tasks.drop_table_task(purged)])
    code, out = run(
        "sweep",
        "--metastore",
        url_of(store),
        *POLICY_FLAGS,
        "--deletion-record",
        f"file://{audit}/",
    )
    assert code == 0, out
    records = workdir / "records"
    records.mkdir()
    ids = set()
    for path in (audit / "POLARIS").glob("[0-9]*/*.jsonl"):
        ids.add(path.parent.name)
        shutil.copy(path, records / path.name)
    assert len(ids) >= 3 and any(int(i) > 2**53 for i in ids), ids

    # A leaked root: a table's files with no entity and no task, old enough to reclaim.
    leaked = wh.build("leaked", appends=1)
    age_local_files(Path(leaked.location().removeprefix("file://")), days=10)
    info = {
        "@type": "FileStorageConfigurationInfo",
        "storageType": "FILE",
        "allowedLocations": [wh.uri],
    }
    polaris_catalog(store, json.dumps(info), catalog_id=CATALOG_ID)
    code, out = run(
        "leaks", "--metastore", url_of(store), "--reclaim", leaked.location(), "--min-age-days", "3"
    )
    assert code == 0, out
    shutil.copytree(audit / "POLARIS" / "reclaims", workdir / "reclaims")
    return ids


def test_every_jq_line_of_the_guide_gives_the_same_whole_ids_with_jq_1_6_and_1_7(
    store: Metastore,
    local_warehouse: Warehouse,
    tmp_path: Path,
    jq_binaries: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DELETION_RECORD_ENV, f"file://{tmp_path}/audit/")  # the reclaim's
    ids = _records_the_cli_wrote(store, local_warehouse, tmp_path)
    lines = guide_jq_lines()
    assert len(lines) >= 6, lines
    outputs: dict[str, list[str]] = {}
    for version, jq in jq_binaries.items():
        # The guide's `jq` is each version in turn, found first on PATH.
        bindir = tmp_path / f"bin-{version}"
        bindir.mkdir()
        (bindir / "jq").symlink_to(jq)
        env = {"PATH": f"{bindir}:/usr/bin:/bin"}
        outputs[version] = []
        for line in lines:
            # The guide's attempt 3 is this sweep's attempt 1.
            command = line.replace("records/attempt-3-*", "records/attempt-*")
            proc = subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            assert proc.returncode == 0 and not proc.stderr, (version, command, proc.stderr)
            # Every line finds something but the failures' (this purge had none).
            assert bool(proc.stdout.strip()) != ("failed" in command), (version, command)
            outputs[version].append(proc.stdout)
            if "header" in command:
                headers = [json.loads(out) for out in proc.stdout.splitlines()]
                assert {h["task_id"] for h in headers} == ids, (version, headers)
            if "reclaim" in command:
                [header] = [json.loads(out) for out in proc.stdout.splitlines()]
                assert header["catalog_id"] == str(CATALOG_ID), (version, header)
    assert outputs["1.6"] == outputs["1.7"]
