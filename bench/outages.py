"""Detector settings on feeds that go silent: outages longer than the windows' ``max_gap``, scored by time as the
daemon scores them.

A live feed drops out now and then: a network or broker outage, a gateway reboot, a sensor power cycle. A gap longer
than ``[windows] max_gap`` steps restarts the stream's windows (the model cannot see across it), and until the
outage round it restarted the stream's detector too: its cycle, schedule, run peaks, alert budget, repeat history and
``deviation`` statistics were learnt again from nothing after every outage, and a machine's first readings back are
when its faults are likely. ``[detector] resume`` (on by default) carries them over the gap (``Detector.resume``).

This script takes the detection benchmark's streams (``--set quick``: the quick corpus's synthetic, archive and
multi-fault streams, under per-stream models by default; ``--set periodic``: the clean schedules of
``bench/periodic_faults.py``), silences each for outages of ``--outage`` steps (drawn; fixed seed): one ending
``--lead`` steps before each labelled fault, and one more where no fault is near, all after probation and outside
every labelled window. It scores what is left at its timestamps (``offline.detect_recording`` on the model's period
grid, as ``trep-edge score --by-time`` and the daemon do; a silenced row has no alert) under the committed detector
and each ``--variants`` setting (default: ``resume = false``, the detector before), and prints the benchmark's table,
each row paired with the committed one on the same stream draws. The same streams without outages are the first row.

    python bench/outages.py --set quick --per-stream runs/detect-per-stream --out bench/results/outages_quick_per_stream.md
    python bench/outages.py --set periodic --out bench/results/outages_periodic_general.md
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from periodic_faults import periodic_faults
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import Engine, load_engine
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.windows import WindowConfig
from trep_edge.training.evaluation import detection, detection_metrics
from trep_edge.training.evaluation.detection_corpus import Stream, corpus
from trep_edge.training.evaluation.detection_per_stream import PerStreamModels

TRIES = 200
"""Draws for a place of each outage before it is left out (a short stream may have no room)."""


QUICK_CATEGORIES = ("synthetic", "archive", "multi")
"""The quick corpus's categories of injected faults (a sepsis stay, a few dozen hourly readings, has no room for an
outage)."""


def stream_set(name: str, root: str | None) -> list[Stream]:
    """The streams of ``--set``."""
    if name == "periodic":
        return periodic_faults()
    return [s for s in corpus(root, quick=True) if s.category in QUICK_CATEGORIES]


def outages(stream: Stream, rng: np.random.Generator, length: tuple[int, int], lead: tuple[int, int]) -> np.ndarray:
    """The rows ``[T]`` a stream is silent in: an outage ending ``lead`` rows before each labelled fault's onset and
    one more anywhere else, each of ``length`` rows (both ranges inclusive), after probation, clear of every labelled
    window and of one another (a place not found in ``TRIES`` draws is left out)."""
    t = len(stream.values)
    windows = detection_metrics.nab_windows(t, stream.events)
    busy = np.zeros(t, dtype=bool)
    busy[: detection_metrics.probation(t) + 1] = True
    for a, b in windows:
        busy[a : b + 1] = True
    silent = np.zeros(t, dtype=bool)
    ends = [onset - int(rng.integers(lead[0], lead[1] + 1)) for onset, _ in stream.events] + [None]
    for end in ends:
        for _ in range(TRIES):
            n = int(rng.integers(length[0], length[1] + 1))
            stop = int(rng.integers(n, t)) if end is None else end  # the outage's last silent row + 1
            start = stop - n
            if start >= 0 and not (busy[max(start - 1, 0) : stop + 1]).any():
                silent[start:stop], busy[start:stop] = True, True
                break
            if end is not None:
                end -= 1  # no room just there: try a little earlier
    return silent


def score(engine: Engine, stream: Stream, silent: np.ndarray, config: DetectorConfig) -> detection.Output:
    """The stream's score and alerts ``[T]`` with its ``silent`` rows left out, scored at their timestamps."""
    period = engine.card.period or 1.0
    rows = np.flatnonzero(~silent)
    det = detect_recording(engine, stream.values[rows], config, windows=WindowConfig(period=period),
                           timestamps=(engine.card.phase_origin + rows) * period)  # fmt: skip
    scores, alerts = np.full(len(silent), np.nan), np.zeros(len(silent), dtype=bool)
    scores[rows], alerts[rows] = det.score, det.alerts
    return scores, alerts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("quick", "periodic"), default="quick", help="the streams (module docstring)")
    parser.add_argument("--per-stream", nargs="?", const="runs/detect-per-stream", default=None, metavar="CACHE",
                        help="one model per stream, from this per-stream cache (default runs/detect-per-stream)")
    parser.add_argument("--model", default="models/general.onnx", help="the model without --per-stream")
    parser.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    parser.add_argument("--outage", type=int, nargs=2, default=(40, 600), metavar=("LEAST", "MOST"),
                        help="an outage's length in steps, drawn in this range (default: %(default)s)")
    parser.add_argument("--lead", type=int, nargs=2, default=(30, 400), metavar=("LEAST", "MOST"),
                        help="steps between an outage's end and the fault after it (default: %(default)s)")
    parser.add_argument("--variants", nargs="*", default=["afresh:resume=false"],
                        help="NAME:key=value;key=value detector settings beside the committed ones")
    parser.add_argument("--seed", type=int, default=0, help="seed of the outages")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    args = parser.parse_args()
    if args.outage[0] <= WindowConfig().max_gap or args.outage[0] > args.outage[1]:
        parser.error(f"--outage LEAST MOST: LEAST must be over max_gap ({WindowConfig().max_gap} steps, or the gap is "
                     f"filled, not an outage) and at most MOST; got {args.outage}")
    try:
        variants = {"trep": DetectorConfig()} | DetectorConfig.variants(args.variants)
    except ValueError as exc:
        parser.error(str(exc))
    streams = stream_set(args.set, args.data_root)
    models = PerStreamModels(Path(args.per_stream)) if args.per_stream else None
    general = None if models else load_engine(Path(args.model), "cpu")
    rng = np.random.default_rng(args.seed)
    silences = [outages(s, rng, tuple(args.outage), tuple(args.lead)) for s in streams]
    names = ["no outage", *variants]
    outputs: dict[str, list[detection.Output]] = {name: [] for name in names}
    seconds = dict.fromkeys(names, 0.0)
    started = time.perf_counter()
    for stream, silent in zip(streams, silences):
        engine = models.engine(stream) if models else general
        for name, config, cut in [("no outage", DetectorConfig(), np.zeros_like(silent)),
                                  *((name, config, silent) for name, config in variants.items())]:
            began = time.perf_counter()
            outputs[name].append(score(engine, stream, cut, config))
            seconds[name] += time.perf_counter() - began
        print(f"{stream.name}: {int(silent.sum())} rows silent, alerts "
              + ", ".join(f"{n} {int(outputs[n][-1][1].sum())}" for n in names), flush=True)  # fmt: skip
    categories = sorted({s.category for s in streams})
    groups = {"overall": categories, **{c: [c] for c in categories}}
    rows = {}
    for name in names:
        rows[name] = detection.summarise_groups(outputs[name], streams, groups)
        if name != "trep":
            rows[name]["overall"]["vs_trep"] = detection.vs_committed(outputs[name], outputs["trep"], streams)
    silent = f"{sum(int(np.any(s)) for s in silences)} streams silent for {sum(int(s.sum()) for s in silences)} rows"
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    results = {"command": command, "wall_seconds": time.perf_counter() - started,
               "streams": {c: sum(s.category == c for s in streams) for c in groups if c != "overall"},
               "model": f"each stream's own, from {args.per_stream}" if models else args.model,
               "icu_model": "none", "rows": rows, "seconds": seconds,
               "notes": {"outages": f"{silent} in all (outages of {args.outage[0]}–{args.outage[1]} steps, seed "
                                    f"{args.seed})"}}  # fmt: skip
    text = detection.markdown(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
