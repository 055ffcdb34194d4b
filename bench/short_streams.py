"""Detector variants on short streams: 1,000–2,000 readings, so that a model and the statistics learn from 150–300.

Many real feeds reach a monitor with a short history, and the evaluator's protocol trains each stream's model on its
first 15 % only. The benchmark's streams are 2,500–5,000 readings long (375–750 of probation, the most the protocol
allows); this script builds one-fault streams of the same carriers at 1,000–2,000 readings
(``detection_corpus.short``: every kind, size and carrier, three streams without a fault), replays the committed
detector and any variants on them (``detector_replay``: one engine pass per stream and model, cached), runs the
benchmark's model-free peers on the same streams (``--peers``; ``paper`` needs the benchmark's cached distances and
is not run here) and prints the benchmark's table (NAB at committed alerts, events found, false alarms).

    python bench/short_streams.py --per-stream runs/short-per-stream --out bench/results/short_streams_per_stream.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model).
"""
from __future__ import annotations

import argparse
import time

from detector_replay import Bench, add_arguments, committed_and, corpus_flags
from trep_edge.datasets.paths import data_root
from trep_edge.training.evaluation import detection
from trep_edge.training.evaluation.detection_corpus import short

STREAMS = 33  # three of each kind (none included), every size and carrier
PEERS = {"rolling_z": detection.rolling_z, "hst": detection.hst, "stumpi": detection.stumpi}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated peers of {', '.join(PEERS)} "
                        "('' for none; hst and stumpi need the [bench] extra)")
    args = parser.parse_args()
    if args.quick:
        parser.error("--quick does not apply: this script has one set of streams")
    peers = [p for p in args.peers.split(",") if p]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peers {unknown}: choose from {', '.join(PEERS)}")
    variants = committed_and(args.variants, parser)
    bench = Bench.load(args, short(data_root(args.data_root), STREAMS))
    flags = (corpus_flags(args) + ["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants)
             + [f"--peers '{args.peers}'"] * (args.peers != ",".join(PEERS)))
    results = bench.results(" ".join(["python bench/short_streams.py", *flags]), args)
    for name in peers:
        began = time.perf_counter()
        bench.score(results, name, [PEERS[name](s) for s in bench.streams], began)
    bench.score_variants(results, variants, args.out)


if __name__ == "__main__":
    main()
