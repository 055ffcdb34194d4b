"""False alarms on fault-free streams of shapes real feeds have: every alert here is a false alarm.

The detection benchmark's carriers are smooth industrial and vital-sign signals; real feeds also have recurring sharp
edges (a daily reset, heart beats), counts and bursts, heavy tails and sparse events, plant and IT operation has
working weeks, trends, setpoint steps and idle starts, and many feeds are noise around a level. This script generates
one fault-free stream of each such shape (fixed seed, 8,000 readings, a 288-reading "day" as five-minute data has),
scores it with `trep-edge score`'s code (`offline.detect_recording`, `models/general.onnx`) under the committed
detector and any variants given, and prints the alerts after probation (the first 15 %, at most 750 readings) per
stream and variant, side by side.

    python bench/normal_streams.py --variants 'previous:peaks=0' --out bench/results/normal_streams.md

``--per-stream-train`` adds a column per detector: the same detector on a model trained on each stream's own probation
part, as the detection benchmark's ``trep:per-stream`` row trains it (``detection_per_stream``: the evaluator's
flags, cached in ``--per-stream-cache``), so the false alarms of the two ways to get a model sit side by side.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.training.evaluation import detection_metrics
from trep_edge.training.evaluation.detection_corpus import Stream
from trep_edge.training.evaluation.detection_per_stream import PerStreamModels

LENGTH, DAY = 8000, 288


def _ar1(shocks: np.ndarray, phi: float) -> np.ndarray:
    """The AR(1) series ``x_t = phi · x_{t−1} + shocks_t`` from 0."""
    out = np.zeros(len(shocks))
    for t in range(1, len(shocks)):
        out[t] = phi * out[t - 1] + shocks[t]
    return out


def streams(seed: int = 7) -> dict[str, np.ndarray]:
    """The fault-free streams ``{name: [T, 1]}``."""
    rng = np.random.default_rng(seed)
    t = np.arange(LENGTH)
    daily = np.sin(2 * np.pi * t / DAY)
    shapes = {
        "daily counts (Poisson)": rng.poisson(3 + 2.5 * daily).astype(float),
        "bursty counts (log-normal rate)": rng.poisson(20 * np.exp(rng.normal(0, 0.8, LENGTH))).astype(float),
        "CPU percent, whole numbers": np.round(np.clip(30 + 5 * daily + rng.normal(0, 2, LENGTH), 0, 100)),
        "flat with rare level steps": np.repeat(rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], LENGTH // 400 + 1), 400)[:LENGTH],
        "random walk": np.cumsum(rng.normal(0, 0.1, LENGTH)) + 70,
        "large offset (1e6)": 1e6 + 1e3 * daily + rng.normal(0, 50, LENGTH),
        "sine and noise": daily + 0.1 * rng.normal(size=LENGTH),
        "heavy tails (Student t, 2 dof)": rng.standard_t(2, LENGTH),
        "sparse events, zero otherwise": np.where(rng.random(LENGTH) < 0.03, rng.exponential(5, LENGTH), 0.0),
        "daily sawtooth (sharp reset)": (t % DAY) / DAY * 10 + 0.2 * rng.normal(size=LENGTH),
        # Shapes of plant and IT operation (added after the ten above, so their draws are unchanged): a working week,
        # a steady trend, bursts on an idle line, an operator's setpoint steps, a machine idle before its first shift.
        "weekdays and weekends": 100 * np.where(t // DAY % 7 < 5, 1.0, 0.3) * (1 + 0.3 * daily)
        + rng.normal(0, 3, LENGTH),
        "linear trend": 0.01 * t + rng.normal(0, 1, LENGTH),
        "rare large bursts, zero otherwise": np.where(rng.random(LENGTH) < 0.01, rng.exponential(100, LENGTH), 0.0),
        "setpoint steps every 500": np.repeat(rng.normal(50, 10, LENGTH // 500 + 1), 500)[:LENGTH]
        + rng.normal(0, 0.2, LENGTH),
        "idle, then a daily cycle": np.where(t < 900, 5.0, 5 + 2 * daily + rng.normal(0, 0.3, LENGTH)),
        # A line that runs during working hours (added after the fifteen above): a daily square wave, whose fall and
        # rise surprise a model every day (the schedule round).
        "working hours (square wave)": np.where(t % DAY < 0.6 * DAY, 80.0, 20.0) + rng.normal(0, 2, LENGTH),
        # Noise and little else (added after the sixteen above; the redundancy round): a model trained on such a
        # stream learns little beyond each reading's size, so its distance repeats deviation.
        "white noise": rng.normal(50, 10, LENGTH),
        "autocorrelated noise (AR(1), 0.7)": 20 + 3 * _ar1(rng.normal(size=LENGTH), 0.7),
        "Laplace noise": 10 + rng.laplace(0, 1, LENGTH),
        "CPU percent, idle and noisy": np.round(np.clip(rng.normal(8, 4, LENGTH), 0, 100), 1),
        # Intermittent counts (added after the twenty above): zero about 70 % of the time, so a window's quartiles
        # straddle the zeros and a sliver of the counts (the tie round).
        "intermittent counts, zero 70 % of the time": np.where(rng.random(LENGTH) < 0.3,
                                                                rng.integers(1, 50, LENGTH), 0).astype(float),
        # Signals without noise, and noise on a coarse grid (added after the twenty-one above; the context round): a
        # sensor that never changes, a clean cycle, an on/off load, a reading logged to three decimals.
        "constant": np.full(LENGTH, 42.0),
        "noise-free daily sine": 50 + 20 * daily,
        "noise-free square wave (on half of each day)": np.where(t % DAY < DAY // 2, 80.0, 20.0),
        "Gaussian noise on a grid a third of its spread": np.round(rng.normal(0.1, 0.003, LENGTH), 3),
    }
    return {name: values[:, None].astype(np.float64) for name, values in shapes.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/general.onnx")
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    parser.add_argument("--per-stream-train", action="store_true", help="add the committed detector on a model "
                        "trained on each stream's probation part (module docstring)")
    parser.add_argument("--per-stream-cache", type=Path, default=Path("runs/detect-per-stream"),
                        help="per-stream models (default: %(default)s, shared with trep-edge eval detect)")
    args = parser.parse_args()
    try:
        configs = {"committed": DetectorConfig()} | DetectorConfig.variants(args.variants)
    except ValueError as exc:
        parser.error(str(exc))
    engine = load_engine(args.model, "cpu")
    per_stream = PerStreamModels(args.per_stream_cache) if args.per_stream_train else None
    columns = list(configs) + [f"{label}, per-stream model" for label in configs if per_stream]
    probation = detection_metrics.probation(LENGTH)
    started = time.perf_counter()
    lines = ["| stream | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    totals = dict.fromkeys(columns, 0)
    data = streams()
    for name, values in data.items():
        runs = [(label, engine, config) for label, config in configs.items()]
        if per_stream is not None:
            own = per_stream.engine(Stream(name, "normal", ["value"], values, []))
            runs += [(f"{label}, per-stream model", own, config) for label, config in configs.items()]
        cells = []
        for label, model, config in runs:
            alerts = np.flatnonzero(detect_recording(model, values, config).alerts)
            counted = int((alerts >= probation).sum())
            totals[label] += counted
            cells.append(str(counted))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines.append("| **all (false alarms per 1,000 readings)** | " + " | ".join(
        f"**{n}** ({1000 * n / (len(data) * (LENGTH - probation)):.2f})" for n in totals.values()) + " |")
    table = "\n".join(lines)
    command = "python bench/normal_streams.py" + (" --variants " + " ".join(f"'{v}'" for v in args.variants)
                                                  if args.variants else "") + " --per-stream-train" * bool(per_stream)
    text = (f"Command: `{command}`; model `{args.model}`; {LENGTH - probation} counted readings per stream; "
            f"wall time {time.perf_counter() - started:.0f} s.\n\n{table}\n")  # fmt: skip
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
