"""The wheel, installed (not editable) beside a user project with generic module names."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USER_DEFS = """
    from dagster import Definitions, EnvVar

    import assets
    from jobs import greeting_job
    from polaris_pipeline.dagster import PolarisMetastoreResource, build_defs
    from resources import Greeter

    defs = Definitions.merge(
        build_defs(
            metastore=PolarisMetastoreResource(
                url=EnvVar("POLARIS_METASTORE_URL"), realms=["POLARIS"]
            ),
            executor="in_process",
        ),
        Definitions(assets=[assets.hello], jobs=[greeting_job], resources={"greeter": Greeter()}),
    )
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(ROOT), "-w", str(out)],
        check=True,
        capture_output=True,
    )
    [built] = out.glob("polaris_pipeline-*.whl")
    return built


@pytest.mark.slow  # builds the wheel: 19 s, for the edit loop a fifth of a core's minute
def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"polaris_pipeline"}
    with zipfile.ZipFile(wheel) as zf:
        [entry_points] = [n for n in zf.namelist() if n.endswith("entry_points.txt")]
        text = zf.read(entry_points).decode()
    assert "[dagster_dg_cli.registry_modules]" in text
    assert "polaris_pipeline.dagster" in text


def _user_project(path: Path) -> None:
    (path / "assets.py").write_text(
        "from dagster import asset\n\n\n@asset\ndef hello() -> str:\n    return 'hi'\n"
    )
    (path / "jobs").mkdir()
    (path / "jobs" / "__init__.py").write_text(
        "from dagster import job, op\n\n\n@op\ndef greet() -> None:\n    pass\n\n\n"
        "@job\ndef greeting_job() -> None:\n    greet()\n"
    )
    (path / "resources").mkdir()
    (path / "resources" / "__init__.py").write_text(
        "from dagster import ConfigurableResource\n\n\n"
        "class Greeter(ConfigurableResource):\n    word: str = 'hi'\n"
    )
    (path / "sensors").mkdir()
    (path / "sensors" / "__init__.py").write_text("SENSORS: list[object] = []\n")
    (path / "user_defs.py").write_text(textwrap.dedent(USER_DEFS))


@pytest.mark.slow
def test_a_user_project_with_its_own_assets_jobs_resources_builds_definitions(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # The wheel alone goes into the new environment; its dependencies (Dagster,
    # pyiceberg...) are borrowed from ours through a plain path entry, which does not
    # run our environment's .pth files, so our editable install stays invisible.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    (site / "zz_borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    project = tmp_path / "user_project"
    project.mkdir()
    _user_project(project)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME")}
    env["POLARIS_METASTORE_URL"] = f"sqlite:///{tmp_path / 'polaris.db'}"

    where = subprocess.run(
        [
            str(python),
            "-c",
            "import assets, jobs, polaris_pipeline.dagster as d; print(d.__file__); "
            "print(assets.__file__); print(jobs.__file__)",
        ],
        cwd=project,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert where[0].startswith(str(site)), where  # the installed wheel, not this checkout
    assert where[1] == str(project / "assets.py")
    assert where[2] == str(project / "jobs" / "__init__.py")

    validate = subprocess.run(
        [str(python), "-m", "dagster", "definitions", "validate", "-f", "user_defs.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr
    listed = subprocess.run(
        [
            str(python),
            "-c",
            "import user_defs; d = user_defs.defs; "
            "print(sorted(j.name for j in d.jobs)); print(sorted(s.name for s in d.sensors))",
        ],
        cwd=project,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "greeting_job" in listed and "polaris_task_job" in listed
    assert "polaris_task_sweeper" in listed
