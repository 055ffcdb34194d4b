"""Where the files shipped inside the package live: the default models and the example monitor config.

In a wheel they are package data (trep_edge/models, trep_edge/deploy); in a source checkout they are the repository's
models/ and deploy/ folders, which pyproject.toml maps to those package names.
"""
from __future__ import annotations

from pathlib import Path

# the models the wheel carries, default first (pyproject.toml [tool.setuptools.package-data] lists the same files)
SHIPPED_MODELS = ("icu-vitals", "general")

_PACKAGE = Path(__file__).resolve().parent


def bundled_dir(folder: str) -> Path:
    """The installed package's copy of `folder` (models or deploy), else the source checkout's."""
    installed = _PACKAGE / folder
    return installed if installed.is_dir() else _PACKAGE.parent / folder


def shipped_models() -> list[Path]:
    """The shipped ONNX models present in this installation, default first."""
    found = [bundled_dir("models") / f"{name}.onnx" for name in SHIPPED_MODELS]
    return [path for path in found if path.is_file()]


def default_model() -> Path:
    """The default model (models/icu-vitals.onnx of the installation); FileNotFoundError naming the fix if absent."""
    path = bundled_dir("models") / f"{SHIPPED_MODELS[0]}.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"the default model {path} is missing from this installation; reinstall trep-edge "
                                "or pass --model")  # fmt: skip
    return path


def example_config() -> Path:
    """The commented example monitor config (deploy/monitor.toml)."""
    return bundled_dir("deploy") / "monitor.toml"
