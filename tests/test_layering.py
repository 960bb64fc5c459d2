"""The package's layers, as its imports draw them.

The engine (everything under ``polaris_pipeline`` but ``dagster/``) imports no
Dagster; the package never imports the test and demo builders of the top-level
``builders`` package, which is not installed, nor this repository's own code location
(``assets``, ``jobs``, ...).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "polaris_pipeline"
CODE_LOCATION = {"assets", "jobs", "resources", "sensors", "definitions", "celery_definitions"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(*exclude: str) -> dict[Path, set[str]]:
    return {
        path: _imports(path)
        for path in PACKAGE.rglob("*.py")
        if not any(part in exclude for part in path.relative_to(PACKAGE).parts[:-1])
    }


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_engine_imports_no_dagster() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in names if _top(n).startswith("dagster"))
        for path, names in _modules("dagster").items()
    }
    assert {p: n for p, n in offenders.items() if n} == {}
    assert len(offenders) > 20  # the walk found the engine


def test_the_package_never_imports_the_builders_or_the_code_location() -> None:
    # Neither is installed: an import of one works in this checkout and nowhere else.
    outside = CODE_LOCATION | {"builders"}
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in names if _top(n) in outside)
        for path, names in _modules().items()
    }
    assert {p: n for p, n in offenders.items() if n} == {}
    assert len(offenders) > 100  # the walk found the package


def test_the_builders_are_not_in_the_installed_package() -> None:
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["polaris_pipeline*"]
    assert not (PACKAGE / "testing").exists()
    assert (PACKAGE.parent / "builders" / "tables.py").is_file()


# storage/ from the bottom up: a module imports only modules of its own layer or below.
STORAGE_LAYERS = (
    ("uri", "redact"),  # the scheme table and the location rule; masking
    ("options", "named"),  # which filesystem serves a scheme, which options it takes; names
    ("retention_probe",),  # whether a bucket keeps what is deleted from it
    ("config", "catalog_config"),
    ("scope", "local_walk"),  # a task's credential scope; a delete that follows no link
    ("credentials.cache",),
    ("credentials.s3", "credentials.azure", "credentials.gcs"),
    ("input_file",),  # a pyiceberg file read through a resolver it does not import
    ("resolve",),
    ("delete", "listing"),
    ("deletion_record",),  # the record of what a delete did
)
# Imports of the package inside a function of storage/, each on purpose.
STORAGE_LAZY_IMPORTS = {
    ("resolve", "polaris_pipeline.storage.input_file"): (
        "it imports pyiceberg (about a second): only runs that read metadata pay for it"
    ),
}


def _storage_imports(path: Path) -> list[tuple[str, bool]]:
    """``(module, inside a function)`` for each import of the package in ``path``."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                if child.module == "polaris_pipeline.storage":  # from ...storage import uri
                    found.extend((f"{child.module}.{a.name}", in_function) for a in child.names)
                else:
                    found.append((child.module, in_function))
            visit(child, nested)

    visit(ast.parse(path.read_text(), str(path)), False)
    return [(m, f) for m, f in found if _top(m) == "polaris_pipeline"]


def test_storage_is_layered() -> None:
    storage = PACKAGE / "storage"
    layer = {name: i for i, names in enumerate(STORAGE_LAYERS) for name in names}
    modules = {
        ".".join(p.relative_to(storage).with_suffix("").parts): p
        for p in storage.rglob("*.py")
        if p.name != "__init__.py"
    }
    assert set(modules) == set(layer), "every module of storage/ has a layer"
    upward: list[str] = []
    lazy: list[str] = []
    for name, path in modules.items():
        for module, in_function in _storage_imports(path):
            target = module.removeprefix("polaris_pipeline.storage.")
            above = layer.get(target, len(STORAGE_LAYERS)) > layer[name]  # unknown: above all
            if module.startswith("polaris_pipeline.storage.") and above:
                upward.append(f"{name} -> {target}")
            if in_function and (name, module) not in STORAGE_LAZY_IMPORTS:
                lazy.append(f"{name}: {module}")
    assert upward == []
    assert lazy == []
    # The allow-list names imports that exist.
    assert all((m, True) in _storage_imports(modules[n]) for n, m in STORAGE_LAZY_IMPORTS)


