"""The paper's alert rule (TREP.md §5), an evaluation setting: threshold the adjusted score, then the delay rule.

The product decides alerts once, with ``runtime/trep_edge/runtime/core/detector.py`` (the daemon, ``trep-edge score``,
promotion). The paper's protocol decides differently, and its evaluations (anomaly, sepsis, the ``paper`` peer of
``eval detect``) and the export's parity of alerts keep it here, beside the scores it reads
(``runtime/trep_edge/runtime/core/scoring.py``: raw and adjusted scores, calibration):

- threshold ``μ + β σ`` from the card's ``Calibration`` or, for a cold start, from ``OnlineCalibration``
  (expanding, per stream; the threshold applied to a score is the one from the scores before it, and scores above it
  are not learned). NaN adjusted scores never alert and never enter statistics;
- ``detect`` / ``DelayRule``: alert when the adjusted score exceeds the threshold, except within ``delay`` points
  after the previous alert (the protocol's refractory period; point-adjusted F1 counts with the same delay).

``StreamScorer`` chains adjusted score, threshold and delay rule for S streams; ``score_series`` gives the same
results for one series at once.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from trep_edge.runtime.core.scoring import Calibration, ScoreHistory, StreamState, adjust_scores, threshold

DEFAULT_MIN_COUNT = 100
"""Finite adjusted scores a stream needs before its online threshold exists (warm-up)."""


class OnlineCalibration(StreamState):
    """Expanding (Welford) mean and population variance of each stream's adjusted scores, for a cold start.

    A stream has a threshold ``mean + beta * std`` once it has ``min_count`` scores; before that ``threshold``
    gives NaN, which never alerts. A score above the stream's current threshold is left out of the statistics:
    a clear anomaly must not inflate the baseline and hide the next one (the offline ``calibrate`` sees normal
    data only, and this keeps the two comparable). The price: a lasting change to larger scores keeps alerting
    until the stream is reset or recalibrated, and anomalies during warm-up are learned.
    State: ``count_``, ``mean_``, ``m2_`` (sum of squared deviations), all ``[S]``.
    """

    def __init__(self, beta: float = 4.0, min_count: int = DEFAULT_MIN_COUNT, n_streams: int = 0) -> None:
        if min_count < 2:
            raise ValueError(f"min_count must be >= 2 (a std needs two scores), got {min_count}")
        self.beta = float(beta)
        self.min_count = int(min_count)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"count_": np.zeros(n, dtype=np.int64), "mean_": np.zeros(n), "m2_": np.zeros(n)}

    def _config(self) -> dict[str, Any]:
        return {"beta": self.beta, "min_count": self.min_count}

    def stats(self, stream_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (count, mean, population std) of the selected streams; NaN mean and std for an empty stream."""
        idx = self._rows(stream_idx)
        count = self.count_[idx]
        seen = count > 0
        mean = np.where(seen, self.mean_[idx], np.nan)
        std = np.where(seen, np.sqrt(self.m2_[idx] / np.maximum(count, 1)), np.nan)
        return count, mean, std

    def threshold(self, stream_idx: np.ndarray) -> np.ndarray:
        """Return each selected stream's current threshold, NaN while it is warming up."""
        return self._threshold_rows(self._rows(stream_idx))

    def update(self, stream_idx: np.ndarray, adjusted: np.ndarray) -> None:
        """Learn the finite adjusted scores that do not exceed their stream's current threshold."""
        idx = self._rows(stream_idx, adjusted, "adjusted")
        self._learn_rows(idx, np.asarray(adjusted, dtype=np.float64), self._threshold_rows(idx))

    # Unchecked halves of threshold/update, for this module's per-step loops where validation would dominate.
    def _threshold_rows(self, idx: np.ndarray) -> np.ndarray:
        count = self.count_[idx]
        std = np.sqrt(self.m2_[idx] / np.maximum(count, 1))
        return np.where(count >= self.min_count, self.mean_[idx] + self.beta * std, np.nan)

    def _learn_rows(self, idx: np.ndarray, adjusted: np.ndarray, thresholds: np.ndarray) -> None:
        learn = np.isfinite(adjusted) & ~(adjusted > thresholds)
        rows, x = idx[learn], adjusted[learn]
        count = self.count_[rows] + 1
        delta = x - self.mean_[rows]
        mean = self.mean_[rows] + delta / count
        self.m2_[rows] += delta * (x - mean)
        self.mean_[rows] = mean
        self.count_[rows] = count


