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

from detector_prototypes import stream_set_main
from trep_edge.datasets.paths import data_root
from trep_edge.training.evaluation.detection_corpus import short

STREAMS = 33  # three of each kind (none included), every size and carrier

if __name__ == "__main__":
    stream_set_main("bench/short_streams.py", __doc__.split("\n\n")[0],
                    lambda args: short(data_root(args.data_root), STREAMS))
