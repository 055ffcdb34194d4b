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
    """Import name → file for every .py file under ``roots``, named by the package-dir mapping of ``repo``."""
    package_of = {folder: package for package, folder in _setuptools(repo)["package-dir"].items()}
    names = {}
    for root in roots:
        assert root in package_of, f"{root}/ has no entry in pyproject's [tool.setuptools.package-dir]"
        for path in sorted((repo / root).rglob("*.py")):
            parts = list(path.relative_to(repo / root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join([package_of[root], *parts])] = path
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
    assert {RUNTIME + ".daemon", TRAINING + ".export", TRAINING + ".evaluation.detection",
            "trep_edge.datasets.archive", "trep_edge.cli"} <= set(ALL)  # fmt: skip
    packages = {name for name, path in ALL.items() if path.name == "__init__.py"}
    folders = {name.rpartition(".")[0] for name, path in ALL.items() if path.name != "__init__.py"}
    assert folders <= packages, f"folders with modules but no __init__.py: {sorted(folders - packages)}"
    unlisted = packages - set(_setuptools()["packages"])
    assert not unlisted, f"packages missing from pyproject's [tool.setuptools] packages (not in the wheel): {unlisted}"


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
    (tmp_path / "runtime").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"trep_edge.runtime" = "runtime"\n')
    (tmp_path / "runtime" / "__init__.py").write_text("")
    (tmp_path / "runtime" / "lazy.py").write_text(
        "import os\n\n\ndef f():\n    from ..training import export\n\n\n"
        "def g():\n    import trep_edge.training.trainer\n\n\n"
        "def h():\n    import importlib\n    return importlib.import_module('trep_edge.training.encoder')\n"
    )  # fmt: skip
    names = module_names(tmp_path, ("runtime",))
    assert set(names) == {RUNTIME, RUNTIME + ".lazy"}
    lines = sorted({hit.split(" imports ")[0] for hit in training_imports(names, tmp_path)})
    assert lines == ["runtime/lazy.py:14", "runtime/lazy.py:5", "runtime/lazy.py:9"]