def _check_delay(delay: int) -> None:
    if delay < 0:
        raise ValueError(f"delay (points suppressed after an alert) must be >= 0, got {delay}")


def detect(adjusted: np.ndarray, thresholds: np.ndarray | float, delay: int) -> np.ndarray:
    """Return alerts ``[T]``: score above threshold and no alert in the previous ``delay`` points.

    Suppressed exceedances are not alerts and do not extend the suppression (the reference protocol). NaN
    scores or thresholds never alert.
    """
    _check_delay(delay)
    adjusted = np.asarray(adjusted, dtype=np.float64)
    if adjusted.ndim != 1:
        raise ValueError(f"adjusted must be a 1-D series [T], got shape {adjusted.shape}")
    thresholds = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), adjusted.shape)
    alerts = np.zeros(adjusted.shape, dtype=bool)
    last = -delay - 1
    # A loop over exceedances only (few), as each alert decides whether the next exceedance is suppressed.
    for i in np.flatnonzero(adjusted > thresholds):
        if i - last > delay:
            alerts[i] = True
            last = i
    return alerts


class DelayRule(StreamState):
    """Streaming ``detect`` for S streams: points since each stream's last alert, capped at ``delay + 1``.

    Every ``step`` call for a stream is a point, whatever its score (NaN included).
    State: ``since_`` ``[S]``.
    """

    def __init__(self, delay: int = 0, n_streams: int = 0) -> None:
        _check_delay(delay)
        self.delay = int(delay)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"since_": np.full(n, self.delay + 1, dtype=np.int64)}

    def _config(self) -> dict[str, Any]:
        return {"delay": self.delay}

    def step(self, stream_idx: np.ndarray, adjusted: np.ndarray, thresholds: np.ndarray | float) -> np.ndarray:
        """Return the alert flag of one new point per selected stream."""
        idx = self._rows(stream_idx, adjusted, "adjusted")
        thresholds = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), idx.shape)
        since = np.minimum(self.since_[idx] + 1, self.delay + 1)
        alerts = (np.asarray(adjusted, dtype=np.float64) > thresholds) & (since > self.delay)
        self.since_[idx] = np.where(alerts, 0, since)
        return alerts


@dataclass(frozen=True)
class ScoredSeries:
    """Adjusted scores, thresholds (NaN while warming up) and alert flags, aligned along time or streams."""

    adjusted: np.ndarray
    thresholds: np.ndarray
    alerts: np.ndarray


