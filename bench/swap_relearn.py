"""What a hot swap to a model with the same inputs costs the streams' detectors, for four ways of handing them over.

ICU patients of PhysioNet 2019 set B (hourly vitals, the shipped icu-vitals model's channels) stream through one
``Monitor`` running ``models/icu-vitals.onnx``; after ``--swap-at`` hours every stream is warm and the model is
swapped for a model with the same input contract:

- ``re-exported``: icu-vitals itself behind a card with another name (another file, the same outputs: what
  keeping the old statistics gets exactly right);
- ``other-weights``: ``models/icu-vitals-causal.onnx`` behind a card with icu-vitals' normalisation (another
  network on the same inputs; its card has no detector prior), run by its ``pruned_pair`` graph.

The detector is handed over as ``restart`` (a fresh detector: the behaviour before this hand-over), ``keep`` (the
old detector as it is, memory included) or ``relearn-R`` (``Monitor.swap_engine`` with ``[detector] relearn = R``:
gate and deviation statistics kept, the representation memory and the model signals' statistics relearnt from the
newest R stored steps scored again by the new model, from the card's prior if it has one, where that gives a signal
at least ``detector.RELEARN_MIN_VALUES`` values, else the old model's statistics stay; R = 0: all stay). Each is compared over the ``--after`` hours after the swap with a
reference monitor that ran the new model from the start: readings left unscored (warming, or no surprise), the
median and 95th percentile of |surprise - reference surprise|, and alerts (the reference's, and the old model's had
it kept running, for scale). Also the seconds the swap took (engine ``pruned_pair``, 1 thread).

    python bench/swap_relearn.py --out bench/results/swap_relearn.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from trep_edge.datasets.paths import resolve
from trep_edge.datasets.physionet import VITALS, iter_patients
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.model_file import METADATA_KEY
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.windows import WindowConfig

HOUR = 3600.0
HANDOVERS = ("restart", "keep", "relearn-0", "relearn-16", "relearn-32", "relearn-48")


def cohort(patients: int, hours: int) -> list[np.ndarray]:
    """The first ``patients`` stays of at least ``hours`` hours: their vitals ``[hours, 7]``."""
    columns = None
    out = []
    for patient in iter_patients(resolve("PhysioNet2019_sepsis/training_setB.tar.gz")):
        if len(patient.values) < hours:
            continue
        columns = columns or [patient.columns.index(c) for c in VITALS]
        out.append(patient.values[:hours, columns])
        if len(out) == patients:
            break
    return out


def recarded(source: str, folder: Path, **changes) -> Path:
    """A copy of a model file whose card (in its metadata) has ``changes``: same graphs, another file."""
    import onnx

    model = onnx.load(source)
    entry = next(p for p in model.metadata_props if p.key == METADATA_KEY)
    card = ModelCard.from_json(entry.value)
    for key, value in changes.items():
        setattr(card, key, value)
    entry.value = card.to_json()
    path = folder / f"{card.name}.onnx"
    onnx.save(model, str(path))
    return path


def run(engine, readings: list[list[Reading]], swap: tuple[int, object, str] | None) -> tuple[list, float]:
    """Feed hour by hour (one tick per hour), swapping at hour ``swap[0]`` with the given hand-over; the scored
    readings of every hour and the seconds the swap took."""
    handover = swap[2] if swap else ""
    relearn = int(handover.split("-")[1]) if handover.startswith("relearn-") else 0
    monitor = Monitor(engine, WindowConfig(period=HOUR), detector=DetectorConfig(relearn=relearn))
    scored, seconds = [], 0.0
    for hour, batch in enumerate(readings):
        if swap is not None and hour == swap[0]:
            old = monitor._detector
            started = time.perf_counter()
            monitor.swap_engine(swap[1])
            seconds = time.perf_counter() - started
            if handover == "restart":
                monitor._detector = monitor._new_detector(len(monitor._names), monitor._store.n_streams)
            elif handover == "keep":
                monitor._detector = old
        for reading in batch:
            monitor.ingest(reading)
        scored.append({(s.stream, s.step): s for s in monitor.tick(batch[0].timestamp).scored})
    return scored, seconds


def compare(got: list, reference: list, old: list, since: int, until: int) -> dict:
    """The hand-over's readings after the swap against the reference's (the new model from the start)."""
    rows = [(g[k], reference[h][k], old[h][k]) for h in range(since, until) for g in [got[h]] for k in g]
    surprise = np.array([[a.surprise, b.surprise] for a, b, _ in rows])
    both = np.isfinite(surprise).all(axis=1)
    error = np.abs(surprise[both, 0] - surprise[both, 1])
    return {"readings": len(rows), "unscored": int(sum(a.warming or not np.isfinite(a.surprise) for a, _, _ in rows)),
            "surprise_error_median": float(np.median(error)), "surprise_error_p95": float(np.percentile(error, 95)),
            "alerts": int(sum(a.alert for a, _, _ in rows)), "reference_alerts": int(sum(b.alert for _, b, _ in rows)),
            "old_model_alerts": int(sum(c.alert for _, _, c in rows)),
            "alerts_shared_with_reference": int(sum(a.alert and b.alert for a, b, _ in rows))}  # fmt: skip


def main() -> None:
    """Run every model x hand-over and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patients", type=int, default=80)
    parser.add_argument("--swap-at", type=int, default=100, help="hour of the swap")
    parser.add_argument("--after", type=int, default=60, help="hours compared after the swap")
    parser.add_argument("--out", default="bench/results/swap_relearn.json")
    args = parser.parse_args()
    hours = args.swap_at + args.after
    stays = cohort(args.patients, hours)
    readings = [[Reading(f"p{i}", h * HOUR, dict(zip(VITALS, map(float, v[h])))) for i, v in enumerate(stays)]
                for h in range(hours)]  # fmt: skip
    running = load_engine("models/icu-vitals.onnx", "cpu", threads=1)
    results = {"command": "python " + " ".join(sys.argv), "patients": len(stays), "swap_at": args.swap_at,
               "after": args.after, "models": {}}  # fmt: skip
    old, _ = run(running, readings, None)
    vitals = ModelCard.from_json(Path("models/icu-vitals.card.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in (("re-exported", recarded("models/icu-vitals.onnx", Path(tmp), name="icu-vitals-b")),
                           ("other-weights", recarded("models/icu-vitals-causal.onnx", Path(tmp), name="causal-b",
                                                      normalisation=vitals.normalisation))):  # fmt: skip
            new = load_engine(path, "cpu", threads=1, engine="pruned_pair")
            reference, _ = run(new, readings, None)
            results["models"][name] = {}
            for handover in HANDOVERS:
                got, seconds = run(running, readings, (args.swap_at, new, handover))
                out = compare(got, reference, old, args.swap_at, hours)
                if handover.startswith("relearn"):
                    out["swap_seconds"] = seconds
                results["models"][name][handover] = out
                print(name, handover, json.dumps(out), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
