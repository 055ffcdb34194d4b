"""Recompute a shipped model's ``detector_prior`` (the detector's cold-start statistics) without retraining it.

    .venv/bin/python scripts/refresh_detector_prior.py models/icu-vitals.onnx

Calibration data: the data the card says the model was trained on, or ``--data``. From a PhysioNet 2019 archive
only patients with an even id and no sepsis label are used (odd ids are the detection benchmark's held-out
patients). Writes the card into the model file and its sidecar.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from trep_edge.datasets.paths import resolve
from trep_edge.datasets.physionet import iter_patients
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.offline import detector_prior, prepare
from trep_edge.runtime.core.preprocess import Normalisation
from trep_edge.training.data import load_training_data
from trep_edge.training.export import write_card


def main() -> int:
    """Parse the command line, compute the prior, rewrite the card."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="the .onnx model file to update")
    parser.add_argument("--data", help="calibration data (default: the card's training data)")
    parser.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    parser.add_argument("--max-series", type=int, default=2000, help="series read at most")
    parser.add_argument("--max-steps", type=int, default=20_000, help="steps scored at most")
    args = parser.parse_args()
    engine = load_engine(args.model, "cpu")
    card = engine.card
    spec = dict(card.training.get("data_spec") or {})
    source = args.data or spec["data"]
    if source.endswith(".tar.gz"):
        series = []
        for patient in iter_patients(resolve(source, args.data_root), limit=2 * args.max_series):
            if int(patient.id.lstrip("p")) % 2 == 0 and not patient.sepsis.any():
                raw = patient.values[:, [patient.columns.index(c) for c in card.channels]]
                series.append(prepare(engine, raw))
    else:
        data = load_training_data(source, args.data_root, spec.get("channels"), spec.get("rows"), args.max_series,
                                  spec.get("difference", 0), spec.get("forward_fill", 0),
                                  normalisation=Normalisation.from_dict(card.normalisation))  # fmt: skip
        series = [s[~np.isnan(s).all(axis=1)] for s in data.x]
    card.detector_prior = detector_prior(engine, [s for s in series if len(s) > 1], max_steps=args.max_steps)
    write_card(engine.path, card)
    print(json.dumps({"model": str(engine.path), "detector_prior": card.detector_prior}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
