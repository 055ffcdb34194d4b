"""The detector on feeds of counts and bursts: every fault kind on six skewed, heavy-tailed carriers.

The benchmark's carriers are physical signals (loads, temperatures, vital signs, traffic, pressure, ECG); many plant
and IT feeds are counts and bursts instead (requests, messages, bytes, latencies, sparse events), whose ordinary
bursts stand far out of a symmetric window scale. This script puts every fault kind (and none) once on each of six
such feeds (``detection_corpus.counts``, 66 streams of 2,500–5,000 readings; the feeds are drawn, not read:
``../shared/data`` holds none without labels), replays the committed detector, any variants and any prototypes of
``bench/detector_prototypes.py`` on them (``detector_replay``: one engine pass per stream and model, cached), runs the
benchmark's model-free peers on the same streams and prints the benchmark's table.

    python bench/count_feeds.py --per-stream runs/counts-per-stream --out bench/results/count_feeds_per_stream.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model).
"""
from __future__ import annotations

import argparse

from detector_prototypes import PROTOTYPES, parse, score_prototypes
from detector_replay import Bench, add_arguments, add_peers_argument, chosen_peers, committed_and, corpus_flags
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.training.evaluation.detection_corpus import counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--prototypes", nargs="*", default=[], metavar="KIND:key=value;...",
                        help=f"prototypes to replay on the committed settings ({', '.join(PROTOTYPES)})")
    add_peers_argument(parser)
    args = parser.parse_args()
    if args.quick or args.categories:
        parser.error("--quick and --categories do not apply: this script has one set of streams")
    peers, peer_flags = chosen_peers(args, parser)
    variants = committed_and(args.variants, parser)
    try:
        prototypes = {spec: parse(spec) for spec in args.prototypes}
    except ValueError as exc:
        parser.error(str(exc))
    bench = Bench.load(args, counts())
    flags = (corpus_flags(args) + ["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants)
             + ["--prototypes", *(f"'{p}'" for p in args.prototypes)] * bool(args.prototypes) + peer_flags)
    results = bench.results(" ".join(["python bench/count_feeds.py", *flags]), args)
    bench.score_peers(results, peers)
    bench.score_variants(results, variants)
    score_prototypes(bench, results, prototypes, DetectorConfig())
    bench.finish(results, args.out)


if __name__ == "__main__":
    main()
