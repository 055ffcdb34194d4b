"""The time index a series' cycle suggests (``trep-edge train --time-index auto``; the cycle:
``runtime.core.seasonal.find_period``).

A periodic time index (TREP.md §4) gives the time embedding the phase of each reading, which a user of a new sensor
may not know how to choose; the training data's own autocorrelation says it.
"""
from __future__ import annotations

import numpy as np

from trep_edge.runtime.core.seasonal import find_period


def auto_time_index(x: np.ndarray) -> str:
    """``periodic:P`` for training data ``x [N, T, C]`` whose channels share a cycle of ``P`` readings, else
    ``relative``."""
    return f"periodic:{p}" if (p := find_period([s[:, c] for s in x for c in range(x.shape[2])])) else "relative"
