"""Detector variants on streams that start idle: the short streams' faults after a stretch of one repeated reading.

A plant sensor is often connected before its machine runs: its feed opens on one value repeated (a valve shut, a
pump off) and moves only later. A stream-scaled model (the general model) learns each lane's scale from its first
readings, so such a stream tests that the scale is learnt from the readings that move. This script takes the short
streams (``detection_corpus.short``, as ``bench/short_streams.py`` builds them), puts 250–449 readings (drawn per
stream, fixed seed) equal to each channel's first reading before each one (its events move with it; probation grows
with the stream), replays the
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

IDLE = (250, 450)
"""Readings of an idle stretch, drawn per stream: longer than the scale's warm-up (100) and the model's window, and
not a multiple of the warm-up, so that no warm-up happens to end where the machine starts."""


def idle_start(stream: Stream, idle: int) -> Stream:
    """``stream`` after ``idle`` readings that repeat its first reading of each channel."""
    first = np.array([column[np.isfinite(column)][0] for column in stream.values.T], dtype=stream.values.dtype)
    values = np.concatenate([np.tile(first, (idle, 1)), stream.values])
    events = [(onset + idle, last + idle) for onset, last in stream.events]
    return dataclasses.replace(stream, name=f"idle-{stream.name}", values=values, events=events,
                               test_start=stream.test_start + idle)  # fmt: skip


def idle_starts(streams: list[Stream], seed: int = 5) -> list[Stream]:
    """Each stream after an idle stretch of ``IDLE`` readings."""
    lengths = np.random.default_rng(seed).integers(*IDLE, size=len(streams))
    return [idle_start(stream, int(n)) for stream, n in zip(streams, lengths)]


if __name__ == "__main__":
    stream_set_main("bench/idle_starts.py", __doc__.split("\n\n")[0],
                    lambda args: idle_starts(short(data_root(args.data_root), STREAMS)))
