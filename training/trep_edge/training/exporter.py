"""The project's one torch → ONNX export call: dynamo exporter, opset ``OPSET``, the full ONNX checker.

Every graph a model file carries goes through ``export_module``: the full graph (``export.export_graph``) and the
extra graphs (``pruned_graph``, ``step_graph``). It lives apart from ``export.py`` because ``export.py`` imports
those graph builders to register them; a builder importing ``export.py`` back would be an import circle.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
import onnx_ir as ir
import torch
from onnxscript.optimizer import optimize_ir

OPSET = 18


@contextlib.contextmanager
def _one_registry() -> Iterator[None]:
    """Inside: torch.onnx builds its aten → ONNX function registry once per opset and process, not once per export.

    Every ``torch.onnx.export`` call rebuilt it from torchlib (about 2 s on a slow 2-core box, an eighth of a small
    model's export), and a model file takes two or three exports; the exporter only reads it. Where torch's
    internals differ from what this expects, exports build their own as before.
    """
    try:
        from torch.onnx._internal.exporter import _registration

        registry_class = _registration.ONNXRegistry
        original = registry_class.__dict__["from_torchlib"]
    except (ImportError, AttributeError, KeyError):
        yield
        return
    build = registry_class.from_torchlib
    registry_class.from_torchlib = classmethod(lambda cls, *args, **kwargs: _registry(build, *args, **kwargs))
    try:
        yield
    finally:
        registry_class.from_torchlib = original


@functools.lru_cache(maxsize=4)
def _registry(build: Callable[..., object], *args: object, **kwargs: object) -> object:
    """torch's registry for these arguments (the opset), built by ``build`` (``from_torchlib``) on the first call."""
    return build(*args, **kwargs)


def export_module(
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic: dict,
    opset: int = OPSET,
    keep_weights: bool = False,
) -> None:
    """Export ``module`` with the project's exporter settings (dynamo, ``opset``) and run the full ONNX checker.

    ``keep_weights``: optimise as usual but fold no op that reads a weight, so the graph holds the module's weights
    byte for byte as the full graph does and the model file can store them once
    (``runtime/trep_edge/runtime/core/model_file.py``); onnxruntime still folds layouts at load.
    """
    module.eval()  # inference graphs: also keeps torch from warning that a wrapper is still in training mode
    with _one_registry():
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
            optimize=not keep_weights,
        )
    if keep_weights:
        model = ir.load(str(path))
        optimize_ir(model, should_fold=_reads_no_weight)
        # The exporter's per-node stack traces would be most of the bytes of a graph stored inside another file.
        for node in model.graph:
            node.metadata_props.clear()
        ir.save(model, str(path))
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def _reads_no_weight(node: ir.Node) -> bool | None:
    """False (do not fold) for an op on a float initializer, whose folded output would be a second weight copy."""
    weights = [v for v in node.inputs if v is not None and v.is_initializer() and v.dtype == ir.DataType.FLOAT]
    return False if weights else None
