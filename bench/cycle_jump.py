"""A jump that stays inside a daily cycle's range: how often each detector finds it, and what else it alerts on.

Five-minute readings of a daily sine (amplitude 10 around 40, noise σ 2, 3,950 readings, as a plant historian
exports them) with a level shift of ``--jump`` for 100 readings from the trough of day 10: a jump of about 12 noise
σ in one reading whose level stays inside the range a 128-reading window spans, so a reading's distance from its
window's level hides it (docs/detection.md, the step round). Each seed draws other noise. Every detector row sees
the same streams: the committed detector and any variants through `trep-edge score`'s code
(`offline.detect_recording`, `models/general.onnx`), and the detection benchmark's 100-reading rolling z-score.

    python bench/cycle_jump.py --seeds 20 --variants 'level-only:step_record=0' --out bench/results/cycle_jump.md
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.training.evaluation.detection import rolling_z
from trep_edge.training.evaluation.detection_corpus import Stream
from trep_edge.training.evaluation.detection_metrics import probation

LENGTH, DAY, SPAN = 3950, 288, 100
ONSET = int(DAY * 10.75)  # the trough of day 10


def stream(seed: int, jump: float) -> np.ndarray:
    """One stream ``[T, 1]``: the cycle, its noise and the shift."""
    t = np.arange(LENGTH)
    x = 40 + 10 * np.sin(2 * np.pi * t / DAY) + np.random.default_rng(seed).normal(0, 2, LENGTH)
    x[ONSET : ONSET + SPAN] += jump
    return x[:, None]


def tally(alerts: np.ndarray) -> tuple[bool, int]:
    """Whether an alert falls inside the shift, and the alerts after probation outside it."""
    rows = np.flatnonzero(alerts)
    inside = (rows >= ONSET) & (rows < ONSET + SPAN)
    return bool(inside.any()), int((~inside & (rows >= probation(LENGTH))).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="streams drawn (seeds 0 .. N-1)")
    parser.add_argument("--jump", type=float, default=25.0, help="size of the shift (noise σ is 2)")
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--model", default="models/general.onnx")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    args = parser.parse_args()
    try:
        variants = {"committed": DetectorConfig()} | DetectorConfig.variants(args.variants)
    except ValueError as exc:
        parser.error(str(exc))
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    engine = load_engine(args.model, "cpu")
    began = time.perf_counter()
    found = {name: 0 for name in [*variants, "rolling_z"]}
    false_alarms = dict.fromkeys(found, 0)
    for seed in range(args.seeds):
        x = stream(seed, args.jump)
        decisions = {name: detect_recording(engine, x, config).alerts for name, config in variants.items()}
        decisions["rolling_z"] = rolling_z(Stream("cycle", "synthetic", ["value"], x, []))[1]
        for name, alerts in decisions.items():
            hit, outside = tally(alerts)
            found[name] += hit
            false_alarms[name] += outside
    rows = [f"| {name} | {found[name]} of {args.seeds} | {false_alarms[name]} |" for name in found]
    command = f"python bench/cycle_jump.py --seeds {args.seeds} --jump {args.jump:g}"
    if args.variants:
        command += " --variants " + " ".join(f"'{v}'" for v in args.variants)
    table = "\n".join([
        f"Command: `{command}`; model `{Path(args.model).name}`; wall time {time.perf_counter() - began:.0f} s.", "",
        "| detector | shifts found | false alarms elsewhere (after probation) |", "|---|---|---|", *rows,
    ])  # fmt: skip
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
