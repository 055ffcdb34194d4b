"""Two models behind one alert gate: a per-stream model's score combined with the general model's, measured.

Under the evaluator's protocol each stream gets a model trained on its own first 15 %; the general model scores the
same streams about as well with fewer false alarms after probation (docs/detection.md, the escalation round). This
script asks whether the two together beat either: each stream's tape under the general model is replayed through
the committed detector and its score before the alert gate is kept per row; then the stream's per-stream tape is
replayed with the gate fed, on every row, the two scores combined by ``--modes``: ``fisher`` (Fisher's method over
the two surprises, as a lane combines its signals), ``mean`` or ``min`` (both must be surprised). The first row,
``trep``, is the per-stream model alone. Tapes come from ``bench/detector_replay.py``'s cache (captured if missing).

    python bench/two_models.py --quick --per-stream runs/detect-per-stream --modes fisher mean min \\
        --out bench/results/two_models_per_stream_quick.md
"""
from __future__ import annotations

import argparse
import copy
import time
from typing import Callable, Iterator
from unittest import mock

import numpy as np

import detector_replay as dr
from trep_edge.runtime.core.detector import AlertGate, DetectorConfig, combine_surprise

MODES: dict[str, Callable[[float, float], float]] = {
    "fisher": lambda mine, other: float(combine_surprise(np.array([[mine, other]]))[0]),
    "mean": lambda mine, other: float(np.nanmean([mine, other])),
    "min": lambda mine, other: min(mine, other) if np.isfinite(other) else mine,
}


def gated(feed: Callable[[float], float]) -> Callable:
    """An ``AlertGate.decide`` that passes each call's (single-stream) score through ``feed``."""
    decide = AlertGate.decide

    def on_decide(self: AlertGate, idx: np.ndarray, score: np.ndarray, *inputs: np.ndarray | None):
        return decide(self, idx, np.array([feed(float(score[0]))]), *inputs)

    return on_decide


def general_scores(bench: dr.Bench) -> dict[str, np.ndarray]:
    """Each stream's score before the gate, per row, under the committed detector on its tape (NaN: no step)."""
    out = {}
    for k, stream in enumerate(bench.streams):
        seen: list[float] = []

        def keep(score: float) -> float:
            seen.append(score)
            return score

        with mock.patch.object(AlertGate, "decide", gated(keep)):
            dr.replay([bench.tapes[k]], DetectorConfig(), bench.priors[k], [len(stream.values)])
        by_row = np.full(len(stream.values), np.nan)
        for row, score in zip(dr.step_rows(bench.tapes[k]), seen, strict=True):
            if row >= 0:
                by_row[row] = score
        out[stream.name] = by_row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    dr.add_arguments(parser)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = parser.parse_args()
    if not args.per_stream:
        parser.error("give --per-stream: the second model is the general one (--model)")
    own = dr.Bench.load(args)
    general_args = copy.copy(args)
    general_args.per_stream = None
    general_args.categories = ",".join(own.categories)
    general = general_scores(dr.Bench.load(general_args))
    results = own.results("python bench/two_models.py " + " ".join(
        dr.corpus_flags(args) + ["--modes", *args.modes]), args)  # fmt: skip
    began = time.perf_counter()
    own.score(results, "trep", own.run(DetectorConfig()), began)
    for mode in args.modes:
        began, outputs = time.perf_counter(), []
        for k, stream in enumerate(own.streams):
            other = general[stream.name]
            rows = iter(dr.step_rows(own.tapes[k]))

            def feed(mine: float, rows: Iterator[int] = rows, other: np.ndarray = other) -> float:
                row = next(rows)
                theirs = other[row] if row >= 0 else np.nan
                return MODES[mode](mine, theirs) if np.isfinite(mine) else mine

            with mock.patch.object(AlertGate, "decide", gated(feed)):
                outputs += dr.replay([own.tapes[k]], DetectorConfig(), own.priors[k], [len(stream.values)])
        own.score(results, f"two-models-{mode}", outputs, began)
    own.finish(results, args.out)


if __name__ == "__main__":
    main()
