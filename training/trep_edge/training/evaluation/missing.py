"""Robustness to missing data (TREP.md §5): accuracy with a fraction of every series' timesteps removed.

A removed timestep has every channel set to NaN (the encoder treats it as masked). Removal hits TRAIN and TEST
alike, and each fraction gets its own pretraining, so the model never sees the complete data.
"""
from __future__ import annotations

import numpy as np

from trep_edge.training.evaluation.classification import ClassificationData

FRACTIONS = tuple(round(0.1 * k, 1) for k in range(10))
"""0 %, 10 %, …, 90 % of the timesteps removed."""


def remove_timesteps(x: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``x [N, T, C]`` with ``round(fraction · T_i)`` distinct timesteps of each series set to NaN.

    ``T_i`` counts the observed steps of series i (trailing padding of unequal-length sets excluded), so the
    fraction is exact per series.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction of removed timesteps must be in [0, 1), got {fraction}")
    out = np.array(x, dtype=np.float32, copy=True)
    for i in range(out.shape[0]):
        observed = np.flatnonzero(~np.isnan(out[i]).all(axis=-1))
        drop = rng.choice(observed, size=int(round(fraction * observed.size)), replace=False)
        out[i, drop] = np.nan
    return out


def with_missing(data: ClassificationData, fraction: float, seed: int = 0) -> ClassificationData:
    """The same splits with ``fraction`` of the timesteps of every TRAIN and TEST series removed."""
    rng = np.random.default_rng(seed)
    return ClassificationData(
        data.name,
        remove_timesteps(data.x_train, fraction, rng),
        data.y_train,
        remove_timesteps(data.x_test, fraction, rng),
        data.y_test,
    )
