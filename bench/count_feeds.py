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

from detector_prototypes import stream_set_main
from trep_edge.training.evaluation.detection_corpus import counts

if __name__ == "__main__":
    stream_set_main("bench/count_feeds.py", __doc__.split("\n\n")[0], lambda args: counts())
