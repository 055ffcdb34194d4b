"""The per-stream scaling's own cost per tick: ``preprocess.scale_windows`` for S lanes past their warm-up.

A stream-scaled model (the general model) learns every lane's newest reading and scales its window before each
engine call (``Monitor._scaled_windows``). This script times that call as the daemon makes it, one window of 128
readings per lane per tick, on Gaussian readings, after 172 untimed ticks (the warm-up of 100 readings and more), and
prints the median of ``--repeats`` runs per lane count.

    python bench/scaler_cost.py --out bench/results/scaler_cost.md
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.preprocess import StreamScaler, scale_windows

WINDOW, WARM, TICKS = 128, 172, 300


def tick_seconds(lanes: int, repeats: int, seed: int = 0) -> float:
    """Median seconds per tick of ``scale_windows`` for ``lanes`` lanes past their warm-up."""
    readings = np.random.default_rng(seed).normal(size=(lanes, WINDOW + WARM + TICKS, 1)).astype(np.float32)
    scaler, rows = StreamScaler(n_streams=lanes), np.arange(lanes)
    for t in range(WINDOW, WINDOW + WARM):
        scale_windows(scaler, rows, readings[:, t - WINDOW : t])
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        for t in range(WINDOW + WARM, WINDOW + WARM + TICKS):
            scale_windows(scaler, rows, readings[:, t - WINDOW : t])
        runs.append((time.perf_counter() - began) / TICKS)
    return float(np.median(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", default="1,100,1000", help="lane counts (comma-separated)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per lane count; the median is reported")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    args = parser.parse_args()
    lines = ["| lanes | µs per tick |", "|---|---|"]
    for lanes in (int(n) for n in args.lanes.split(",")):
        lines.append(f"| {lanes} | {tick_seconds(lanes, args.repeats) * 1e6:.0f} |")
    table = "\n".join([f"Command: `python bench/scaler_cost.py --lanes {args.lanes}`", "", *lines, ""])
    print(table)
    if args.out:
        Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