# The package from the bottom up: a module imports only its own unit or units below it.
# A unit is a subpackage or a root module, or one of the leaves below, each a unit of its
# own: settings/bounds.py (a number's bounds, one message each: the settings check them,
# and so does the engine), the unreferenced phase's mode and report (a realm's policy and
# a handler's result carry them) and execution/outcome.py (the phase's leftover check
# reads the outcome the Runner made).
LEAVES = (
    "settings.bounds",
    "unreferenced.mode",
    "unreferenced.report",
    "execution.outcome",
    "tasks.release",
    "storage.redact",
    "storage.uri",
)
PACKAGE_LAYERS = (
    # The values a setting is checked against: a release, a mode, a URI, a mask.
    ("errors",),
    (
        "settings.bounds",
        "unreferenced.mode",
        "tasks.release",
        "storage.redact",
        "storage.uri",
    ),
    ("settings",),  # every setting, one schema; of the engine only the leaves above
    ("tasks",),  # rows, states, payloads, references: Polaris's data; how it is written
    ("unreferenced.report",),  # what the unreferenced phase found and did, in tasks' words
    ("storage",),  # locations, filesystems, credentials, deletes
    ("metastore",),  # statements and transitions over the rows
    ("cleanup",),  # one handler per task type, on storage
    ("leaks",),  # leaked table roots: the catalogs' locations listed, owners checked
    ("execution.outcome",),  # how one attempt ended
    ("unreferenced",),  # a dropped table's unreferenced files: listing, phase, leftover check
    ("execution",),  # start, run, observe one lease: the Runner
    ("restore",),  # a held table: restorable, registered again, its purge ended
    ("report",),  # outcomes shown: view, totals, progress, "nothing available"
    ("cli", "dagster"),  # the two front ends; neither imports the other
)
# Imports that point up, each with why it is still there; the test insists each exists,
# so fixing one means removing its entry.
UPWARD_IMPORTS: dict[tuple[str, str], str] = {}


def _unit(module: str) -> str:
    """``polaris_pipeline.storage.uri`` -> ``storage``; a leaf -> itself (``settings.bounds``)."""
    parts = module.split(".")[1:]
    leaf = ".".join(parts[:2])
    if leaf in LEAVES:
        return leaf
    return parts[0] if parts else ""


