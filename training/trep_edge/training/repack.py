"""Repack a model file in the current format from its own weights: no checkpoint needed.

    python -m trep_edge.training.repack models/icu-vitals.onnx [...]

The encoder is rebuilt from the card's training configuration and the main graph's initializers, and accepted only
if its ``weights_sha256`` is the card's (so the weights are exactly those trained). The extra graphs the card lists
are then rebuilt and stored with their weights shared with the main graph (``export.embed_graphs``); the main
graph, the card's calibration and everything else stay. ``repack_model`` checks that every engine of the repacked
file gives the pair of the file it replaces (the full graph identical, the extra graphs within the load-time
tolerance) before it replaces it.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from trep_edge.runtime.core.engine import EXACT_TOLERANCE, load_engine, probe_windows
from trep_edge.runtime.core.model_card import ModelCard, sidecar_path
from trep_edge.runtime.core.model_file import metadata, unpack
from trep_edge.runtime.service.atomic_file import copy_atomically

from trep_edge.training.config import TrainConfig
from trep_edge.training.encoder import TRepEncoder
from trep_edge.training.export import embed_graphs, quiet_exporter, weights_sha256
from trep_edge.training.trainer import encoder_config


def encoder_from_model(model_path: Path) -> TRepEncoder:
    """The encoder whose full graph ``model_path`` holds, rebuilt from its card and initializers.

    A parameter is the initializer of its name or, where the exporter folded a transpose into the graph (the input
    projection), the one unnamed initializer of the transposed shape. ValueError unless the result's
    ``weights_sha256`` is the card's.
    """
    text = unpack(metadata(model_path.read_bytes())).card_text
    if text is None:
        raise ValueError(f"{model_path} has no model card: export it with `trep-edge export` instead")
    card = ModelCard.from_json(text, source=f"{model_path} card")
    encoder = TRepEncoder(encoder_config(TrainConfig.from_dict(card.training["config"]), card.input_dims))
    stored = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model_path)).graph.initializer}
    state = encoder.state_dict()
    unnamed = [a for name, a in stored.items() if name not in state]
    for name, tensor in state.items():
        if name in stored and stored[name].shape == tuple(tensor.shape):
            tensor.copy_(torch.from_numpy(stored[name].copy()))
            continue
        folded = [a for a in unnamed if a.ndim == 2 and a.T.shape == tuple(tensor.shape)]
        if len(folded) != 1:
            raise ValueError(f"{model_path}: parameter {name} {tuple(tensor.shape)} is not in the main graph")
        tensor.copy_(torch.from_numpy(folded[0].T.copy()))
    if weights_sha256(encoder) != card.weights_sha256:
        raise ValueError(f"{model_path}: the weights rebuilt from the graph are not the card's "
                         "(weights_sha256 differs)")
    return encoder.eval()


def repack_model(model_path: Path) -> dict[str, float]:
    """Rebuild ``model_path``'s extra graphs with shared weights, in place; returns max |Δz| per engine vs before.

    Refuses (ValueError, file untouched) when an engine of the repacked file differs from the original's.
    """
    before = load_engine(model_path, "cpu", engine="full")
    names = list(before.card.graphs)
    with tempfile.TemporaryDirectory(dir=model_path.parent) as tmp:
        staged = Path(tmp) / model_path.name
        shutil.copy(model_path, staged)
        shutil.copy(sidecar_path(model_path), sidecar_path(staged))
        with quiet_exporter():
            embed_graphs(staged, encoder_from_model(model_path), names)
        windows, starts = probe_windows(before.card)
        diffs = {}
        for name in ["full", *names]:
            old = load_engine(model_path, "cpu", engine=name).last_step_pair(windows, starts)
            new = load_engine(staged, "cpu", engine=name).last_step_pair(windows, starts)
            diffs[name] = max(float(np.max(np.abs(a - b))) for a, b in zip(old, new))
        limit = {name: 0.0 if name == "full" else EXACT_TOLERANCE for name in diffs}
        if any(diffs[n] > limit[n] for n in diffs):
            raise ValueError(f"{model_path}: the repacked file scores differently (max |Δz| per engine {diffs})")
        copy_atomically(sidecar_path(staged), sidecar_path(model_path))
        copy_atomically(staged, model_path)
    return diffs


def main(argv: list[str] | None = None) -> int:
    """Repack each model file named on the command line; print its size before and after and the check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="model files (NAME.onnx with NAME.card.json beside it)")
    args = parser.parse_args(argv)
    for path in args.models:
        size = path.stat().st_size
        diffs = repack_model(path)
        print(f"{path}: {size} -> {path.stat().st_size} bytes; max |Δz| vs before: "
              + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
