"""Detector variants on strictly periodic feeds whose faults are out of step with the cycle, not out of range.

Many plant and IT feeds follow a schedule: a line runs two shifts, a backup loads a server every night, a tank fills
and drains in batches. Their faults are often *contextual*: the day the line does not start (the step is missing),
a cycle held at its mean, a plateau raised or lowered while staying inside the day's range, a cycle that runs late,
a pulse at the wrong hour. Each reading of such a fault is ordinary against the last few hundred readings; only the
cycle says it is wrong. The benchmark's carriers (ETT, MIMIC-II, ECG, traffic) are periodic only loosely, so this
script synthesises clean schedules (no data read): five cycle shapes, periods of 96, 144 and 288 readings, noise of
1 % or 4 % of the cycle's range, 4,000 readings, and one fault of each kind per shape (``none``: false alarms only),
each fault one cycle long from a cycle's start in 40–80 % of the stream. It replays the committed detector and any
variants on them (``detector_replay``) and prints the benchmark's table.

    python bench/periodic_faults.py --peers rolling_z --out bench/results/periodic_faults_general.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model).
"""
from __future__ import annotations

import numpy as np

from detector_prototypes import stream_set_main
from trep_edge.training.evaluation.detection_corpus import Stream

LENGTH = 4000
PERIODS = (288, 144, 96)
NOISE = (0.01, 0.04)
"""Noise σ as a share of the cycle's range."""
FAULTS = ("missing", "flat", "raised", "lowered", "late", "extra", "none")


def shape_at(name: str, phase: np.ndarray) -> np.ndarray:
    """One cycle shape at ``phase`` in [0, 1): the level a fault-free feed reads there (range about 20–80)."""
    if name == "shift":  # a line running from a third of the day to three quarters, with short ramps
        return 20 + 60 * np.clip(np.minimum((phase - 0.33) / 0.02, (0.75 - phase) / 0.02), 0, 1)
    if name == "sine":
        return 50 + 30 * np.sin(2 * np.pi * phase)
    if name == "batch":  # a tank filled over 60 % of the cycle, then drained
        return np.where(phase < 0.6, 20 + 60 * phase / 0.6, 20 + 60 * np.exp(-(phase - 0.6) / 0.05))
    if name == "pulse":  # a nightly job
        return np.where((phase >= 0.1) & (phase < 0.18), 80.0, 20.0)
    if name == "twin":  # morning and evening demand
        return 20 + 60 * np.exp(-((phase - 0.3) / 0.05) ** 2) + 40 * np.exp(-((phase - 0.75) / 0.07) ** 2)
    raise ValueError(name)


SHAPES = ("shift", "sine", "batch", "pulse", "twin")


def write_fault(values: np.ndarray, busy: np.ndarray, shape: str, fault: str, start: int, period: int,
                mean: float) -> list[tuple[int, int]]:
    """Write ``fault`` into the cycle of ``values`` (a fault-free feed, changed in place) from ``start``: ``busy`` is
    the feed's level where the cycle runs in full (``shape_at``), ``mean`` the level a ``flat`` cycle is held at.
    Returns the fault's event, its first and last changed reading (none for ``none`` or a kind this does not know)."""
    before = values.copy()
    cycle = slice(start, start + period)
    high = busy[cycle] > 50  # the cycle's busy part (a sine's upper half)
    if fault == "missing":  # the busy part does not happen
        values[cycle] = np.where(high, busy[cycle].min(), busy[cycle])
    elif fault == "flat":  # the cycle held at the feed's mean
        values[cycle] = mean
    elif fault in ("raised", "lowered"):
        values[cycle] = np.where(high, busy[cycle] + (15 if fault == "raised" else -15), busy[cycle])
    elif fault == "late":  # a quarter of a cycle late
        values[cycle] = shape_at(shape, ((np.arange(start, start + period) - period // 4) % period) / period)
    elif fault == "extra":  # the busy part's start again, half a cycle later
        at = np.flatnonzero(high)[: max(period // 12, 4)]
        values[start + (at + period // 2) % period] = busy[start + at]
    elif fault == "weekend-run":  # the cycle run in full where the feed is quiet (a working week's weekend day)
        values[cycle] = busy[cycle]
    changed = np.flatnonzero(np.abs(values - before) > 1e-9)
    return [(int(changed[0]), int(changed[-1]))] if fault != "none" and len(changed) else []


def periodic_stream(shape: str, fault: str, period: int, noise: float, rng: np.random.Generator) -> Stream:
    """One feed of ``shape`` with ``fault`` in one cycle; the fault's event is its changed readings."""
    clean = shape_at(shape, (np.arange(LENGTH) % period) / period)
    values = clean.copy()
    start = period * int(rng.integers(int(0.4 * LENGTH) // period + 1, int(0.8 * LENGTH) // period))
    events = write_fault(values, clean, shape, fault, start, period, clean.mean())
    values = values + rng.normal(0, noise * 60, LENGTH)
    name = f"{shape}-{fault}-p{period}-n{noise:g}"
    return Stream(name, "periodic", ["value"], values[:, None].astype(np.float32), events,
                  meta={"shape": shape, "fault": fault, "period": period})


def periodic_faults(seed: int = 8) -> list[Stream]:
    """Every shape with every fault: periods and noise levels taken in turn."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (shape, fault) in enumerate((s, f) for s in SHAPES for f in FAULTS):
        out.append(periodic_stream(shape, fault, PERIODS[i % len(PERIODS)], NOISE[i % len(NOISE)], rng))
    return out


if __name__ == "__main__":
    stream_set_main("bench/periodic_faults.py", __doc__.split("\n\n")[0], lambda args: periodic_faults())
