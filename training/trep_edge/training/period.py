"""A series' cycle length from its autocorrelation, and the time index it suggests (``trep-edge train --time-index
auto``).

A periodic time index (TREP.md §4) gives the time embedding the phase of each reading, which a user of a new sensor
may not know how to choose; the training data's own autocorrelation says it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MIN_READINGS = 64
"""Finite readings a series needs before its autocorrelation is read."""

MIN_LAG = 4
"""The shortest cycle looked for, as the detector prototypes that search for cycles always did (docs/detection.md)."""


def autocorrelation(x: np.ndarray) -> np.ndarray | None:
    """The normalised autocorrelation of ``x``'s finite readings at lags 0 … n − 1 (None: too few, or constant).

    Missing readings are dropped, not filled: the lags of a series with gaps are then counts of readings, not time.
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < MIN_READINGS or not np.std(x):
        return None
    x = x - x.mean()
    spectrum = np.fft.rfft(x, 2 * len(x))  # zero-padded to twice the length: the linear, not circular, correlation
    ac = np.fft.irfft(spectrum * np.conj(spectrum))[: len(x)]
    return ac / ac[0]


def find_period(series: Sequence[np.ndarray], acf: float = 0.3, pmax: int = 1000) -> int:
    """The lag of the highest local peak (first found on ties) of the series' mean autocorrelation, if it reaches
    ``acf``; 0 when none does (or no series has enough readings).

    Args:
        series: 1-D series (channels, or series of one channel); their autocorrelations are averaged up to the
            shortest one's length.
        acf: the least autocorrelation a peak needs to count as a cycle.
        pmax: the longest cycle looked for (and at most half the shortest series).
    """
    curves = [c for c in (autocorrelation(s) for s in series) if c is not None]
    if not curves:
        return 0
    n = min(len(c) for c in curves)
    ac = np.mean([c[:n] for c in curves], axis=0)
    best, lag = acf, 0
    for p in range(MIN_LAG, min(pmax, n // 2)):
        if ac[p] > best and ac[p] >= ac[p - 1] and ac[p] >= ac[p + 1]:
            best, lag = ac[p], p
    return lag


def auto_time_index(x: np.ndarray) -> str:
    """``periodic:P`` for training data ``x [N, T, C]`` whose channels share a cycle of ``P`` readings, else
    ``relative``."""
    return f"periodic:{p}" if (p := find_period([s[:, c] for s in x for c in range(x.shape[2])])) else "relative"
