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

``Lifecycle`` names what the daemon publishes in Grafana's vocabulary (docs/alerts.md): an episode's messages are
``firing`` (raised, updated) and ``resolved`` (cleared); a stream is ``ok`` once it is scored, ``pending`` while the
detector's gate counts a run of hot readings that has not alerted yet, ``no_data`` when it fell silent or its source
said it is gone (a Sparkplug death). It decides nothing: episodes come from the tracker, hot runs from the gate,
silence from the monitor's arrival times, deaths from the Sparkplug decoder.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from trep_edge.runtime.core.stream_state import StreamState

SEVERITIES = ("none", "warning", "critical")
"""Severity names, indexed by the tracker's integer severity."""

def episode_id(stream: str, episode: int) -> str:
    """An episode's stable id, ``"{stream}-{episode}"`` (episodes are numbered 1, 2, ... per stream)."""
    return f"{stream}-{int(episode)}"


STATUS_OF_STATE = {"raised": "firing", "updated": "firing", "cleared": "resolved"}
"""The lifecycle status (Grafana's vocabulary) of an episode's or a sensor fault's state."""


@dataclass(frozen=True)
class AlertConfig:
    """Alert state machine settings (one ``[alerts]`` TOML table).

    Attributes:
        clear_after: consecutive readings below the clear level needed to clear an open episode.
        clear_ratio: clear level as a fraction of the threshold, in (0, 1]; below 1 gives hysteresis.
        critical_ratio: critical level as a multiple of the threshold, >= 1; ``inf`` disables ``critical``.
        pending: publish a stream's ``pending`` status (and ``ok`` when it passes without an alert) once per run of
            readings the detector counts towards an alert that has not come yet (``[detector] debounce`` > 1, or
            the refractory period holding it back); off by default so that the bus is not flooded.
        explain: attach each channel's contribution to the score, the top channels and their expected and seen
            values to every raised and updated alert (``explain.py``; a fixed-channel model runs one extra engine
            call with a row per channel for the readings that raise or escalate an alert, docs/performance.md).
    """

    clear_after: int = 3
    clear_ratio: float = 0.8
    critical_ratio: float = 1.5
    pending: bool = False
    explain: bool = True

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
    # What raised the episode: "anomaly" (the anomaly score) | "stuck" (a frozen channel) | "range" (a reading beyond
    # everything its channel had read, ``detector.RangeRecord``).
    cause: str = "anomaly"

    def alert_id(self, stream_name: str) -> str:
        """Return the episode's stable id, ``"{stream_name}-{episode}"``."""
        return episode_id(stream_name, self.episode)


class AlertTracker(StreamState):
    """Per-stream alert episodes for S streams, stepped one reading per selected stream (module docstring).

    State, all ``[S]``: ``active_`` (episode open), ``severity_`` (peak severity index, 0 when idle),
    ``below_run_`` (consecutive clear-level readings while active), ``episode_`` (episodes raised so far),
    ``stuck_`` (the open episode was raised by a stuck sensor, ``detector.StuckRecord``), ``ranged_`` (by a reading
    beyond its channel's range, ``detector.RangeRecord``).
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
            "stuck_": np.zeros(n, dtype=bool),
            "ranged_": np.zeros(n, dtype=bool),
        }

    def _config(self) -> dict[str, Any]:
        # Not ``pending``: the daemon's publishing, not the episodes' state; and a checkpoint without it still
        # loads in a daemon from before it (a rollback keeps its warm streams).
        return {k: v for k, v in asdict(self.config).items() if k != "pending"}

    @classmethod
    def _from_config(cls, config: dict[str, Any]) -> AlertTracker:
        return cls(AlertConfig(**config))

    def open_ids(self, names: list[str]) -> dict[str, str]:
        """The open episodes' ids by stream, for streams named ``names`` (row order)."""
        return {names[i]: episode_id(names[i], self.episode_[i]) for i in np.flatnonzero(self.active_).tolist()}

    def close(self, stream_idx: np.ndarray) -> None:
        """End the selected streams' open episodes without a reading (the caller publishes the clear); their episode
        numbers keep counting."""
        idx = self._rows(stream_idx)
        self.active_[idx] = False
        self.severity_[idx] = 0
        self.below_run_[idx] = 0

    def step(
        self, stream_idx: np.ndarray, scores: np.ndarray, thresholds: np.ndarray | float, alerts: np.ndarray,
        stuck: np.ndarray | None = None, ranged: np.ndarray | None = None,
    ) -> list[AlertEvent]:
        """Advance the selected streams by one reading each (score, threshold, the detector's alert flag, and whether
        that alert is a stuck sensor's or a reading's beyond its channel's range); return the events, in
        ``stream_idx`` order. An episode keeps the cause that raised it until it clears."""
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
        causes = []
        for flags, given in ((self.stuck_, stuck), (self.ranged_, ranged)):
            held = flags[idx]
            if given is not None:
                held = np.where(raised, np.broadcast_to(np.asarray(given, dtype=bool), idx.shape), held)
            flags[idx] = held & ~cleared
            causes.append(held)
        cause = np.select(causes, ["stuck", "range"], "anomaly")

        state = np.select([raised, updated, cleared], ["raised", "updated", "cleared"], "")
        return [
            AlertEvent(int(idx[i]), str(state[i]), SEVERITIES[peak[i]], float(score[i]), float(thr[i]), int(episode[i]),
                       str(cause[i]))
            for i in np.flatnonzero(state != "")
        ]


