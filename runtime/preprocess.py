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


def forward_fill(
    x: np.ndarray,
    limit: int,
    barrier: np.ndarray | None = None,
    age: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Carry each channel's last observed value forward over at most ``limit`` missing steps (``[T, C]``).

    Bedside vitals are charted at different rates (temperature every few hours, heart rate hourly); the model
    masks a step if any channel is missing, so without a bounded carry-forward most ICU steps could not be scored.
    Rows flagged in ``barrier`` start a new sequence: nothing is carried across them, and their own value (NaN or
    not) is the carried value with age ``age`` (steps since it was observed) — the streaming runtime uses such a
    row to hand each stream's carry-over into one vectorised call over many streams. Returns the filled values,
    and for every row the carried value and its age (so the last row gives the carry-over for the next call).
    """
    values = np.asarray(x, dtype=np.float32)
    n, c = values.shape
    rows = np.arange(n)
    is_barrier = np.zeros(n, dtype=bool) if barrier is None else np.asarray(barrier, dtype=bool)
    start_age = np.zeros((n, c), dtype=np.float64) if age is None else np.asarray(age, dtype=np.float64)
    observed = ~np.isnan(values) | is_barrier[:, None]
    source = np.maximum.accumulate(np.where(observed, rows[:, None], 0), axis=0)
    cols = np.arange(c)[None, :]
    carried = values[source, cols]
    carried_age = (rows[:, None] - source) + start_age[source, cols]
    fill = np.isnan(values) & (carried_age <= limit)
    return np.where(fill, carried, values), carried, carried_age


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
