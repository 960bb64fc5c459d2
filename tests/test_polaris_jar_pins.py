"""scripts/install-polaris-classes.sh refuses a jar whose SHA-256 is not the one
tests/polaris/jars.sha256 pins (issue 45, supply chain): its ``--verify DIR`` check, the
one the installer runs on resolved jars and on a cached release each run, here on jars of
our own making with a pins list of our own (PP_POLARIS_PINS)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tests.support.polaris_classes import INSTALL_SCRIPT, REPO

PINS = REPO / "tests" / "polaris" / "jars.sha256"


def _verify(directory: Path, pins: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", INSTALL_SCRIPT, "--verify", str(directory)],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PP_POLARIS_PINS": str(pins)},
        capture_output=True,
        text=True,
        check=False,
    )


def _jars(tmp_path: Path) -> tuple[Path, Path]:
    lib = tmp_path / "lib"
    lib.mkdir()
    lines = ["# a comment line is no pin"]
    for name, body in (("a-1.0.jar", b"jar a"), ("b-2.0.jar", b"jar b")):
        (lib / name).write_bytes(body)
        lines.append(f"{hashlib.sha256(body).hexdigest()}  {name}")
    pins = tmp_path / "pins"
    pins.write_text("\n".join(lines) + "\n")
    return lib, pins


def test_jars_with_their_pinned_digest_pass(tmp_path: Path) -> None:
    lib, pins = _jars(tmp_path)
    done = _verify(lib, pins)
    assert done.returncode == 0 and done.stderr == "", done


def test_a_changed_jar_is_refused_with_one_line_naming_it(tmp_path: Path) -> None:
    lib, pins = _jars(tmp_path)
    (lib / "b-2.0.jar").write_bytes(b"jar b, tampered")
    done = _verify(lib, pins)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "b-2.0.jar has SHA-256" in lines[0], done.stderr
    assert hashlib.sha256(b"jar b, tampered").hexdigest() in lines[0]


def test_a_jar_without_a_pin_is_refused(tmp_path: Path) -> None:
    lib, pins = _jars(tmp_path)
    (lib / "c-3.0.jar").write_bytes(b"jar c")
    done = _verify(lib, pins)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"install-polaris-classes: c-3.0.jar has no pinned SHA-256 in {pins}"
    ]


def test_the_pins_list_pins_one_digest_per_jar() -> None:
    """tests/polaris/jars.sha256: a 64-hex digest and a jar name a line, each name once."""
    names = []
    for line in PINS.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        digest, name = line.split()
        assert len(digest) == 64 and int(digest, 16) >= 0 and name.endswith(".jar"), line
        names.append(name)
    assert names and len(names) == len(set(names))
