"""Alert episodes for the daemon: hysteresis and severity per stream, published on changes only.

Whether a reading alerts is decided once, by the detector's gate (``detector.AlertGate``: threshold, debounce,
refractory period). This module turns those alerts into episodes an operator can act on:

- **raised** when the detector alerts and the stream has no open episode;
- **updated** when the episode's severity rises (``warning`` → ``critical``). Severity is the episode's peak and
  never drops before the clear, so a score hovering around the critical level cannot flood the bus;
- **cleared** after the score stayed below the clear level for ``clear_after`` consecutive readings.

Levels, with ``thr`` the reading's threshold: warning above ``thr``, critical above
``thr + (critical_ratio - 1) * |thr|``, clear below ``thr - (1 - clear_ratio) * |thr|``. For the detector's
positive threshold (a surprise, −log10 of a tail probability) these are ``critical_ratio * thr`` and
``clear_ratio * thr``: with the defaults, critical at a tail probability 10^2.5 times smaller than the one that
raises. The ``|thr|`` form keeps clear < raise < critical even for a degenerate non-positive threshold.

A reading with a NaN score or threshold (no score yet, missing reading, warming up) is unknown: it neither advances
nor resets a clear run. A stream that stops producing scores therefore keeps its open episode; staleness is the
daemon's job.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .scoring import StreamState

SEVERITIES = ("none", "warning", "critical")
"""Severity names, indexed by the tracker's integer severity."""


@dataclass(frozen=True)
class AlertConfig:
    """Alert state machine settings (one ``[alerts]`` TOML table).

    Attributes:
        clear_after: consecutive readings below the clear level needed to clear an open episode.
        clear_ratio: clear level as a fraction of the threshold, in (0, 1]; below 1 gives hysteresis.
        critical_ratio: critical level as a multiple of the threshold, >= 1; ``inf`` disables ``critical``.
    """

    clear_after: int = 3
    clear_ratio: float = 0.8
    critical_ratio: float = 1.5

    def __post_init__(self) -> None:
        if self.clear_after < 1:
            raise ValueError(f"clear_after must be >= 1 reading, got {self.clear_after}")
        if not 0 < self.clear_ratio <= 1:
            raise ValueError(f"clear_ratio must lie in (0, 1], got {self.clear_ratio}")
        if not self.critical_ratio >= 1:
            raise ValueError(f"critical_ratio must be >= 1 (or inf), got {self.critical_ratio}")


@dataclass(frozen=True)
class AlertEvent:
    """A change of one stream's alert state, to publish."""

    stream_idx: int
    state: str  # "raised" | "updated" | "cleared"
    severity: str  # the episode's peak severity: "warning" | "critical"
    score: float
    threshold: float
    episode: int  # 1, 2, ... per stream; stable across the raised/updated/cleared events of one episode

    def alert_id(self, stream_name: str) -> str:
        """Return the episode's stable id, ``"{stream_name}-{episode}"``."""
        return f"{stream_name}-{self.episode}"


class AlertTracker(StreamState):
    """Per-stream alert episodes for S streams, stepped one reading per selected stream (module docstring).

    State, all ``[S]``: ``active_`` (episode open), ``severity_`` (peak severity index, 0 when idle),
    ``below_run_`` (consecutive clear-level readings while active), ``episode_`` (episodes raised so far).
    """

    def __init__(self, config: AlertConfig | None = None, n_streams: int = 0) -> None:
        self.config = config or AlertConfig()
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {
            "active_": np.zeros(n, dtype=bool),
            "severity_": np.zeros(n, dtype=np.int8),
            "below_run_": np.zeros(n, dtype=np.int64),
            "episode_": np.zeros(n, dtype=np.int64),
        }

    def _config(self) -> dict[str, Any]:
        return asdict(self.config)

    @classmethod
    def _from_config(cls, config: dict[str, Any]) -> AlertTracker:
        return cls(AlertConfig(**config))

    def step(
        self, stream_idx: np.ndarray, scores: np.ndarray, thresholds: np.ndarray | float, alerts: np.ndarray
    ) -> list[AlertEvent]:
        """Advance the selected streams by one reading each (score, threshold and the detector's alert flag);
        return the events, in ``stream_idx`` order."""
        cfg = self.config
        idx = self._rows(stream_idx, scores, "scores")
        score = np.asarray(scores, dtype=np.float64)
        thr = np.broadcast_to(np.asarray(thresholds, dtype=np.float64), idx.shape)
        alert = np.broadcast_to(np.asarray(alerts, dtype=bool), idx.shape)
        known = np.isfinite(score) & np.isfinite(thr)
        margin = np.abs(thr)
        # Not (inf - 1) * margin: a zero threshold would give NaN, not "never critical".
        critical_level = thr + (np.inf if math.isinf(cfg.critical_ratio) else (cfg.critical_ratio - 1) * margin)
        below = known & (score < thr - (1 - cfg.clear_ratio) * margin)
        level = np.where(known & (score > critical_level), 2, np.where(known & (score >= thr), 1, 0)).astype(np.int8)

        active = self.active_[idx]
        severity = self.severity_[idx]
        raised = alert & ~active
        below_run = np.where(active & below, self.below_run_[idx] + 1, np.where(known, 0, self.below_run_[idx]))
        cleared = active & (below_run >= cfg.clear_after)
        updated = active & ~cleared & (level > severity)

        peak = np.where(raised, np.maximum(level, 1), np.where(updated, np.maximum(level, severity), severity))
        episode = self.episode_[idx] + raised
        self.active_[idx] = (active & ~cleared) | raised
        self.severity_[idx] = np.where(cleared, 0, peak)
        self.below_run_[idx] = np.where(active & ~cleared, below_run, 0)
        self.episode_[idx] = episode

        state = np.select([raised, updated, cleared], ["raised", "updated", "cleared"], "")
        return [
            AlertEvent(int(idx[i]), str(state[i]), SEVERITIES[peak[i]], float(score[i]), float(thr[i]), int(episode[i]))
            for i in np.flatnonzero(state != "")
        ]
