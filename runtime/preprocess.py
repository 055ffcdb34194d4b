"""Input preprocessing shared by training and the runtime: differencing and per-channel normalisation."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def difference(x: np.ndarray, order: int) -> np.ndarray:
    """Difference ``order`` times along the time axis (axis −2 of ``[..., T, C]``), NaN-filling the first steps.

    Keeping the length lets labels and timestamps stay aligned with the differenced series.
    """
    out = np.asarray(x, dtype=np.float32)
    for _ in range(order):
        shifted = np.full_like(out, np.nan)
        shifted[..., 1:, :] = out[..., 1:, :] - out[..., :-1, :]
        out = shifted
    return out


@dataclass
class Normalisation:
    """Per-channel ``(x − mean) / std`` with statistics of the training data."""

    mean: np.ndarray
    std: np.ndarray

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Normalise ``[..., C]`` values (NaN stays NaN)."""
        return ((np.asarray(x, dtype=np.float32) - self.mean) / self.std).astype(np.float32)

    def to_dict(self) -> dict:
        """JSON form for the model card."""
        return {"mean": [float(v) for v in self.mean], "std": [float(v) for v in self.std]}

    @classmethod
    def from_dict(cls, data: dict) -> "Normalisation":
        """Read the model card's form."""
        return cls(np.asarray(data["mean"], dtype=np.float32), np.asarray(data["std"], dtype=np.float32))


def fit_normalisation(x: np.ndarray) -> Normalisation:
    """Per-channel NaN-aware mean and std over every axis but the last; a constant channel gets std 1."""
    flat = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
    observed = ~np.isnan(flat)
    if not observed.any(axis=0).all():
        empty = np.flatnonzero(~observed.any(axis=0)).tolist()
        raise ValueError(f"channel(s) {empty} have no observed value: drop them or choose other channels")
    mean = np.nanmean(flat, axis=0)
    std = np.nanstd(flat, axis=0)
    std = np.where(std > 1e-8, std, 1.0)
    return Normalisation(mean.astype(np.float32), std.astype(np.float32))
