"""Which pip extra provides which optional module, so a missing one is reported as one line naming the extra."""
from __future__ import annotations

# import name (top-level, or dotted where the top level is a shared namespace) -> the extra that installs it
# (pyproject.toml [project.optional-dependencies]).
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
    "google.protobuf": "sparkplug",
}

# why a given extra is needed, said once in the hint
PURPOSE = {
    "cpu": "ONNX inference (or [gpu] on a CUDA machine)",
    "train": "training, export and evaluation",
    "plot": "PNG plots",
    "sparkplug": "Sparkplug B input ([input] format = \"sparkplug\")",
}


def missing_extra_hint(exc: ModuleNotFoundError) -> str | None:
    """The one-line install hint for a missing optional module, or None when the module is not an optional one."""
    parts = (exc.name or "").split(".")
    # the longest known prefix: onnxruntime.capi -> onnxruntime, google.protobuf.message -> google.protobuf
    name = next((n for n in (".".join(parts[:k]) for k in range(len(parts), 0, -1)) if n in EXTRA_OF_MODULE), None)
    if name is None:
        return None
    extra = EXTRA_OF_MODULE[name]
    return f"needs the [{extra}] extra for {PURPOSE[extra]} ({name} is not installed): pip install 'trep-edge[{extra}]'"