def _package_imports() -> dict[str, set[str]]:
    """Each module (path under the package) -> the package modules it imports, anywhere."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                if node.module == "polaris_pipeline":  # from polaris_pipeline import x
                    names.update(f"polaris_pipeline.{a.name}" for a in node.names)
        rel = path.relative_to(PACKAGE).as_posix()
        found[rel] = {n for n in names if n.startswith("polaris_pipeline.")}
    return found


def test_the_packages_layers_point_down() -> None:
    layer = {unit: i for i, units in enumerate(PACKAGE_LAYERS) for unit in units}
    imports = _package_imports()
    mine = {
        rel: _unit("polaris_pipeline." + rel.removesuffix(".py").replace("/", "."))
        for rel in imports
    }
    assert set(mine.values()) - {"__init__"} <= set(layer), "every unit has a layer"
    upward: dict[tuple[str, str], list[str]] = {}
    for rel, modules in imports.items():
        if mine[rel] == "__init__":
            continue
        for module in modules:
            target = _unit(module)
            if target != mine[rel] and layer[target] >= layer[mine[rel]]:
                upward.setdefault((rel, target), []).append(module)
    assert sorted(set(upward) - set(UPWARD_IMPORTS)) == []
    assert sorted(set(UPWARD_IMPORTS) - set(upward)) == [], "a fixed one leaves the list"

    # report/ shows outcomes: of execution/ it reads only the outcome (not the Runner).
    report_reads = {
        m
        for rel, ms in imports.items()
        if rel.startswith("report/")
        for m in ms
        if m.split(".")[1] == "execution"
    }
    assert report_reads <= {"polaris_pipeline.execution.outcome"}
    # The command line is a front end: nothing else of the package imports it.
    assert [
        rel
        for rel, ms in imports.items()
        if not rel.startswith("cli/") and any(_unit(m) == "cli" for m in ms)
    ] == []
    # The engine never imports the integration library.
    engine = [rel for rel in imports if mine[rel] not in ("dagster", "testing")]
    assert [rel for rel in engine if any(_unit(m) == "dagster" for m in imports[rel])] == []
    assert len(engine) > 40  # the walk found the engine


def test_the_package_root_holds_no_loose_module() -> None:
    # Each module lives in the package of its concept; the root keeps what every one shares.
    loose = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py", "__main__.py", "errors.py"}
    assert loose == set()
    assert (PACKAGE / "errors.py").is_file()  # the walk looked in the package


def _private_dagster_imports(path: Path) -> list[tuple[int, bool]]:
    """``(line, whether a comment says why just above)`` for each ``dagster._`` import."""
    lines = path.read_text().splitlines()
    found: list[tuple[int, bool]] = []
    for node in ast.walk(ast.parse("\n".join(lines), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        if any(n.startswith("dagster._") for n in names):
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            found.append((node.lineno, above.startswith("#")))
    return found


def test_each_private_dagster_import_says_why() -> None:
    # dagster._ may change in any release: used only where no public name exists, and
    # the line above says which name is missing.
    root = PACKAGE.parent
    files = [*PACKAGE.rglob("*.py")]
    for name in sorted(CODE_LOCATION):
        files += [*(root / name).rglob("*.py")] if (root / name).is_dir() else [root / f"{name}.py"]
    found = {
        f"{path.relative_to(root)}:{line}": why
        for path in files
        if path.is_file()
        for line, why in _private_dagster_imports(path)
    }
    assert [where for where, why in found.items() if not why] == []
    assert len(found) >= 3  # the walk found them
    assert len(files) > 150


def _module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports anywhere (inside a
    function or under ``TYPE_CHECKING`` too); ``from pkg import mod`` counts as ``pkg.mod``."""
    paths = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{a.name}" for a in node.names}
                targets |= submodules if submodules <= set(paths) else {node.module}
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each set of modules that reach one another."""
    reach = {name: set(targets) for name, targets in graph.items()}
    changed = True
    while changed:  # the transitive closure; a few hundred modules, a few passes
        changed = False
        for targets in reach.values():
            more = set().union(*(reach[t] for t in targets)) - targets
            if more:
                targets |= more
                changed = True
    circles = {
        frozenset({n} | {t for t in reach[n] if n in reach[t]}) for n in reach if n in reach[n]
    }
    return sorted(sorted(c) for c in circles)


def test_the_package_has_no_import_circle() -> None:
    graph = _module_graph()
    assert len(graph) > 100  # the walk found the package
    assert _circles(graph) == []
    # The check finds one: a module that imports one of its importers.
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# What settings/ may import of the rest of the package: leaves that import nothing of it
# but errors and each other (the data a setting is checked against), never the engine.
SETTINGS_LEAVES = {
    "polaris_pipeline.errors",
    "polaris_pipeline.storage.redact",  # masking a URL's password in a repr or an error
    "polaris_pipeline.storage.uri",  # the location rule of a deletion record's prefix
    "polaris_pipeline.tasks.release",
    "polaris_pipeline.unreferenced.mode",
}


def test_the_settings_import_nothing_of_the_engine() -> None:
    imports = _package_imports()
    settings = {rel: ms for rel, ms in imports.items() if rel.startswith("settings/")}
    outside = {
        rel: sorted(m for m in ms if not m.startswith("polaris_pipeline.settings"))
        for rel, ms in settings.items()
    }
    assert {rel: [m for m in ms if m not in SETTINGS_LEAVES] for rel, ms in outside.items()} == {
        rel: [] for rel in settings
    }
    # Each leaf is one: it imports of the package only errors and the other leaves.
    for leaf in SETTINGS_LEAVES:
        rel = leaf.removeprefix("polaris_pipeline.").replace(".", "/") + ".py"
        assert imports[rel] <= SETTINGS_LEAVES, leaf
    assert len(settings) > 10  # the walk found settings/


# Where the package reads the environment outside settings/, each with why: none of them
# is a setting of ours (a regression, an os.environ read of one, fails the test below).
ENVIRON_READERS: dict[tuple[str, str], str] = {
    ("dagster/definitions.py", "sweeper_default_status"): (
        "Dagster's own DAGSTER_IS_DEV_CLI, set by `dagster dev` (no public API reads it)"
    ),
    ("dagster/component.py", "_as_env_var"): (
        "which variable holds a rendered value, so the resource keeps the EnvVar, not it"
    ),
    ("storage/config.py", "_resolve_env"): "a storage config's {env: NAME}: the user's names",
    ("storage/credentials/azure.py", "configured_key"): "the Azure SDK's credential chain",
    ("storage/credentials/gcs.py", "gcs_emulator"): "the Google SDK's STORAGE_EMULATOR_HOST",
    ("cli/table.py", "output_width"): "the terminal's COLUMNS",
}


def _environ_reads(path: Path) -> set[str]:
    """The functions of ``path`` that touch ``os.environ``/``os.getenv`` (``""``: the
    module's own top level), or import either by name."""
    found: set[str] = set()

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inside = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inside = child.name
            if (
                isinstance(child, ast.Attribute)
                and child.attr in ("environ", "getenv", "environb", "getenvb")
                and isinstance(child.value, ast.Name)
                and child.value.id == "os"
            ) or (
                isinstance(child, ast.ImportFrom)
                and child.module == "os"
                and any(a.name in ("environ", "getenv") for a in child.names)
            ):
                found.add(function)
            visit(child, inside)

    visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_nothing_outside_the_settings_reads_the_environment_for_a_setting() -> None:
    reads = {
        (path.relative_to(PACKAGE).as_posix(), function)
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "settings"
        for function in _environ_reads(path)
    }
    assert sorted(reads - set(ENVIRON_READERS)) == []
    assert sorted(set(ENVIRON_READERS) - reads) == [], "a fixed one leaves the list"
    # The walk sees a read: the settings' own reader is one.
    assert _environ_reads(PACKAGE / "settings" / "env.py")
