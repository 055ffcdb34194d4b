"""The package's shape, checked from the source tree (docs/architecture.md): every module imports under the name
pyproject.toml gives it, and the runtime never pulls in torch or the training side.

The import names come from ``[tool.setuptools.package-dir]`` (``runtime/`` is ``trep_edge.runtime``, ...), so a
folder moved or renamed without its mapping fails here, not first in a user's wheel. Fast: one in-process import of
every module (torch is installed in dev and CI) and one fresh interpreter for the runtime.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trep_edge.extras import EXTRA_OF_MODULE

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("runtime", "training", "datasets", "trep_edge")
"""Source folders whose every module is checked (models/ and deploy/ carry data, no code)."""
RUNTIME = "trep_edge.runtime"
TRAINING = "trep_edge.training"
FORBIDDEN_IN_RUNTIME = ("torch", TRAINING, "fhir")
"""``fhir`` is fhir.resources, the tests' FHIR validator: the runtime builds its FHIR output as plain dicts."""
OPTIONAL_MODULES = set(EXTRA_OF_MODULE) | {"river", "stumpy"}
"""Top-level modules of pip extras (``trep_edge.extras`` and the [bench] peers): a module that needs one of these
may be skipped where it is not installed, never where it is."""


def _setuptools(repo: Path = REPO) -> dict:
    return tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]


