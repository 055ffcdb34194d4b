"""The detector's own cost per reading: ``Detector.step`` alone, the committed settings beside any variants.

`bench/throughput.py` times the engines (the model call); the detector runs after it on every scored reading, one
vectorised call per tick for all streams. This script times that call the way the daemon makes it: S streams of
one lane each, one reading per stream per tick, the general model's representation size, inputs drawn like the
real signals (log-normal distances, Gaussian representations, half-normal deviation levels and steps, with rare
large values so that the alert path and the memory writes it now makes are exercised), and readings on a cycle of
24 so that the seasonal floor finds it and works once ``seasonal_after`` readings have passed (``--warm`` should
cover them). Every variant sees the same inputs.

    python bench/detector_throughput.py --variants 'previous:memory_alerts=0' --out bench/results/detector_throughput.md
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.detector import Detector, DetectorConfig

DIMS = 64  # models/general.onnx's representation size


def inputs(streams: int, ticks: int, seed: int = 3, noise: float = 0.2) -> tuple[np.ndarray, ...]:
    """Per tick and stream: distance ``[T, S]``, representation ``[T, S, DIMS]``, deviation parts
    ``[T, S, 2, 1]`` (``window_deviation``: level and step of one channel), repeats ``[T, S, 1]``
    (``window_repeats``: a reading equal to the one before, as a quantised channel holds its value) and readings
    ``[T, S, 1]`` (a cycle of 24 with noise of σ ``noise``: at 0.2 no channel keeps to it closely enough to be
    scheduled, ``DetectorConfig.seasonal_fit``; at 0.05 every one does)."""
    rng = np.random.default_rng(seed)
    distance = rng.lognormal(0.0, 0.5, (ticks, streams))
    z = rng.normal(size=(ticks, streams, DIMS)).astype(np.float32)
    deviation = np.abs(rng.normal(size=(ticks, streams, 2, 1)))
    rare = rng.random((ticks, streams)) < 0.002
    distance[rare] *= 30.0
    deviation[rare] += 25.0
    z[rare] += 6.0
    repeat = (rng.random((ticks, streams, 1)) < 0.2).astype(np.float64)
    reading = np.sin(2 * np.pi * np.arange(ticks) / 24)[:, None, None] + rng.normal(0, noise, (ticks, streams, 1))
    return distance, z, deviation, repeat, reading


def readings_per_second(
    config: DetectorConfig, streams: int, warm: int, timed: int, noise: float = 0.2
) -> tuple[float, int, float, float]:
    """Readings per second of ``Detector.step`` over the ``timed`` ticks after ``warm`` untimed ones, the alerts, and
    the seconds of the one tick in which every stream's cycles are found (the ``seasonal_after``-th: a scheduled
    channel's statistics are relearnt then) and of the one in which the seasonal record first holds a week (its
    ``size``-th: every channel with a cycle is looked at again, ``SeasonalRecord._look_again``); NaN when the ticks
    do not reach it."""
    distance, z, deviation, repeat, reading = inputs(streams, warm + timed, noise=noise)
    detector = Detector(config, DIMS)
    detector.add(streams, streams)
    every = np.arange(streams)
    alerts, found, again = 0, np.nan, np.nan
    for t in range(warm + timed):
        if t == warm:
            start = time.perf_counter()
        began = time.perf_counter()
        out = detector.step(every, every, every, distance[t], z[t], deviation[t], repeat[t], reading[t])
        if t == config.seasonal_after - 1:
            found = time.perf_counter() - began
        if t == detector.seasons.size - 1 and detector.seasons.week_fit:
            again = time.perf_counter() - began
        alerts += int(out.alert.sum()) if t >= warm else 0
    return streams * timed / (time.perf_counter() - start), alerts, found, again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1,100,1000", help="stream counts (comma-separated)")
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--warm", type=int, default=800, help="untimed ticks first (warm-up, memory filling, cycles "
                        "found)")
    parser.add_argument("--ticks", type=int, default=300, help="timed ticks")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case, the variants taking turns; the median "
                        "rate is reported (a 2-core machine shared with other jobs moves single runs by 2x)")
    parser.add_argument("--noise", type=float, default=0.2, help="the readings' noise around their cycle (0.05: every "
                        "channel scheduled)")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    args = parser.parse_args()
    try:
        counts = [int(s) for s in args.streams.split(",")]
        variants = {"committed": DetectorConfig()} | DetectorConfig.variants(args.variants)
    except ValueError as exc:
        parser.error(str(exc))
    began = time.perf_counter()
    rows = []
    for s in counts:
        runs = [[readings_per_second(config, s, args.warm, args.ticks, args.noise) for config in variants.values()]
                for _ in range(max(1, args.repeats))]  # fmt: skip
        cells = [(float(np.median([run[k][0] for run in runs])), runs[0][k][1],
                  *(float(np.median([run[k][j] for run in runs])) for j in (2, 3))) for k in range(len(variants))]
        rows.append(f"| {s:,} | " + " | ".join(
            f"{rate:,.0f} ({alerts}; {found * 1e3:,.0f} ms" + (f"; {again * 1e3:,.0f} ms)" if again == again else ")")
            for rate, alerts, found, again in cells) + " |")  # fmt: skip
    command = f"python bench/detector_throughput.py --streams {args.streams} --repeats {args.repeats}"
    command += f" --noise {args.noise:g}" * (args.noise != 0.2) + f" --warm {args.warm}" * (args.warm != 800)
    command += f" --ticks {args.ticks}" * (args.ticks != 300)
    if args.variants:
        command += " --variants " + " ".join(f"'{v}'" for v in args.variants)
    text = "\n".join([
        f"Command: `{command}`; {args.warm} warm-up and {args.ticks} timed ticks per case; wall time "
        f"{time.perf_counter() - began:.0f} s.",
        "",
        "Readings per second of `Detector.step`, the median of the runs (alerts in the timed ticks; the median time of "
        "the one tick in which every stream's cycles are found, and of the one in which its seasonal record first "
        "holds a week, where the ticks reach it):",
        "",
        "| streams | " + " | ".join(variants) + " |",
        "|---" * (len(variants) + 1) + "|",
        *rows,
    ]) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
