"""Detector variants on streams whose faults come close together: what a remembered surprise costs the next fault.

The alert gate learns from what a stream has raised lately (the record, the run peaks, the alert budget), and the
benchmark's streams hold one fault each, or two or three spread over 6,000–9,000 readings (``multi``). A setting that
makes the gate remember more (fewer run peaks, a higher cap) can then look free there and still silence a third
fault that follows two larger ones within a few hundred readings. This script builds such streams from the
benchmark's carriers (``detection_corpus.clustered``: three or four faults, 250–450 readings apart), replays the
committed detector and any variants on them (``detector_replay``: one engine pass per stream and model, cached), and
prints the benchmark's table (NAB at committed alerts, events found, false alarms).

    python bench/clustered_faults.py --variants 'peaks-2:peaks=2' --out bench/results/clustered_peaks.md

``--per-stream CACHE`` runs each stream through a model of its own instead (the evaluator's protocol: trained on the
stream's first 15 % and cached there, as ``trep-edge eval detect --per-stream-train`` does).
"""
from __future__ import annotations

import argparse

from detector_replay import Bench, add_arguments, committed_and, corpus_flags
from trep_edge.datasets.paths import data_root
from trep_edge.training.evaluation.detection_corpus import clustered

STREAMS = 24


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    args = parser.parse_args()
    if args.quick:
        parser.error("--quick does not apply: this script has one set of streams")
    variants = committed_and(args.variants, parser)
    bench = Bench.load(args, clustered(data_root(args.data_root), STREAMS))
    results = bench.results("python bench/clustered_faults.py " + " ".join(
        corpus_flags(args) + ["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants)), args)
    bench.score_variants(results, variants)
    bench.finish(results, args.out)


if __name__ == "__main__":
    main()
