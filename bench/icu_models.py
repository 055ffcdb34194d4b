"""Compare the shipped ICU models on the streaming sepsis task: standard (windowed) vs causal (incremental).

Both models were pretrained, without labels, on all of PhysioNet 2019 set B, so this is a like-for-like
comparison of the two shipped files on the same patients, not a held-out benchmark. Protocol and labelling are
those of ``trep-edge eval sepsis-stream`` (``training/trep_edge/training/evaluation/sepsis_stream.py``): each model's own card
normalisation, threshold from non-septic calibration patients, point-adjusted F1 with delays 3 and 7 summed over
test patients. Also reports the ms per scored hour of each model's selected engine on this machine.

    python bench/icu_models.py --out bench/results/icu_models.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from trep_edge.datasets.paths import resolve
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.preprocess import Normalisation
from trep_edge.training.evaluation.sepsis_stream import evaluate, load_stream_cohort

MODELS = ("models/icu-vitals.onnx", "models/icu-vitals-causal.onnx")


def main() -> None:
    """Score both models on one cohort and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibration", type=int, default=200, help="non-septic calibration patients")
    parser.add_argument("--test", type=int, default=400, help="test patients (half septic)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/icu_models.json")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cohort = load_stream_cohort(resolve("PhysioNet2019_sepsis/training_setB.tar.gz"), 0, args.calibration,
                                args.test, rng)  # fmt: skip
    results = {"command": "python " + " ".join(sys.argv), "seed": args.seed, "models": {}}
    for path in MODELS:
        engine = load_engine(path)
        card = engine.card
        norm = Normalisation.from_dict(card.normalisation)
        started = time.perf_counter()
        out = evaluate(engine, cohort, norm, card.scoring.beta, card.scoring.z, (3, card.scoring.delay))
        seconds = time.perf_counter() - started
        hours = out["test_hours"] + sum(len(v) for v in cohort.calibration)
        out.update(engine=engine.status["engine"], sha256=engine.sha256, ms_per_hour=1000 * seconds / hours)
        results["models"][card.name] = out
        print(card.name, json.dumps(out, indent=1), flush=True)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
