"""Which pip extra provides which optional module, so a missing one is reported as one line naming the extra."""
from __future__ import annotations

# top-level import name -> the extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRA_OF_MODULE = {
    "onnxruntime": "cpu",
    "torch": "train",
    "onnx": "train",
    "onnxscript": "train",
    "sklearn": "train",
    "scipy": "train",
    "statsmodels": "train",
    "tqdm": "train",
    "matplotlib": "plot",
}

# why a given extra is needed, said once in the hint
PURPOSE = {
    "cpu": "ONNX inference (or [gpu] on a CUDA machine)",
    "train": "training, export and evaluation",
    "plot": "PNG plots",
}


def missing_extra_hint(exc: ModuleNotFoundError) -> str | None:
    """The one-line install hint for a missing optional module, or None when the module is not an optional one."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"needs the [{extra}] extra for {PURPOSE[extra]} ({top} is not installed): pip install 'trep-edge[{extra}]'"