# -- lifecycle ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamStatus:
    """A stream's status change, to publish as a ``kind: "stream"`` message (docs/alerts.md).

    ``status`` is ``ok``, ``pending`` or ``no_data``; ``reason`` says which transition: ``first_score`` (the
    stream's first scored reading: the retained state topic only, so a dashboard lists it), ``pending``,
    ``pending_ended`` (the hot run passed without an alert), ``silent``, ``death`` (a Sparkplug NDEATH/DDEATH) or
    ``recovered`` (its next accepted reading after ``no_data``). ``retain`` is the message to retain on the state
    topic instead of this one: the open episode's last message on a recovery, so the retained state shows the
    episode again (None: retain this one).
    """

    stream: str
    status: str
    reason: str
    timestamp: float
    open_alert: str | None = None
    retain: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def to_alerts(self) -> bool:
        """Whether the alerts topic gets it too (every change but a stream's first ``ok``)."""
        return self.reason != "first_score"


class Lifecycle:
    """Per stream, what its retained state says (ok, pending, firing, resolved, no_data) and the stream-level changes
    that keep it current. Keyed by stream name: names survive evictions, restarts and reshards, row numbers do not.

    ``open`` holds the last message of each open episode (a restored episode published by an earlier run and not
    in the checkpoint's lifecycle holds ``{"alert_id": ...}`` only), ``pending`` the streams whose pending status
    is out, ``stale`` the streams reported ``no_data`` (and when), ``known`` the streams whose state topic carries a
    message. Only ``to_json`` of these is checkpointed (``known`` is rebuilt on restore).
    """

    def __init__(self, pending: bool = False) -> None:
        self.pending_enabled = pending
        self.known: set[str] = set()
        self.open: dict[str, dict[str, Any]] = {}
        self.pending: set[str] = set()
        self.stale: dict[str, float] = {}

    def episode(self, stream: str, message: Mapping[str, Any]) -> None:
        """Note an episode message retained on the stream's state topic (state raised, updated or cleared)."""
        self.known.add(stream)
        self.pending.discard(stream)  # a pending run that alerts is firing now
        if message.get("state") == "cleared":
            self.open.pop(stream, None)
        else:
            self.open[stream] = dict(message)

    def scored(
        self,
        stream: str,
        warming: bool,
        timestamp: float,
        hot_run: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> StreamStatus | None:
        """The change a scored reading makes, if any. ``hot_run`` is the detector gate's run of hot readings that has
        not alerted (0 = none) after this reading, None when unknown (not the stream's latest reading of the tick:
        then only the first ``ok`` can follow); ``details`` go into a ``pending`` message."""
        if stream in self.open or stream in self.stale:
            return None  # the retained state is the episode, or no_data until the recovery
        if hot_run is None:
            pass
        elif hot_run > 0 and not warming and self.pending_enabled:
            if stream in self.pending:
                return None  # once per run
            self.pending.add(stream)
            self.known.add(stream)
            return StreamStatus(stream, "pending", "pending", timestamp, details=dict(details or {}))
        elif stream in self.pending:  # the run ended without an alert (or pending publishing was turned off)
            self.pending.discard(stream)
            return StreamStatus(stream, "ok", "pending_ended", timestamp)
        if warming or stream in self.known:
            return None
        self.known.add(stream)
        return StreamStatus(stream, "ok", "first_score", timestamp)

    def silent(self, streams: Iterable[str], now: float, after: float) -> list[StreamStatus]:
        """``no_data`` for each of ``streams`` (silent for ``after`` seconds) not yet reported, once per silence."""
        return self.offline(streams, now, "silent", {"silent_for": after})

    def offline(
        self, streams: Iterable[str], now: float, reason: str, details: Mapping[str, Any]
    ) -> list[StreamStatus]:
        """``no_data`` for each of ``streams`` not yet reported, once until its recovery: silent, or ``death`` (its
        source said it is gone: a Sparkplug NDEATH/DDEATH); ``details`` go into each message."""
        out = []
        for stream in streams:
            if stream in self.stale:
                continue
            self.stale[stream] = now
            self.pending.discard(stream)
            self.known.add(stream)
            out.append(StreamStatus(stream, "no_data", reason, now, self._open_id(stream), details=dict(details)))
        return out

    def accepted(self, stream: str, timestamp: float) -> StreamStatus | None:
        """``ok`` when a stream reported ``no_data`` has a reading accepted again; else None (cheap: per reading)."""
        since = self.stale.pop(stream, None)
        if since is None:
            return None
        episode = self.open.get(stream)
        retain = episode if episode is not None and "kind" in episode else None
        return StreamStatus(stream, "ok", "recovered", timestamp, self._open_id(stream), retain,
                            {"no_data_since": since})  # fmt: skip

    def forget(self, streams: Iterable[str]) -> None:
        """Drop closed streams (evicted: their open episodes were cleared first)."""
        for stream in streams:
            self.known.discard(stream)
            self.open.pop(stream, None)
            self.pending.discard(stream)
            self.stale.pop(stream, None)

    def _open_id(self, stream: str) -> str | None:
        episode = self.open.get(stream)
        return None if episode is None else episode.get("alert_id")

    def to_json(self) -> dict[str, Any]:
        """The checkpointed part: stale streams (since when), pending streams, open episodes' last messages."""
        return {"stale": dict(self.stale), "pending": sorted(self.pending),
                "open": {s: m for s, m in self.open.items() if "kind" in m}}  # fmt: skip

    @classmethod
    def restore(
        cls,
        pending: bool,
        saved: Mapping[str, Any] | None,
        streams: Mapping[str, str],
        open_ids: Mapping[str, str],
    ) -> Lifecycle:
        """Rebuild from ``to_json`` output (None: a checkpoint without it), for the restored ``streams`` (name ->
        ``warming``/``active``) and their open episodes (name -> alert id, from the alert tracker's state).

        Entries of streams not restored (another shard's) are dropped; an open episode whose last message was not
        saved keeps its id only. A stream that is active or has a retained message is known: it gets no second
        first ``ok``.
        """
        saved = saved or {}
        lifecycle = cls(pending)
        lifecycle.stale = {s: float(t) for s, t in dict(saved.get("stale", {})).items() if s in streams}
        messages = dict(saved.get("open", {}))
        for stream, alert_id in open_ids.items():
            message = messages.get(stream)
            good = isinstance(message, dict) and message.get("alert_id") == alert_id
            lifecycle.open[stream] = dict(message) if good else {"alert_id": alert_id}
        lifecycle.pending = {s for s in saved.get("pending", ()) if s in streams and s not in lifecycle.open}
        active = {s for s, state in streams.items() if state == "active"}
        lifecycle.known = active | set(lifecycle.open) | set(lifecycle.stale) | lifecycle.pending
        return lifecycle
