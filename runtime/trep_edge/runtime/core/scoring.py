"""The paper's anomaly scores and the card's calibration (TREP.md §5), numpy only; no alert decision.

The product decides alerts once, in ``detector.Detector`` (the daemon, ``trep-edge score``, promotion). This
module holds the paper protocol's scores, which the card's calibration, export parity, ``trep-edge doctor`` and the
paper's evaluations read; the paper's thresholds-and-delay rule on top of them is an evaluation setting
(``training/trep_edge/training/evaluation/paper_protocol.py``).

1. ``raw_score``: ``α_t = ||r^u_t - r^m_t||_1`` between the last-step representations of the unmasked and the
   last-step-masked window (also the detector's ``distance`` signal).
2. Adjusted score ``α^adj_t = (α_t - ᾱ_t) / max(ᾱ_t, EPS)`` with ``ᾱ_t`` the mean of the previous ``min(z, n_t)``
   raw scores, ``n_t`` = how many finite raw scores the stream has produced before t (``α_t`` itself excluded,
   as in the reference code). With no previous score (or fewer than ``min_history``) the adjusted score is NaN.
   Callers pass NaN as the raw score of a missing reading (its unmasked and masked representations coincide, so
   its L1 distance is a meaningless exact 0): its adjusted score is NaN and the history does not advance, so it
   neither enters later means nor counts as one of the z previous scores.
   ``EPS`` guards ``ᾱ_t == 0``: raw scores are L1 distances (≥ 0), so ``ᾱ_t`` is 0 only after a run of exact
   zeros; a later non-zero score is then a jump from nothing and gets a very large adjusted score, while a
   zero stays 0. ``adjust_scores`` does one series at once, ``ScoreHistory`` S streams one score at a time, with
   bit-identical results.
3. ``Calibration`` (the card's ``calibration``): mean and std of the adjusted scores of normal data
   (``calibrate``), and the paper's threshold ``μ + β σ`` (``threshold``).

Streaming state lives in ``stream_state.StreamState`` subclasses: rows of numpy arrays (row i = stream i), saved and
restored as a flat dict of arrays (``np.savez``-able, or JSON after ``.tolist()``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from trep_edge.runtime.core.stream_state import StreamState

EPS = 1e-12
"""Floor of the mean previous raw score in the adjusted-score denominator (guards ᾱ_t == 0)."""


def raw_score(z_unmasked: np.ndarray, z_masked: np.ndarray) -> np.ndarray:
    """Return the L1 distance over the last axis (``[..., F] -> [...]``, float64) between two representations."""
    zu = np.asarray(z_unmasked)
    zm = np.asarray(z_masked)
    if zu.shape != zm.shape or zu.ndim == 0:
        raise ValueError(
            f"z_unmasked {zu.shape} and z_masked {zm.shape} must have the same shape [..., F] with at least one axis"
        )
    return np.abs(zu.astype(np.float64) - zm.astype(np.float64)).sum(axis=-1)


def _check_raw(raw: np.ndarray) -> np.ndarray:
    raw = np.asarray(raw, dtype=np.float64)
    if np.any(np.isinf(raw)) or np.any(raw < 0):
        raise ValueError("raw scores must be finite and >= 0 (L1 distances), or NaN for a reading without a score")
    return raw


def _check_window(z: int, min_history: int) -> None:
    if z < 1:
        raise ValueError(f"z (number of previous scores averaged) must be >= 1, got {z}")
    if not 1 <= min_history <= z:
        raise ValueError(f"min_history must be in 1..z={z}, got {min_history}")


def _adjust(raw: np.ndarray, previous: np.ndarray, count: np.ndarray, min_history: int) -> np.ndarray:
    """Adjusted scores from raw ``[n]``, previous scores ``[n, z]`` (oldest first, zero-padded) and their counts."""
    # An explicit left-to-right sum fixes the order of the float additions whatever memory layout numpy sees (a
    # strided sliding view offline, a gathered copy when streaming), so both paths are bit-identical; a cumsum
    # difference would not be, and would lose precision on long series.
    total = np.zeros(raw.shape[0])
    for k in range(previous.shape[1]):
        total += previous[:, k]
    mean = total / np.maximum(count, 1)
    adjusted = (raw - mean) / np.maximum(mean, EPS)
    adjusted[count < min_history] = np.nan
    return adjusted


def adjust_scores(raw: np.ndarray, z: int = 21, min_history: int = 1) -> np.ndarray:
    """Return the adjusted scores ``[T]`` of one series of raw scores ``[T]`` (module docstring, step 2).

    ``min_history=1`` uses whatever previous scores exist; ``min_history=z`` reproduces the reference code,
    which leaves the first z scores undefined.
    """
    raw = _check_raw(raw)
    if raw.ndim != 1:
        raise ValueError(f"raw must be a 1-D series [T], got shape {raw.shape}")
    _check_window(z, min_history)
    scored = ~np.isnan(raw)
    values = raw[scored]
    n = values.shape[0]
    padded = np.concatenate([np.zeros(z), values])
    previous = np.lib.stride_tricks.sliding_window_view(padded, z)[:n]
    out = np.full(raw.shape, np.nan)
    out[scored] = _adjust(values, previous, np.minimum(np.arange(n), z), min_history)
    return out


class ScoreHistory(StreamState):
    """The previous ``z`` finite raw scores of each of S streams; ``push`` turns raw scores into adjusted ones.

    State: ``ring_`` ``[S, z]`` (unwritten slots hold 0), ``pos_`` ``[S]`` next slot to write (the oldest),
    ``count_`` ``[S]`` finite scores seen, capped at z.
    """

    def __init__(self, z: int = 21, n_streams: int = 0, min_history: int = 1) -> None:
        _check_window(z, min_history)
        self.z = z
        self.min_history = min_history
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {
            "ring_": np.zeros((n, self.z)),
            "pos_": np.zeros(n, dtype=np.int64),
            "count_": np.zeros(n, dtype=np.int64),
        }

    def _config(self) -> dict[str, Any]:
        return {"z": self.z, "min_history": self.min_history}

    def push(self, stream_idx: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """Return the adjusted scores of one new raw score per selected stream, then record the finite ones."""
        idx = self._rows(stream_idx, raw, "raw")
        raw = _check_raw(raw)
        pos = self.pos_[idx]
        # Oldest first, so the sum runs in the same order as adjust_scores' sliding window.
        slots = (pos[:, None] + np.arange(self.z)) % self.z
        previous = self.ring_[idx[:, None], slots]
        count = self.count_[idx]
        adjusted = _adjust(raw, previous, count, self.min_history)
        scored = ~np.isnan(raw)
        rows = idx[scored]
        self.ring_[rows, pos[scored]] = raw[scored]
        self.pos_[rows] = (pos[scored] + 1) % self.z
        self.count_[rows] = np.minimum(count[scored] + 1, self.z)
        return adjusted


@dataclass(frozen=True)
class Calibration:
    """Statistics of the adjusted score on normal data: mean ``mu``, population std ``sigma`` of ``n`` scores."""

    mu: float
    sigma: float
    n: int
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the model card's ``calibration`` object."""
        return asdict(self)

    @classmethod
    def from_dict(cls, card: Mapping[str, Any]) -> Calibration:
        """Read the model card's ``calibration`` object."""
        source = str(card.get("source", ""))
        return cls(mu=float(card["mu"]), sigma=float(card["sigma"]), n=int(card["n"]), source=source)


def calibrate(adjusted: np.ndarray, source: str = "") -> Calibration:
    """Return mean and population std (ddof=0, as the reference) of the finite adjusted scores of normal data."""
    values = np.asarray(adjusted, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    if values.size < 2:
        raise ValueError(f"calibrate needs at least 2 finite adjusted scores of normal data, got {values.size}")
    return Calibration(mu=float(values.mean()), sigma=float(values.std()), n=int(values.size), source=source)


def threshold(cal: Calibration, beta: float) -> float:
    """Return the alert threshold ``mu + beta * sigma``."""
    return cal.mu + beta * cal.sigma
