"""Two per-stream models of each stream, trained with different seeds, scored as one ensemble: a measurement.

Under the evaluator's protocol each stream's model learns from a few hundred readings, and a second training seed
moves a category by a few points (docs/detection.md, the training round): part of what the model signals
(``distance``, ``novelty``) say is the seed's, not the stream's. An ensemble of the two models would say less of it.
Exported as one encoder whose representation is the two members' side by side, the runtime would need no change:
the paper's L1 distance over the joint representation is the sum of the members' (the same surprise as their mean,
since the detector judges it in log space), and ``novelty`` is the Euclidean distance in the joint space.

This script measures that before any export is built. It reads the tapes of the two per-stream caches (each
captured by ``bench/detector_replay.py``'s ``Bench``, the models trained there first if missing), joins each
stream's two tapes call by call (``join_tapes``: the mean distance, the representations side by side, the
``deviation`` and repeat inputs of the first, which depend on the readings only) and replays the joined tapes on
the committed detector. The ensemble's row has no card prior, since no card describes its signals, and each seed is
scored both with its card's prior and without it, so that the ensemble is compared like with like
(docs/detection.md, the seed-ensemble round: the ensemble scored the mean of its two members, so the false alarms
are the stream's, not the seed's).

    python bench/seed_ensemble.py --per-stream runs/detect-per-stream --second runs/detect-per-stream-seed1 \\
        --second-flags='--seed 1' --out bench/results/seed_ensemble_per_stream_full.md
"""
from __future__ import annotations

import argparse
import copy
import shlex
import time

import numpy as np

import detector_replay as dr
from trep_edge.runtime.core.detector import DetectorConfig


def join_tapes(first: list, second: list) -> list:
    """One stream's two tapes (the same readings through two models of one shape) as an ensemble's tape: the
    ``init`` of a representation twice as wide, each step's mean ``distance`` and both representations side by
    side; resets, rows and the reading-only inputs (``deviation``, repeats, readings) from ``first``."""
    if len(first) != len(second):
        raise ValueError(f"tapes of {len(first)} and {len(second)} calls: not the same readings")
    out = []
    for a, b in zip(first, second):
        if a[0] != b[0]:
            raise ValueError(f"a {a[0]!r} call meets a {b[0]!r} call: not the same readings")
        if a[0] == "init":
            if a[2] != b[2]:
                raise ValueError(f"models of {a[2]} and {b[2]} channels")
            out.append(("init", a[1] + b[1], a[2]))
        elif a[0] == "step":
            _, streams, lanes, lane_of, distance, z, *readings = a  # deviation, repeats, readings
            width = len(lanes)
            joined = np.concatenate([np.asarray(z).reshape(width, -1), np.asarray(b[5]).reshape(width, -1)], axis=1)
            out.append(("step", streams, lanes, lane_of, (np.asarray(distance) + np.asarray(b[4])) / 2, joined,
                        *readings))  # fmt: skip
        else:
            out.append(a)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    dr.add_arguments(parser)
    parser.add_argument("--second", required=True, metavar="CACHE", help="the second seed's per-stream cache")
    parser.add_argument("--second-flags", required=True, metavar="FLAGS",
                        help="trep-edge train flags of the second seed's models, given with '=': "
                             "--second-flags='--seed 1'")
    args = parser.parse_args()
    if not args.per_stream:
        parser.error("--per-stream CACHE: the first seed's per-stream models")
    first = dr.Bench.load(args)
    second_args = copy.copy(args)
    second_args.per_stream, second_args.per_stream_train_flags = args.second, args.second_flags
    second = dr.Bench.load(second_args)
    joined = [join_tapes(a, b) for a, b in zip(first.tapes, second.tapes)]
    command = " ".join(["python bench/seed_ensemble.py", *dr.corpus_flags(args), "--second", args.second,
                        f"--second-flags={shlex.quote(args.second_flags)}"])  # fmt: skip
    results = first.results(command, args)
    none = [None] * len(first.streams)
    rows = [("first", first, None, first.priors), ("second", second, None, second.priors),
            ("first:no-prior", first, None, none), ("second:no-prior", second, None, none),
            ("ensemble:no-prior", first, joined, none)]  # fmt: skip
    for name, bench, tapes, priors in rows:
        began = time.perf_counter()
        kept, bench.priors = bench.priors, priors
        first.score(results, name, bench.run(DetectorConfig(), tapes), began)
        bench.priors = kept
    first.finish(results, args.out)


if __name__ == "__main__":
    main()
