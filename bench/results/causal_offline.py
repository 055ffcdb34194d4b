"""Offline scoring of a causal model (``runtime.offline`` windows): full graph vs the step engine's sweep.

Paper-size causal encoder (11 blocks, width 128, F 128, dilations 1,2,4,8,16,1,2,4,8,1,2), random weights; the
1,024 consecutive 201-step windows ending at steps 1,200–2,223 of UCR anomaly series 135, both mask variants,
through (a) the full graph in batches of 256 windows and (b) ``StepCandidate.pair``, which sweeps consecutive
windows with one rebuild and one step per window. Best of 3 each, interleaved. Run under the shared lock:
    flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/python bench/results/causal_offline.py
Writes bench/results/causal_offline.json.
"""
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from trep_edge.datasets.paths import data_root
from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly
from trep_edge.runtime.core.engine import StepCandidate, last_step_pair
from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.offline import sliding_windows
from trep_edge.runtime.core.time_index import parse_time_index
from trep_edge.training.encoder import EncoderConfig, TRepEncoder, bounded_dilations
from trep_edge.training.export import export_graph
from trep_edge.training.step_graph import step_graph

WINDOW, FIRST, COUNT, BATCH = 201, 1200, 1024, 256


class _Engine:
    """What ``StepCandidate`` reads from an engine: the card and the time-index convention."""

    def __init__(self, card: ModelCard) -> None:
        self.card, self.convention = card, parse_time_index(card.time_index)


torch.manual_seed(0)
encoder = TRepEncoder(EncoderConfig(input_dims=1, repr_dims=128, hidden_dims=128, depth=10, causal=True,
                                    time_scale=1000.0, dilations=bounded_dilations(11, WINDOW))).eval()
with tempfile.TemporaryDirectory() as tmp:
    export_graph(encoder, Path(tmp) / "full.onnx")
    full = ort.InferenceSession(str(Path(tmp) / "full.onnx"), providers=["CPUExecutionProvider"])
card = ModelCard("paper", ["value"], {"mean": [0.0], "std": [1.0]}, 0, "periodic:1000", "time2vec", WINDOW, 128, 1)
engine = _Engine(card)
step = StepCandidate(ort.InferenceSession(step_graph(encoder, WINDOW), providers=["CPUExecutionProvider"]), engine)

series = load_ucr_anomaly(data_root() / "UCR_Anomaly/135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt").values
values = ((series - series[:FIRST].mean()) / series[:FIRST].std()).astype(np.float32).reshape(-1, 1)
windows = sliding_windows(values[: FIRST + COUNT], WINDOW)[FIRST:]
starts = np.arange(FIRST, FIRST + COUNT) - (WINDOW - 1)


def encode_full(x: np.ndarray, mask: np.ndarray, t: np.ndarray) -> np.ndarray:
    return full.run(["z"], {"x": x, "mask": mask, "t": t})[0]


def score(pair) -> tuple[float, np.ndarray]:
    began, out = time.perf_counter(), []
    for lo in range(0, COUNT, BATCH):
        chunk = np.ascontiguousarray(windows[lo : lo + BATCH])
        out.append(np.concatenate(pair(chunk, starts[lo : lo + BATCH]), axis=1))
    return time.perf_counter() - began, np.concatenate(out)


seconds: dict[str, list[float]] = {"full": [], "step_sweep": []}
results = {}
for _ in range(3):
    seconds["full"].append((r := score(lambda w, s: last_step_pair(encode_full, engine.convention, w, s)))[0])
    results["full"] = r[1]
    seconds["step_sweep"].append((r := score(step.pair))[0])
    results["step_sweep"] = r[1]
best = {k: min(v) for k, v in seconds.items()}
result = {
    "windows": COUNT,
    "seconds_best_of_3": {k: round(v, 3) for k, v in best.items()},
    "speedup_step_sweep_vs_full": round(best["full"] / best["step_sweep"], 2),
    "max_abs_diff_z": float(np.abs(results["full"] - results["step_sweep"]).max()),
    "command": "flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/python bench/results/causal_offline.py",
}
Path(__file__).with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result, indent=1))