def module_names(repo: Path = REPO, roots: tuple[str, ...] = ROOTS) -> dict[str, Path]:
    """Import name → file for every .py file under the top-level folders ``roots``, named by the package-dir
    mapping of ``repo`` (each folder holds its part of the package: ``runtime/trep_edge/runtime/...``)."""
    names = {}
    for package, folder in _setuptools(repo)["package-dir"].items():
        if folder.split("/")[0] not in roots:
            continue
        for path in sorted((repo / folder).rglob("*.py")):
            parts = list(path.relative_to(repo / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join([package, *parts])] = path
    found = {folder.split("/")[0] for folder in _setuptools(repo)["package-dir"].values()}
    assert set(roots) <= found, f"{sorted(set(roots) - found)} have no entry in pyproject's package-dir"
    return names


def imported_names(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth (functions, try blocks, ...).

    Relative imports are resolved against ``module``; ``from X import y`` gives both ``X`` and ``X.y`` (y may be a
    submodule); ``importlib.import_module("...")`` and ``__import__("...")`` with a constant name count too.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _is_under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def training_imports(names: dict[str, Path], repo: Path = REPO) -> list[str]:
    """``file:line imports X`` for every import of the training side in the runtime modules among ``names``."""
    return [f"{path.relative_to(repo)}:{line} imports {target}"
            for module, path in names.items() if _is_under(module, RUNTIME)
            for line, target in imported_names(path, module) if _is_under(target, TRAINING)]  # fmt: skip


PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def modules_loaded_by(names: list[str]) -> set[str]:
    """Every module a fresh interpreter holds after importing ``names`` (and nothing else)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *names], capture_output=True, text=True, timeout=120,
                          cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, f"importing {names} failed:\n{proc.stderr[-3000:]}"
    return set(json.loads(proc.stdout.splitlines()[-1]))


def forbidden(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(_is_under(m, bad) for bad in FORBIDDEN_IN_RUNTIME))


ALL = module_names()


def test_every_source_folder_is_found_and_every_package_is_listed_for_the_wheel():
    assert {RUNTIME + ".service.daemon", RUNTIME + ".core.monitor", TRAINING + ".export", TRAINING + ".evaluation.detection",
            "trep_edge.datasets.archive", "trep_edge.cli"} <= set(ALL)  # fmt: skip
    packages = {name for name, path in ALL.items() if path.name == "__init__.py"}
    folders = {name.rpartition(".")[0] for name, path in ALL.items() if path.name != "__init__.py"}
    assert folders <= packages, f"folders with modules but no __init__.py: {sorted(folders - packages)}"
    unlisted = packages - set(_setuptools()["packages"])
    assert not unlisted, f"packages missing from pyproject's [tool.setuptools] packages (not in the wheel): {unlisted}"


def test_every_import_name_is_the_tail_of_its_file_path():
    """``trep_edge.runtime.core.scoring`` is ``runtime/trep_edge/runtime/core/scoring.py``: grep and editors find a module by
    its import name, with no mapping table to know."""
    for name, path in ALL.items():
        tail = Path(*name.split(".")) / ("__init__.py" if path.name == "__init__.py" else "")
        tail = tail if path.name == "__init__.py" else tail.with_suffix(".py")
        assert path.relative_to(REPO).as_posix().endswith(tail.as_posix()), f"{name} lives in {path}"


def test_the_path_check_can_fail(tmp_path):
    """The old layout (``runtime/scoring.py`` imported as ``trep_edge.runtime.core.scoring``) breaks the rule above."""
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "scoring.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"trep_edge.runtime" = "runtime"\n')
    ((name, path),) = module_names(tmp_path, ("runtime",)).items()
    assert not path.relative_to(tmp_path).as_posix().endswith(name.replace(".", "/") + ".py")


def relative_imports(names: dict[str, Path], repo: Path = REPO) -> list[str]:
    """``file:line`` of every relative import (``from .x import y``) among ``names``."""
    return [f"{path.relative_to(repo)}:{node.lineno}" for path in names.values()
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ImportFrom) and node.level]  # fmt: skip


def test_imports_are_absolute():
    hits = relative_imports(ALL)
    assert not hits, "use absolute imports (from trep_edge.runtime.x import y):\n" + "\n".join(hits)


def typing_only_lines(path: Path) -> set[int]:
    """Lines inside ``if TYPE_CHECKING:`` blocks: imports there only name types for annotations and never run."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            lines |= {n.lineno for child in node.body for n in ast.walk(child) if hasattr(n, "lineno")}
    return lines


def import_cycles(names: dict[str, Path]) -> list[list[str]]:
    """Cycles in the graph of imports between the project's modules, at any depth (function-level imports count:
    an import moved into a function to dodge a circle is still a circle)."""
    graph = {module: sorted({target for line, target in imported_names(path, module)
                             if target in names and line not in typing_only_lines(path)} - {module})
             for module, path in names.items()}  # fmt: skip
    graph = {module: [t for t in targets if not _is_under(module, t)] for module, targets in graph.items()}
    cycles, state = [], {}

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for target in graph[module]:
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_circles():
    cycles = import_cycles(ALL)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_hidden_circle(tmp_path):
    folder = tmp_path / "runtime" / "trep_edge" / "runtime"
    folder.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"trep_edge.runtime" = "runtime/trep_edge/runtime"\n')
    (folder / "__init__.py").write_text("")
    (folder / "a.py").write_text("import trep_edge.runtime.b\n")
    (folder / "b.py").write_text("def f():\n    from trep_edge.runtime import a\n")
    assert import_cycles(module_names(tmp_path, ("runtime",))) == [
        ["trep_edge.runtime.a", "trep_edge.runtime.b", "trep_edge.runtime.a"]]


@pytest.mark.parametrize("name", sorted(ALL))
def test_module_imports_under_its_pyproject_name(name):
    if name.rpartition(".")[2] == "__main__":  # importing it would run the program: finding it is the check
        assert importlib.util.find_spec(name) is not None
        return
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top in OPTIONAL_MODULES and importlib.util.find_spec(top) is None:
            pytest.skip(f"{name} needs {top}, an optional extra not installed here")
        raise
    assert Path(module.__file__).resolve() == ALL[name].resolve(), f"{name} imports from {module.__file__}"


CORE, SERVICE = RUNTIME + ".core", RUNTIME + ".service"
IMPURE = ("threading", "socket", "queue", "signal", "subprocess", "paho", "http", SERVICE)
"""What the runtime's core never imports: threads, network, processes and the service shell around it."""


def impure_imports(names: dict[str, Path], repo: Path = REPO) -> list[str]:
    return [f"{path.relative_to(repo)}:{line} imports {target}"
            for module, path in names.items() if _is_under(module, CORE)
            for line, target in imported_names(path, module) if any(_is_under(target, bad) for bad in IMPURE)]  # fmt: skip


def test_the_runtime_core_is_pure():
    """The core (model file and card, preprocessing, stream state, engines, scoring, alert decision, monitor) runs
    the same offline and in the daemon: it never imports threads, sockets or the service shell."""
    assert sum(_is_under(name, CORE) for name in ALL) > 8 and sum(_is_under(name, SERVICE) for name in ALL) > 8
    hits = impure_imports(ALL)
    assert not hits, "keep the runtime core pure:\n" + "\n".join(hits)


def test_the_purity_check_can_fail(tmp_path):
    folder = tmp_path / "runtime" / "trep_edge" / "runtime"
    (folder / "core").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"trep_edge.runtime" = "runtime/trep_edge/runtime"\n')
    (folder / "core" / "monitor.py").write_text(
        "import threading\n\n\ndef f():\n    from trep_edge.runtime.service import daemon\n")
    hits = impure_imports(module_names(tmp_path, ("runtime",)), tmp_path)
    assert [hit.split(" imports ")[1] for hit in hits] == ["threading", "trep_edge.runtime.service",
                                                             "trep_edge.runtime.service.daemon"]


def test_runtime_modules_load_neither_torch_nor_training():
    runtime = sorted(name for name in ALL if _is_under(name, RUNTIME))
    assert len(runtime) > 10
    loaded = forbidden(modules_loaded_by(runtime))
    assert not loaded, f"the runtime must run on an edge box without torch; importing it loads {loaded[:10]}"


def test_the_import_probe_sees_a_forbidden_module():
    """The check above can fail: the same probe on a training module reports both torch and the training side."""
    found = forbidden(modules_loaded_by([TRAINING + ".step_graph"]))
    assert "torch" in found and TRAINING + ".step_graph" in found


def test_no_runtime_source_imports_training_anywhere():
    """Function-level and lazy imports count: they load torch as soon as the line runs on an edge box."""
    hits = training_imports(ALL)
    assert not hits, "the runtime must not import trep_edge.training:\n" + "\n".join(hits)


def test_the_source_scan_finds_imports_at_any_depth(tmp_path):
    """The scan above can fail: a throwaway runtime package with three hidden ways of importing the training side."""
    folder = tmp_path / "runtime" / "trep_edge" / "runtime"
    folder.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"trep_edge.runtime" = "runtime/trep_edge/runtime"\n')
    (folder / "__init__.py").write_text("")
    (folder / "lazy.py").write_text(
        "import os\n\n\ndef f():\n    from ..training import export\n\n\n"
        "def g():\n    import trep_edge.training.trainer\n\n\n"
        "def h():\n    import importlib\n    return importlib.import_module('trep_edge.training.encoder')\n"
    )  # fmt: skip
    names = module_names(tmp_path, ("runtime",))
    assert set(names) == {RUNTIME, RUNTIME + ".lazy"}
    lines = sorted({hit.split(" imports ")[0] for hit in training_imports(names, tmp_path)})
    assert lines == [f"runtime/trep_edge/runtime/lazy.py:{n}" for n in (14, 5, 9)]
