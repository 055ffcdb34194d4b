"""Forecasting on ETT (TREP.md §5): causal per-step representations, ridge to the next H points, α by validation.

Splits are 12/4/4 months. Channels are z-scored with train statistics, no date covariates. The representation of
step t is the last step of the window ``[t − 200, t]`` (nothing after t enters it), and a sample's targets
``x[t+1 .. t+H]`` lie in the same split as t, so nothing crosses a split boundary forwards: a test feature sees
only the past (validation values before the test start included, as a deployed model would), never a value of
the future.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trep_edge.datasets.ett import load_csv
from trep_edge.runtime.core.offline import sliding_windows
from trep_edge.runtime.core.preprocess import fit_normalisation
from trep_edge.runtime.core.time_index import parse_time_index, time_index

from trep_edge.training.data import resolve
from trep_edge.training.encoder import TRepEncoder

ALPHAS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 500.0, 1000.0)
HOURLY_HORIZONS = (24, 48, 168, 336, 720)
MINUTE_HORIZONS = (24, 48, 96, 288, 672)
ETT_SETS = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")
WINDOW = 201
"""Causal window: padding 200 plus the step itself, as the reference's sliding encoding."""


@dataclass
class Splits:
    """``[0, train_end)``, ``[train_end, valid_end)``, ``[valid_end, test_end)``."""

    train_end: int
    valid_end: int
    test_end: int


@dataclass
class ForecastData:
    """A normalised multichannel series ``values [T, C]``, its splits and horizons."""

    name: str
    values: np.ndarray
    splits: Splits
    horizons: tuple[int, ...]


def ett_splits(name: str) -> Splits:
    """12/4/4 months of 30 days, at one step an hour (ETTh) or four (ETTm)."""
    per_month = 30 * 24 * (4 if name.startswith("ETTm") else 1)
    return Splits(12 * per_month, 16 * per_month, 20 * per_month)


def load_ett(name: str, data_root: str | None = None) -> ForecastData:
    """``ETT/<name>.csv``, every channel z-scored with the train split's statistics."""
    if name not in ETT_SETS:
        raise ValueError(f"ETT set {name!r} is unknown: choose from {', '.join(ETT_SETS)}")
    values = load_csv(resolve(f"ETT/{name}.csv", data_root)).values
    splits = ett_splits(name)
    values = values[: splits.test_end]
    norm = fit_normalisation(values[: splits.train_end])
    horizons = MINUTE_HORIZONS if name.startswith("ETTm") else HOURLY_HORIZONS
    return ForecastData(name, norm.apply(values), splits, horizons)


@torch.no_grad()
def causal_representations(
    encoder: TRepEncoder, values: np.ndarray, window: int = WINDOW, time_index_spec: str = "relative", batch: int = 256
) -> np.ndarray:
    """``[T, F]``: row t is the last-step representation of the window ending at t (NaN-padded before 0)."""
    encoder.eval()
    conv = parse_time_index(time_index_spec)
    windows = sliding_windows(np.asarray(values, dtype=np.float32), window)
    out = []
    for lo in range(0, len(windows), batch):
        chunk = torch.from_numpy(np.ascontiguousarray(windows[lo : lo + batch]))
        mask = torch.ones(chunk.shape[:2], dtype=torch.bool)
        starts = np.arange(lo, lo + len(chunk), dtype=np.int64) - (window - 1)
        t = torch.from_numpy(time_index(conv, starts, window))
        out.append(encoder(chunk, mask, t)[:, -1].numpy())
    return np.concatenate(out).astype(np.float64)


def forecast_samples(
    features: np.ndarray, values: np.ndarray, lo: int, hi: int, horizon: int, drop: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Features at ``t ∈ [lo + drop, hi − horizon)`` and targets ``values[t+1 .. t+horizon]`` (flattened).

    Every target lies in ``[lo, hi)``: a sample never reaches into the next split.
    """
    steps = np.arange(lo + drop, hi - horizon)
    if steps.size == 0:
        raise ValueError(f"split [{lo}, {hi}) is too short for horizon {horizon} (after dropping {drop} steps)")
    offsets = steps[:, None] + np.arange(1, horizon + 1)[None, :]
    return features[steps], values[offsets].reshape(len(steps), -1)


class RidgePath:
    """Ridge regression (with intercept) for many α at the cost of one SVD of the centred features."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x_mean_ = x.mean(axis=0)
        self.y_mean_ = y.mean(axis=0)
        u, self.s_, self.vt_ = np.linalg.svd(x - self.x_mean_, full_matrices=False)
        self.uty_ = u.T @ (y - self.y_mean_)

    def predict(self, x: np.ndarray, alpha: float) -> np.ndarray:
        """Predictions of the ridge solution with penalty ``alpha``."""
        coef = self.vt_.T @ ((self.s_ / (self.s_**2 + alpha))[:, None] * self.uty_)
        return (x - self.x_mean_) @ coef + self.y_mean_


def fit_ridge(
    train: tuple[np.ndarray, np.ndarray], valid: tuple[np.ndarray, np.ndarray], alphas: tuple[float, ...] = ALPHAS
) -> tuple[RidgePath, float]:
    """Fit on train, pick α with the lowest validation MSE."""
    path = RidgePath(*train)
    errors = [float(np.mean((path.predict(valid[0], a) - valid[1]) ** 2)) for a in alphas]
    return path, float(alphas[int(np.argmin(errors))])


def evaluate(encoder: TRepEncoder, data: ForecastData, window: int = WINDOW, time_index_spec: str = "relative") -> dict:
    """MSE and MAE (normalised data) of the ridge forecaster at every horizon, with the chosen α."""
    s = data.splits
    features = causal_representations(encoder, data.values[: s.test_end], window, time_index_spec)
    results = {}
    for horizon in data.horizons:
        train = forecast_samples(features, data.values, 0, s.train_end, horizon, drop=window - 1)
        valid = forecast_samples(features, data.values, s.train_end, s.valid_end, horizon)
        test = forecast_samples(features, data.values, s.valid_end, s.test_end, horizon)
        path, alpha = fit_ridge(train, valid)
        error = path.predict(test[0], alpha) - test[1]
        results[str(horizon)] = {"mse": float(np.mean(error**2)), "mae": float(np.mean(np.abs(error))), "alpha": alpha}
    return results
