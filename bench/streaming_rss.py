"""Peak memory of training on the full PhysioNet 2019 set B: streaming dataset vs loading everything.

Each mode runs in a fresh process (peak RSS is per process), imports the same modules, then:

- ``baseline``: the same trainer and ``--steps`` steps on a synthetic batch, no corpus: the floor all modes share;
- ``memory``: what ``trep-edge train setB.tar.gz`` does: every patient into one padded array, cut into sections,
  then ``--steps`` optimiser steps of a small encoder on it;
- ``stream``: what ``trep-edge train setB.tar.gz --stream`` does: the streaming normalisation pass, then one full
  epoch of every patient's sections through the bounded shuffle buffer, with ``--steps`` optimiser steps on the
  first batches; once on all 20,000 patients and once on the first 2,000 (bounded memory: the same peak).

Run: ``flock /tmp/trep-heavy.lock nice -n 5 python bench/streaming_rss.py --out bench/results/streaming_rss.json``
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time

SET_B = "PhysioNet2019_sepsis/training_setB.tar.gz"
FILL = 8  # the shipped icu-vitals model's forward fill
SMALL = dict(depth=3, hidden_dims=32, repr_dims=16, batch_size=16, max_train_length=200, seed=0)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_mode(mode: str, steps: int, buffer: int, patients: int | None) -> dict:
    """Run one mode in this process and return its numbers."""
    import numpy as np
    import torch

    from trep_edge.datasets.paths import resolve
    from trep_edge.datasets.physionet import VITALS
    from trep_edge.training.config import TrainConfig
    from trep_edge.training.crops import make_sections
    from trep_edge.training.data import load_training_data
    from trep_edge.training.streaming import PatientSections, batches, stream_normalisation
    from trep_edge.training.trainer import Trainer

    torch.set_num_threads(1)
    path = resolve(SET_B)
    started = time.perf_counter()
    out: dict = {"mode": mode}
    trainer = Trainer(TrainConfig(**SMALL), input_dims=len(VITALS))
    if mode == "baseline":
        x = np.random.default_rng(0).normal(size=(SMALL["batch_size"], SMALL["max_train_length"], len(VITALS)))
        for _ in range(steps):
            trainer.train_on(x.astype(np.float32), np.zeros(len(x), dtype=np.int64))
    elif mode == "memory":
        data = load_training_data(str(path), fill_limit=FILL)
        sections = make_sections(data.x, SMALL["max_train_length"])
        out.update(series=int(data.x.shape[0]), sections=int(len(sections.x)), array_mib=data.x.nbytes / 2**20)
        for _ in range(steps):
            trainer.train_step(sections)
    elif mode == "stream":
        norm = stream_normalisation(path, VITALS, FILL, max_series=patients)
        dataset = PatientSections(path, VITALS, norm, SMALL["max_train_length"], FILL, buffer=buffer,
                                  max_series=patients)  # fmt: skip
        count = 0
        for x, start in batches(dataset, SMALL["batch_size"]):
            if dataset.epoch > 1:  # this batch opens a second epoch: the first is complete
                break
            if count < steps * SMALL["batch_size"]:
                trainer.train_on(x, start, local=True)
            count += len(x)
        out.update(sections=count, buffer=buffer, patients=patients or "all")
    out.update(seconds=round(time.perf_counter() - started, 1), peak_rss_mib=round(_peak_mib(), 1), steps=steps)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="optimiser steps per mode")
    p.add_argument("--buffer", type=int, default=1024, help="shuffle buffer (sections) of the streaming mode")
    p.add_argument("--mode", help=argparse.SUPPRESS)  # internal: run one mode in this process
    p.add_argument("--patients", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help="write the results JSON here")
    args = p.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.steps, args.buffer, args.patients)))
        return
    rows = []
    for mode, patients in (("baseline", None), ("memory", None), ("stream", None), ("stream", 2000)):
        cmd = [sys.executable, __file__, "--mode", mode, "--steps", str(args.steps), "--buffer", str(args.buffer)]
        cmd += ["--patients", str(patients)] if patients else []
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    base, memory, stream, stream_tenth = (r["peak_rss_mib"] for r in rows)
    result = {
        "command": "flock /tmp/trep-heavy.lock nice -n 5 python bench/streaming_rss.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": 2, "python": platform.python_version()},
        "rows": rows,
        "memory_over_stream_peak_ratio": round(memory / stream, 2),
        "above_baseline_mib": {"memory": round(memory - base, 1), "stream": round(stream - base, 1),
                               "stream_2000_patients": round(stream_tenth - base, 1)},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
