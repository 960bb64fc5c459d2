"""A reproducible install: every dependency pinned with hashes in the lock, pip and uv pinned.

``make`` installs ``requirements-dev.lock`` (written by ``make lock``) with
``--require-hashes`` and then the project alone, editable, with ``--no-deps``: a
dependency of pyproject.toml missing from the lock would fail that install, or be
left out. docs/security.md, "A reproducible supply chain".
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements-dev.lock"
MAKEFILE = ROOT / "Makefile"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _project_requirements() -> list[Requirement]:
    """The runtime dependencies and the dev extra, with the extras it names of the
    project itself (``polaris-pipeline[webserver,...]``) followed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    name = canonicalize_name(project["name"])
    out = [Requirement(r) for r in project["dependencies"]]
    todo, seen = ["dev"], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in extras[extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == name:
                todo += sorted(req.extras)
            else:
                out.append(req)
    return out


def lock_pins(text: str) -> dict[str, list[tuple[Version, bool]]]:
    """Per package: each pinned version and whether its entry carries a hash."""
    pins: dict[str, list[tuple[Version, bool]]] = {}
    entries = re.split(r"\n(?=[A-Za-z0-9])", text)
    for entry in entries:
        match = _PIN.match(entry)
        if match:
            hashed = "--hash=sha256:" in entry
            pins.setdefault(canonicalize_name(match[1]), []).append((Version(match[2]), hashed))
    return pins


def unpinned(requirements: list[Requirement], lock_text: str) -> list[str]:
    """Each requirement with no pinned, hashed line in the lock that satisfies it."""
    pins = lock_pins(lock_text)
    missing = []
    for req in requirements:
        found = pins.get(canonicalize_name(req.name), [])
        if not found or not all(
            hashed and req.specifier.contains(v, prereleases=True) for v, hashed in found
        ):
            missing.append(str(req))
    return missing


def test_the_lock_pins_every_dependency_of_pyproject_with_hashes() -> None:
    requirements = _project_requirements()
    names = {canonicalize_name(r.name) for r in requirements}
    assert {"dagster", "sqlalchemy", "fastavro", "pytest", "dagster-webserver"} <= names
    text = LOCK.read_text()
    assert unpinned(requirements, text) == []
    # Every entry of the lock, not only the direct ones, carries its hashes.
    assert all(hashed for found in lock_pins(text).values() for _, hashed in found)


def test_the_check_finds_a_dependency_the_lock_lost_or_pins_outside_its_range() -> None:
    requirements = [Requirement("fastavro>=1.9"), Requirement("pydantic>=2.9,<3")]
    lock = "fastavro==1.12.0 \\\n    --hash=sha256:00\npydantic==3.0.0 \\\n    --hash=sha256:11\n"
    assert unpinned(requirements, lock) == ["pydantic<3,>=2.9"]
    assert unpinned(requirements, lock.replace("fastavro", "fastjson")) == [
        "fastavro>=1.9",
        "pydantic<3,>=2.9",
    ]
    assert unpinned(requirements[:1], "fastavro==1.12.0\n") == ["fastavro>=1.9"]


def _make_variable(name: str) -> str:
    match = re.search(rf"^{name} := (\S+)$", MAKEFILE.read_text(), re.M)
    assert match, name
    return match[1]


def _recipe(target: str) -> tuple[str, str]:
    """(prerequisites, recipe) of ``target`` in the Makefile."""
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M)
    assert match, target
    return match[1], match[2].replace("\\\n", " ")


def test_the_makefile_pins_pip_and_uv_and_installs_from_the_lock() -> None:
    pip, uv = _make_variable("PIP_VERSION"), _make_variable("UV_VERSION")
    assert re.fullmatch(r"\d+(\.\d+)+", pip) and re.fullmatch(r"\d+(\.\d+)+", uv), (pip, uv)
    assert _make_variable("LOCK") == LOCK.name
    _, tools = _recipe("$(TOOLS)")
    assert "pip install --quiet pip==$(PIP_VERSION) uv==$(UV_VERSION)" in tools
    assert "--upgrade" not in MAKEFILE.read_text()
    prerequisites, install = _recipe("$(BIN)/.installed")
    # Re-run when the lock changes, or the installers' versions (the stamp's name).
    assert {"$(LOCK)", "$(TOOLS)", "pyproject.toml"} <= set(prerequisites.split())
    assert "--require-hashes -r $(LOCK)" in install
    assert "--no-deps -e ." in install
    assert "[dev]" not in install  # nothing resolved outside the lock
    _, lock = _recipe("lock")
    assert "uv pip compile" in lock and "--generate-hashes" in lock
    assert "--extra dev --output-file $(LOCK) pyproject.toml" in lock
    # This venv was made by that Makefile.
    assert (version("pip"), version("uv")) == (pip, uv)


def test_the_lock_is_what_make_lock_writes() -> None:
    """Its header names the Makefile's command, variables filled in (uv leaves out --quiet)."""
    _, recipe = _recipe("lock")
    command = re.sub(r"\s+", " ", recipe).strip().replace(" --quiet", "")
    command = command.replace("$(BIN)", ".venv/bin").replace("$(LOCK)", LOCK.name)
    header = LOCK.read_text().splitlines()[1].removeprefix("#").strip()
    assert ".venv/bin/" + header == command


def test_make_test_fast_installs_the_binaries_its_tests_start() -> None:
    """A fresh machine's `make test-fast` failed on pgbouncer (tests/test_pgbouncer_instance.py
    is not slow): only `make system` installed it. The fast suite's target installs it, by the
    one script `make system` runs too."""
    prerequisites, _ = _recipe("test-fast")
    assert "fast-system" in prerequisites.split()
    _, fast_system = _recipe("fast-system")
    assert "scripts/install-pgbouncer.sh" in fast_system
    assert "scripts/install-storage-emulators.sh" in fast_system
    system_script = (ROOT / "scripts" / "install-system-packages.sh").read_text()
    assert "bash scripts/install-pgbouncer.sh" in system_script
    assert "apt-get install -y pgbouncer" not in system_script  # one install, not two
    pgbouncer_tests = (ROOT / "tests" / "test_pgbouncer_instance.py").read_text()
    assert "pytest.mark.slow" not in pgbouncer_tests.split("def test_the_example_refuses")[1]
