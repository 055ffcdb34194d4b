"""How many streams per onnxruntime call the step engine should use: ms per tick of 1000 paper-size streams.

Paper-size causal encoder (11 blocks, width 128, F 128, dilations 1,2,4,8,16,1,2,4,8,1,2), random weights (the
cost does not depend on them), 1000 streams with warm state, one step per stream per tick; chunk sizes measured
interleaved, median of the repeats. Run under the shared lock:
    flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/python bench/results/causal_chunking.py
Writes bench/results/causal_chunking.json.
"""
import json
import platform
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.step_engine import StepEngine, StepGraph
from trep_edge.training.encoder import EncoderConfig, TRepEncoder, bounded_dilations
from trep_edge.training.step_graph import step_graph

STREAMS, REPEATS, CHUNKS = 1000, 15, (1000, 512, 256, 128)

torch.manual_seed(0)
cfg = EncoderConfig(input_dims=1, repr_dims=128, hidden_dims=128, depth=10, causal=True, time_scale=1000.0,
                    dilations=bounded_dilations(11, 201))
graph = StepGraph(ort.InferenceSession(step_graph(TRepEncoder(cfg).eval(), 201), providers=["CPUExecutionProvider"]))
card = ModelCard("paper", ["value"], {"mean": [0.0], "std": [1.0]}, 0, "periodic:1000", "time2vec", 201, 128, 1)
engine = StepEngine(graph, card)
engine.add_streams(STREAMS)
idx = np.arange(STREAMS)
rng = np.random.default_rng(0)
engine.rebuild(idx, rng.normal(size=(STREAMS, 200, 1)).astype(np.float32), np.full(STREAMS, 999))
step = 1000
times: dict[int, list[float]] = {c: [] for c in CHUNKS}
for _ in range(REPEATS):
    for chunk in CHUNKS:
        engine.max_rows = chunk
        values = rng.normal(size=(STREAMS, 1)).astype(np.float32)
        began = time.perf_counter()
        engine.advance(idx, values, np.full(STREAMS, step))
        times[chunk].append(time.perf_counter() - began)
        step += 1
result = {
    "streams": STREAMS,
    "repeats": REPEATS,
    "ms_per_tick_median": {str(c): round(1e3 * float(np.median(t)), 2) for c, t in times.items()},
    "ms_per_tick_min": {str(c): round(1e3 * min(t), 2) for c, t in times.items()},
    "readings_per_s_median": {str(c): round(STREAMS / float(np.median(t))) for c, t in times.items()},
    "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads; onnxruntime "
               f"{ort.__version__} default threads",
    "command": "flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/python bench/results/causal_chunking.py",
}
Path(__file__).with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result, indent=1))
