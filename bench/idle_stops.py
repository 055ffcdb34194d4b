"""Detector variants on streams whose machine stops for a while: the short streams with a stretch of one repeated
reading in their life, after their warm-up and before their fault.

A plant machine stops (a shift ends, a line waits for parts) and its sensors hold their last value until it runs
again. The stop is worth one alert (a frozen channel is a sensor-fault alert), the restart is not a fault, and the
stream must be judged as well after it as before. This script takes the short streams (``detection_corpus.short``, as
``bench/short_streams.py`` builds them) and puts a stop of 250–449 readings (drawn per stream, fixed seed) that repeat
each channel's last reading, at a point drawn between the stream's probation and its fault (or anywhere after its
probation in a stream without one), labels the stop as an event of its own (its alert is wanted), replays the
committed detector and any variants on them (``detector_replay``) and prints the benchmark's table.

    python bench/idle_stops.py --peers '' --out bench/results/idle_stops_general.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from detector_prototypes import stream_set_main
from idle_starts import IDLE
from short_streams import STREAMS
from trep_edge.datasets.paths import data_root
from trep_edge.training.evaluation.detection_corpus import Stream, short

MARGIN = 100
"""Readings kept between the probation's end and a stop, and between a stop's start and the stream's fault."""


def idle_stop(stream: Stream, start: int, idle: int) -> Stream:
    """``stream`` with ``idle`` readings from ``start`` on that repeat its last reading before ``start``."""
    held = np.array([column[:start][np.isfinite(column[:start])][-1] for column in stream.values.T],
                    dtype=stream.values.dtype)
    values = np.concatenate([stream.values[:start], np.tile(held, (idle, 1)), stream.values[start:]])
    moved = [(onset + idle * (onset >= start), last + idle * (onset >= start)) for onset, last in stream.events]
    return dataclasses.replace(stream, name=f"stop-{stream.name}", values=values,
                               events=sorted(moved + [(start, start + idle - 1)]))  # fmt: skip


def idle_stops(streams: list[Stream], seed: int = 6) -> list[Stream]:
    """Each stream with a stop of ``IDLE`` readings between its probation and its first fault."""
    rng = np.random.default_rng(seed)
    out = []
    for stream in streams:
        end = min([onset for onset, _ in stream.events] or [len(stream.values)]) - MARGIN
        start = int(rng.integers(stream.test_start + MARGIN, max(end, stream.test_start + MARGIN + 1)))
        out.append(idle_stop(stream, start, int(rng.integers(*IDLE))))
    return out


if __name__ == "__main__":
    stream_set_main("bench/idle_stops.py", __doc__.split("\n\n")[0],
                    lambda args: idle_stops(short(data_root(args.data_root), STREAMS)))
