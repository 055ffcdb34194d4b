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

from detector_prototypes import PROTOTYPES, parse, score_prototypes
from detector_replay import Bench, add_arguments, add_peers_argument, chosen_peers, committed_and, corpus_flags
from trep_edge.datasets.paths import data_root
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.training.evaluation.detection_corpus import short

STREAMS = 33  # three of each kind (none included), every size and carrier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--prototypes", nargs="*", default=[], metavar="KIND:key=value;...",
                        help=f"prototypes to replay on the committed settings ({', '.join(PROTOTYPES)})")
    add_peers_argument(parser)
    args = parser.parse_args()
    if args.quick:
        parser.error("--quick does not apply: this script has one set of streams")
    peers, peer_flags = chosen_peers(args, parser)
    variants = committed_and(args.variants, parser)
    try:
        prototypes = {spec: parse(spec) for spec in args.prototypes}
    except ValueError as exc:
        parser.error(str(exc))
    bench = Bench.load(args, short(data_root(args.data_root), STREAMS))
    flags = (corpus_flags(args) + ["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants)
             + ["--prototypes", *(f"'{p}'" for p in args.prototypes)] * bool(args.prototypes) + peer_flags)
    results = bench.results(" ".join(["python bench/short_streams.py", *flags]), args)
    bench.score_peers(results, peers)
    bench.score_variants(results, variants)
    score_prototypes(bench, results, prototypes, DetectorConfig())
    bench.finish(results, args.out)


if __name__ == "__main__":
    main()
