"""False alarms on fault-free periodic streams whose feed drops readings, scored by time as the daemon scores them.

An alert on schedule is kept back (``[detector] schedule``): a daily edge that surprises a per-stream model every day
alerts twice, then its recurrences continue a progression of alerts spaced alike. A live feed drops readings, and the
monitor fills such a gap with missing steps (up to ``[windows] max_gap``), which are never scored. This script takes
the periodic shapes of ``bench/normal_streams.py`` whose edges alerted on schedule, drops a share of their readings
at random (fixed seed), scores what is left at its timestamps (``offline.detect_recording`` with the stream's
five-minute period, as ``trep-edge score --by-time`` and the daemon do) under each stream's own per-stream model
(``normal_streams``' cache), and counts the alerts after probation: the committed detector, the schedule keeping time
in scored readings instead of steps (the detector before the schedule kept steps), and no schedule.

    python bench/dropped_readings.py --out bench/results/dropped_readings.md
"""
from __future__ import annotations

import argparse
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator
from unittest import mock

import numpy as np

from normal_streams import LENGTH, streams
from trep_edge.runtime.core.detector import AlertGate, DetectorConfig
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.windows import WindowConfig
from trep_edge.training.evaluation import detection_metrics
from trep_edge.training.evaluation.detection_corpus import Stream
from trep_edge.training.evaluation.detection_per_stream import PerStreamModels

SHAPES = ("working hours (square wave)", "daily sawtooth (sharp reset)", "weekdays and weekends",
          "setpoint steps every 500")  # fmt: skip
PERIOD = 300.0  # seconds: five-minute data, as normal_streams' 288-reading day
DROPS = (0.0, 0.01, 0.03)


@contextmanager
def scored_reading_clock() -> Iterator[None]:
    """The schedule's clock as it was: a stream's scored readings, so that a gap's missing steps do not count."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        self.steps_[idx] = self.scored_[idx] + np.isfinite(score) - 1  # decide adds this step
        return decide(self, idx, score, *inputs)

    with mock.patch.object(AlertGate, "decide", on_decide):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-stream-cache", type=Path, default=Path("runs/detect-per-stream"),
                        help="per-stream models (default: %(default)s, shared with bench/normal_streams.py)")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    parser.add_argument("--seed", type=int, default=3, help="seed of the dropped readings")
    args = parser.parse_args()
    models = PerStreamModels(args.per_stream_cache)
    data = streams()
    probation = detection_metrics.probation(LENGTH)
    rows = {"committed": (DetectorConfig(), None),
            "schedule on scored readings": (DetectorConfig(), scored_reading_clock),
            "no schedule": (DetectorConfig(schedule=0), None)}  # fmt: skip
    heads = [f"{label}, {100 * drop:g} % dropped" for drop in DROPS for label in rows]
    lines = ["| stream | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    totals = np.zeros(len(heads), dtype=int)
    started = time.perf_counter()
    for name in SHAPES:
        values = data[name]
        engine = models.engine(Stream(name, "normal", ["value"], values, []))
        rng = np.random.default_rng(args.seed)
        cells = []
        for drop in DROPS:
            keep = rng.random(LENGTH) >= drop
            keep[:10] = True  # the stream's first readings come
            steps = np.flatnonzero(keep)
            for config, clock in rows.values():
                with clock() if clock else nullcontext():
                    d = detect_recording(engine, values[keep], config, windows=WindowConfig(period=PERIOD),
                                         timestamps=steps * PERIOD)
                cells.append(int((steps[np.flatnonzero(d.alerts)] >= probation).sum()))
        totals += cells
        lines.append(f"| {name} | " + " | ".join(map(str, cells)) + " |")
        print(lines[-1], flush=True)
    lines.append("| **all** | " + " | ".join(f"**{n}**" for n in totals) + " |")
    text = (f"Command: `python bench/dropped_readings.py --seed {args.seed}`; per-stream models from "
            f"`{args.per_stream_cache}`; alerts after the first {probation} steps of {LENGTH}; wall time "
            f"{time.perf_counter() - started:.0f} s.\n\n" + "\n".join(lines) + "\n")  # fmt: skip
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