class StreamScorer:
    """Raw scores to alerts for S streams: ``ScoreHistory`` → fixed or ``OnlineCalibration`` threshold →
    ``DelayRule``.

    With ``calibration`` the threshold is ``threshold(calibration, beta)`` for every stream; without, each stream
    learns its own online (cold start) with ``min_count`` scores of warm-up.
    """

    def __init__(
        self,
        z: int = 21,
        beta: float = 4.0,
        delay: int = 0,
        calibration: Calibration | None = None,
        min_count: int = DEFAULT_MIN_COUNT,
        min_history: int = 1,
        n_streams: int = 0,
    ) -> None:
        self.calibration = calibration
        self.beta = float(beta)
        self.history = ScoreHistory(z, n_streams, min_history)
        self.online = OnlineCalibration(beta, min_count, n_streams if calibration is None else 0)
        self.detector = DelayRule(delay, n_streams)

    def _parts(self) -> dict[str, StreamState]:
        # The online statistics are only kept (and saved) when no fixed calibration replaces them.
        parts: dict[str, StreamState] = {"history": self.history, "detector": self.detector}
        if self.calibration is None:
            parts["online"] = self.online
        return parts

    @property
    def n_streams(self) -> int:
        """Number of streams."""
        return self.history.n_streams

    def add_streams(self, n: int) -> np.ndarray:
        """Append ``n`` fresh streams and return their indices."""
        for part in self._parts().values():
            new = part.add_streams(n)
        return new

    def remove_streams(self, stream_idx: np.ndarray) -> None:
        """Drop streams; later streams move down to fill the gaps (``np.delete`` numbering)."""
        for part in self._parts().values():
            part.remove_streams(stream_idx)

    def reset_streams(self, stream_idx: np.ndarray) -> None:
        """Return streams to their initial state, keeping their indices."""
        for part in self._parts().values():
            part.reset_streams(stream_idx)

    def step(self, stream_idx: np.ndarray, raw: np.ndarray) -> ScoredSeries:
        """Score one new raw score per selected stream; returns arrays aligned with ``stream_idx``."""
        adjusted = self.history.push(stream_idx, raw)
        if self.calibration is None:
            thresholds = self.online.threshold(stream_idx)
            self.online._learn_rows(np.asarray(stream_idx), adjusted, thresholds)
        else:
            thresholds = np.full(adjusted.shape, threshold(self.calibration, self.beta))
        alerts = self.detector.step(stream_idx, adjusted, thresholds)
        return ScoredSeries(adjusted, thresholds, alerts)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Return a copy of the state as one flat dict of arrays (parts' keys prefixed ``history/`` etc.)."""
        cal = None if self.calibration is None else self.calibration.to_dict()
        state = {"config": np.array(json.dumps({"beta": self.beta, "calibration": cal}))}
        for prefix, part in self._parts().items():
            state.update({f"{prefix}/{k}": v for k, v in part.state_dict().items()})
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StreamScorer:
        """Rebuild from ``state_dict()`` output (or its JSON round trip)."""
        config = json.loads(str(np.asarray(state["config"])))
        obj = cls(beta=config["beta"])
        if config["calibration"] is not None:
            obj.calibration = Calibration.from_dict(config["calibration"])
        for prefix, part in obj._parts().items():
            sub = {k.split("/", 1)[1]: v for k, v in state.items() if k.startswith(prefix + "/")}
            setattr(obj, prefix, type(part).from_state(sub))
        return obj


def score_series(
    raw: np.ndarray,
    z: int = 21,
    cal: Calibration | None = None,
    beta: float = 4.0,
    delay: int = 7,
    min_count: int = DEFAULT_MIN_COUNT,
    min_history: int = 1,
) -> ScoredSeries:
    """Score one series of raw scores ``[T]`` at once, with exactly the results of a ``StreamScorer``.

    The adjusted scores and the fixed-threshold path are vectorised (tests prove them equal to the streaming
    classes); the online threshold depends on which earlier scores exceeded it, so it runs ``OnlineCalibration``
    one step at a time.
    """
    _check_delay(delay)
    adjusted = adjust_scores(raw, z, min_history)
    if cal is not None:
        thresholds = np.full(adjusted.shape, threshold(cal, beta))
    else:
        thresholds = np.empty(adjusted.shape)
        online = OnlineCalibration(beta, min_count, n_streams=1)
        one = np.zeros(1, dtype=np.int64)
        current = math.nan
        for t in range(adjusted.shape[0]):
            thresholds[t] = current
            # Only a finite score can change the statistics; skipping the others keeps this loop cheap.
            if math.isfinite(adjusted[t]):
                online._learn_rows(one, adjusted[t : t + 1], thresholds[t : t + 1])
                current = online._threshold_rows(one)[0]
    return ScoredSeries(adjusted, thresholds, detect(adjusted, thresholds, delay))
