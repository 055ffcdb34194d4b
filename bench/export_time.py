"""Where a model's export time goes: ``export.export_encoder`` on one encoder, each phase timed.

Export is half of every per-stream benchmark's cost (train, export, score per stream) and most of the test suite's,
so its phases are worth seeing apart: the full graph's dynamo export, each registered extra graph
(``export.GRAPH_BUILDERS``), calibration and the detector prior (the runtime's detector run over the calibration
series, one reading at a time). The weights are random (seeded): export does not depend on training. Calibration
data is UCR-anomaly 135, normalised as training data is, its first ``--calibration`` steps.

    python bench/export_time.py --out bench/results/export_time.md

Defaults are the per-stream benchmark models' shape (``bench/detector_replay.py``: hidden 64, depth 8, output 64,
window 201). Run it on two commits in the same session to compare them: the table is the committed code's only.
"""
from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from trep_edge.datasets.paths import data_root
from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly
from trep_edge.runtime.core.model_card import Scoring
from trep_edge.runtime.core.preprocess import count_levels, fit_normalisation
from trep_edge.training import export
from trep_edge.training.config import TrainConfig
from trep_edge.training.trainer import Trainer

UCR_135 = "UCR_Anomaly/135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"


def timed(phases: dict[str, float], name: str, fn):
    """``fn`` adding its wall time to ``phases[name]`` on every call."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - start

    return run


def export_phases(cfg: TrainConfig, window: int, values: np.ndarray) -> dict[str, float]:
    """Seconds per phase of one ``export_encoder`` call (``total`` included) for a random encoder of ``cfg``,
    calibrated on ``values [T]``."""
    x = values.astype(np.float32)[None, :, None]
    norm = fit_normalisation(x, count_levels(x))  # as training data is read (training.data)
    series = norm.apply(x)[0]
    meta = {"dataset": "export-time", "channels": ["value"], "normalisation": norm.to_dict(), "differencing": 0}
    trainer = Trainer(cfg, input_dims=1, meta=meta)
    encoder = trainer.inference_encoder()
    card = export.build_card("export-time", encoder, meta, trainer.cfg.to_dict(), window, Scoring(), trainer.step)
    phases: dict[str, float] = {}
    patched = {name: getattr(export, name) for name in ("export_graph", "calibration_stats", "detector_prior")}
    builders = dict(export.GRAPH_BUILDERS)
    try:
        for name, fn in patched.items():
            setattr(export, name, timed(phases, name, fn))
        for name, fn in builders.items():
            export.GRAPH_BUILDERS[name] = timed(phases, f"graph {name}", fn)
        with tempfile.TemporaryDirectory() as tmp, export.quiet_exporter():
            start = time.perf_counter()
            export.export_encoder(encoder, card, Path(tmp) / "model.onnx", [series], max_calibration_steps=4000)
            phases["total"] = time.perf_counter() - start
    finally:
        for name, fn in patched.items():
            setattr(export, name, fn)
        export.GRAPH_BUILDERS.clear()
        export.GRAPH_BUILDERS.update(builders)
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden-dims", type=int, default=64)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--repr-dims", type=int, default=64)
    parser.add_argument("--window", type=int, default=201)
    parser.add_argument("--calibration", type=int, default=7000, help="calibration steps (the prior runs them all)")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    args = parser.parse_args()
    try:
        cfg = TrainConfig(hidden_dims=args.hidden_dims, depth=args.depth, repr_dims=args.repr_dims, seed=0)
    except ValueError as exc:
        parser.error(str(exc))
    values = load_ucr_anomaly(data_root() / UCR_135).values[: args.calibration]
    phases = export_phases(cfg, args.window, values)
    command = (f"python bench/export_time.py --hidden-dims {args.hidden_dims} --depth {args.depth} --repr-dims "
               f"{args.repr_dims} --window {args.window} --calibration {args.calibration}")  # fmt: skip
    threads = os.environ.get("OMP_NUM_THREADS", f"default ({torch.get_num_threads()})")
    text = "\n".join([
        f"Command: `{command}`; torch threads {threads}; {len(values):,} calibration steps.",
        "",
        "| phase | seconds | share |",
        "|---|---|---|",
        *(f"| {name} | {sec:.1f} | {sec / phases['total']:.0%} |" for name, sec in phases.items()),
    ]) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
