"""The project's one torch → ONNX export call: dynamo exporter, opset ``OPSET``, the full ONNX checker.

Every graph a model file carries goes through ``export_module``: the full graph (``export.export_graph``) and the
extra graphs (``pruned_graph``, ``step_graph``). It lives apart from ``export.py`` because ``export.py`` imports
those graph builders to register them; a builder importing ``export.py`` back would be an import circle.
"""
from __future__ import annotations

from pathlib import Path

import onnx
import torch

OPSET = 18


def export_module(
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic: dict,
    opset: int = OPSET,
) -> None:
    """Export ``module`` with the project's exporter settings (dynamo, ``opset``) and run the full ONNX checker."""
    module.eval()  # inference graphs: also keeps torch from warning that a wrapper is still in training mode
    torch.onnx.export(
        module,
        example,
        str(path),
        input_names=input_names,
        output_names=output_names,
        opset_version=opset,
        dynamo=True,
        dynamic_shapes=dynamic,
        external_data=False,
        verbose=False,
    )
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
