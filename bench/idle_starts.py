"""Detector variants on streams that start idle: the short streams' faults after a stretch of one repeated reading.

A plant sensor is often connected before its machine runs: its feed opens on one value repeated (a valve shut, a
pump off) and moves only later. A stream-scaled model (the general model) learns each lane's scale from its first
readings, so such a stream tests that the scale is learnt from the readings that move. This script takes the short
streams (``detection_corpus.short``, as ``bench/short_streams.py`` builds them), puts ``IDLE`` readings equal to
each channel's first reading before each one (its events move with it; probation grows with the stream), replays the
committed detector and any variants on them (``detector_replay``) and prints the benchmark's table.

    python bench/idle_starts.py --peers '' --out bench/results/idle_starts_general.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from detector_prototypes import stream_set_main
from short_streams import STREAMS
from trep_edge.datasets.paths import data_root
from trep_edge.training.evaluation.detection_corpus import Stream, short

IDLE = 300  # readings of the idle stretch: longer than the scale's warm-up (100) and the model's window


def idle_start(stream: Stream) -> Stream:
    """``stream`` after ``IDLE`` readings that repeat its first reading of each channel."""
    first = np.array([column[np.isfinite(column)][0] for column in stream.values.T], dtype=stream.values.dtype)
    values = np.concatenate([np.tile(first, (IDLE, 1)), stream.values])
    events = [(onset + IDLE, last + IDLE) for onset, last in stream.events]
    return dataclasses.replace(stream, name=f"idle-{stream.name}", values=values, events=events,
                               test_start=stream.test_start + IDLE)  # fmt: skip


if __name__ == "__main__":
    stream_set_main("bench/idle_starts.py", __doc__.split("\n\n")[0],
                    lambda args: [idle_start(s) for s in short(data_root(args.data_root), STREAMS)])
