"""The streaming protocol run over a whole recorded series: every step scored exactly as the daemon would.

Used by export calibration, ``trep-edge score`` and the evaluations, so offline numbers and the daemon's come
from the same windows, the same engine call and the same scoring functions.
"""
from __future__ import annotations

import numpy as np

from .engine import Engine
from .preprocess import Normalisation, difference, forward_fill
from .scoring import raw_score


def prepare(engine: Engine, raw: np.ndarray) -> np.ndarray:
    """Raw readings ``[T, C]`` in the card's channel order → differenced and normalised model input."""
    card = engine.card
    values = np.asarray(raw, dtype=np.float32)
    if values.ndim != 2 or values.shape[1] != card.input_dims:
        raise ValueError(f"series must be [time, {card.input_dims}] ({card.channels}), got shape {values.shape}")
    filled = forward_fill(values, card.forward_fill)[0]
    return Normalisation.from_dict(card.normalisation).apply(difference(filled, card.differencing))


def sliding_windows(values: np.ndarray, window: int) -> np.ndarray:
    """``[T, C]`` → ``[T, W, C]``: the window ending at each step, NaN-padded before the series starts."""
    length, channels = values.shape
    padded = np.full((length + window - 1, channels), np.nan, dtype=np.float32)
    padded[window - 1 :] = values
    return np.lib.stride_tricks.sliding_window_view(padded, window, axis=0).transpose(0, 2, 1)


def raw_scores(engine: Engine, values: np.ndarray, start: int = 0, batch: int = 256) -> np.ndarray:
    """Raw masked-vs-unmasked score of every step of a prepared series ``[T, C]`` (float64 ``[T]``, NaN = none).

    ``start`` is the absolute index of the series' first step (for a periodic time index).
    """
    window = engine.card.window
    windows = sliding_windows(values, window)
    out = np.empty(len(values), dtype=np.float64)
    for lo in range(0, len(values), batch):
        chunk = np.ascontiguousarray(windows[lo : lo + batch])
        starts = start + np.arange(lo, lo + len(chunk), dtype=np.int64) - (window - 1)
        zu, zm = engine.last_step_pair(chunk, starts)
        out[lo : lo + len(chunk)] = raw_score(zu, zm)
    # A step with a missing channel is masked by the model in both variants, so its score would be a meaningless
    # 0: it has no score (NaN), exactly as in the streaming monitor.
    out[np.isnan(values).any(axis=1)] = np.nan
    return out
