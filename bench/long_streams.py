"""Detector variants on long streams: 12,000–20,000 readings (six to ten weeks of a five-minute feed), zero to three
faults each.

A monitor watches a feed for weeks, and every false alarm of those weeks costs; the benchmark's streams hold at most
9,000 readings, where a rate of one false alarm per 1,000 readings costs a few and the alert budget (8 alerts per
40,000 readings at the plain bar) rarely binds. This script builds streams of the ETT carriers long enough and of
the drawn count feeds (``detection_corpus.long``: 15 streams, 24 faults, three fault-free), replays the committed
detector and any variants on them (``detector_replay``: one engine pass per stream and model, cached), runs the
benchmark's model-free peers on the same streams (``--peers``; ``paper`` needs the benchmark's cached distances and
is not run here, and ``stumpi``'s cost grows with the square of a stream's length, so name the others) and prints
the benchmark's table (NAB at committed alerts, events found, false alarms).

    python bench/long_streams.py --per-stream runs/long-per-stream --peers rolling_z,hst \
        --out bench/results/long_streams_per_stream.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model). ``--streams 45`` draws 45 streams
(the first 15 are the default's): 15 give paired intervals 15–18 points wide, too wide to choose a rule for a long
life on. The corpus places no fault
before 20 % of a stream's rows; ``--count-from 0.2`` scores each stream from there (or from its first labelled
window, if earlier), so that a setting's gain in that fault-free stretch is told from its gain where faults fall.
"""
from __future__ import annotations

from detector_prototypes import stream_set_main
from trep_edge.datasets.paths import data_root
from trep_edge.training.evaluation.detection_corpus import long

STREAMS = 15  # three cycles of detection_corpus.LONG_FAULTS

if __name__ == "__main__":
    stream_set_main("bench/long_streams.py", __doc__.split("\n\n")[0],
                    lambda args: long(data_root(args.data_root), args.streams), STREAMS)
