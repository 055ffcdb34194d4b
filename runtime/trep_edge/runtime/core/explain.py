"""Why a reading alerted: each channel's contribution to its surprise, the channels behind it, expected vs seen.

A channel's **surprise** is the surprise (−log10 tail probability, before the correction for the number of tests)
the reading would have if that channel alone had its seen value and every other channel its expected one. Its
**contribution** is its share of the channels' summed surprise (the shares sum to 1); **top** names the channels
whose surprise alone reaches the alert threshold, largest first (the largest one when none does). A channel's
**expected** value is the robust centre (median) of its earlier values in the window the model saw, the centre the
``deviation`` signal measures from, in the units the channel was sent in; **seen** is the value as received
(NaN: missing or implausible).

How the surprise is found depends on the model family:

- **channel-independent** (card ``channel_mode = "independent"``): every channel is its own detector lane, scored
  on its own, so the channel's surprise is its lane's surprise, which the detector computed anyway
  (``DetectorStep.lane_score``). No extra work.
- **fixed-channel** (one representation of all channels): occlusion. One copy of the window per channel, whose last
  step keeps that channel's value and gives every other channel its expected value; the copies of every explained
  reading go through the engine in one call (C rows per reading, ``Engine.last_step_pair``), and each copy's signals
  (distance, novelty against the lane's memory, deviation) are judged against the lane's long-run statistics as
  single values, combined as the detector combines them. The detector's short-term mean is left out: it is the
  history every channel shares and says nothing about which one deviates now.

Only readings that raise or escalate an alert episode are explained, by the monitor (which ``trep-edge score`` runs
too, ``offline.detect_recording``), so scoring itself costs nothing more: ``explain_readings`` runs on the
detector's state just after the reading, and the daemon's explanation equals ``trep-edge score``'s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trep_edge.runtime.core.detector import Detector, SignalStats, transform_signals
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.preprocess import Normalisation, robust_location_scale
from trep_edge.runtime.core.scoring import raw_score


@dataclass(frozen=True)
class Subject:
    """One reading of one stream to explain, with what the monitor (or ``trep-edge score``) had at hand.

    Rows are the stream's detector lanes: one for a fixed-channel model, one per channel for a channel-independent
    one (then ``channels[k]`` is lane k's channel).
    """

    channels: tuple[str, ...]
    lanes: np.ndarray  # [L] detector lane rows
    prepared: np.ndarray  # [L, W, C'] each lane's window as prepared by the card (before per-stream scaling)
    seen: np.ndarray  # [len(channels)] the raw values, NaN = missing
    lane_surprise: np.ndarray  # [L] the detector's surprise of each lane (DetectorStep.lane_score)
    windows: np.ndarray | None = None  # [1, W, C] the window the model saw (fixed-channel models only)
    start: int = 0  # absolute step of the window's first step (a periodic time index)
    deviation: np.ndarray | None = None  # [1, C] each channel's deviation (DetectorStep.deviation; fixed-channel)


@dataclass(frozen=True)
class Explanation:
    """Each channel's surprise, share, expected and seen value, largest share first, and the top channels."""

    channels: tuple[str, ...]
    contribution: tuple[float, ...]
    surprise: tuple[float, ...]
    expected: tuple[float, ...]
    seen: tuple[float, ...]
    top: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The alert message's ``explanation`` (docs/alerts.md); JSON has no NaN, so a missing number is null."""
        def num(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        rows = zip(self.channels, self.contribution, self.surprise, self.expected, self.seen)
        return {"channels": [{"channel": c, "contribution": num(share), "surprise": num(s), "expected": num(e),
                              "seen": num(v)} for c, share, s, e, v in rows],
                "top": list(self.top)}  # fmt: skip


def explanation(
    channels: tuple[str, ...], surprise: np.ndarray, expected: np.ndarray, seen: np.ndarray, threshold: float
) -> Explanation:
    """Shares, order and top channels from each channel's surprise (module docstring)."""
    s = np.where(np.isfinite(surprise), np.maximum(surprise, 0.0), 0.0)
    total = s.sum()
    share = s / total if total > 0 else np.zeros_like(s)
    # Ties (channels without surprise) in name order: the monitor's lanes and a file's columns may come in other orders.
    order = sorted(range(len(s)), key=lambda k: (-s[k], channels[k]))
    top = [channels[k] for k in order if s[k] >= threshold] or [channels[k] for k in order[:1] if s[k] > 0]

    def pick(values: np.ndarray) -> tuple[float, ...]:
        return tuple(float(values[k]) for k in order)

    return Explanation(tuple(channels[k] for k in order), pick(share), pick(np.asarray(surprise, np.float64)),
                       pick(expected), pick(seen), tuple(top))  # fmt: skip


def window_centre(windows: np.ndarray) -> np.ndarray:
    """Median of each channel's earlier values in each window ``[n, W, C]`` → ``[n, C]`` (NaN: no earlier value)."""
    n, w, c = windows.shape
    earlier = np.asarray(windows[:, :-1], dtype=np.float64).transpose(0, 2, 1).reshape(n * c, w - 1)
    loc = robust_location_scale(earlier)[0]
    return np.where(np.isnan(earlier).all(axis=1), np.nan, loc).reshape(n, c)


def expected_values(prepared: np.ndarray, seen: np.ndarray, norm: Normalisation) -> np.ndarray:
    """The raw value of each channel that would have put its prepared last step at the window's centre.

    ``prepared [n, W, C]`` (the card's differencing and normalisation ``norm``), ``seen [n, C]`` raw. A change of the
    last raw value moves the last prepared value by the same amount over the normalisation's std, whatever the
    differencing order, so ``expected = seen − (last − centre) · std``; a count channel (undifferenced, bent) expects
    the centre read back through the normalisation.
    """
    last = np.asarray(prepared[:, -1], dtype=np.float64)
    centre = window_centre(prepared)
    expected = np.asarray(seen, dtype=np.float64) - (last - centre) * np.asarray(norm.std, np.float64)
    if norm.counts is None:
        return expected
    return np.where(norm.counts > 0, norm.invert(centre), expected)


def single_surprise(detector: Detector, lanes: np.ndarray, signals: np.ndarray) -> np.ndarray:
    """Surprise of each row's log-signals ``[n, K]`` as single values against its lane's long-run statistics,
    the signals combined as the detector combines them (``Detector.combine``)."""
    stats = detector.stats
    single = SignalStats(stats.k, stats.horizon, short=1, tail_dof=stats.tail_dof, n_streams=len(lanes))
    single.count_[:], single.mean_[:], single.var_[:] = stats.count_[lanes], stats.mean_[lanes], stats.var_[lanes]
    per_signal = single.surprise(np.arange(len(lanes)), signals)
    return detector.combine(lanes, per_signal)


def occlusion_surprise(engine: Engine, detector: Detector, lanes: np.ndarray, windows: np.ndarray,
                       starts: np.ndarray, deviation: np.ndarray) -> np.ndarray:  # fmt: skip
    """Surprise ``[n, C]`` of each window ``[n, W, C]`` with only channel c's last value kept (one engine call);
    ``deviation [n, C]`` is each channel's deviation as the detector judged it (``DetectorStep.deviation``)."""
    n, w, c = windows.shape
    centre = np.nan_to_num(window_centre(windows)).astype(np.float32)  # no earlier value: the card's mean
    copies = np.repeat(np.asarray(windows, dtype=np.float32)[:, None], c, axis=1)  # [n, C copies, W, C]
    last = np.repeat(centre[:, None], c, axis=1)
    diagonal = np.arange(c)
    last[:, diagonal, diagonal] = windows[:, -1]
    copies[:, :, -1] = last
    copies = copies.reshape(n * c, w, c)
    rows = np.repeat(lanes, c)
    zu, zm = engine.last_step_pair(copies, np.repeat(starts, c))
    # A copy deviates in its kept channel only: that channel's deviation alone, as the detector judged it.
    signal = {"distance": lambda: raw_score(zu, zm), "novelty": lambda: detector.memory.novelty(rows, zu),
              "deviation": lambda: np.asarray(deviation, dtype=np.float64).reshape(n * c)}  # fmt: skip
    names = detector.config.signals
    values = transform_signals(np.stack([signal[name]() for name in names], axis=1), names)
    return single_surprise(detector, rows, values).reshape(n, c)


def explain_readings(
    engine: Engine, detector: Detector, subjects: list[Subject], threshold: float
) -> list[Explanation]:
    """Explain readings the detector has just stepped (its state right after them), fixed-channel ones together."""
    if not subjects:
        return []
    surprise = [np.asarray(s.lane_surprise, dtype=np.float64) for s in subjects]
    if engine.card.channel_mode != "independent":
        lanes = np.concatenate([s.lanes for s in subjects])
        windows = np.concatenate([s.windows for s in subjects])
        deviation = np.concatenate([s.deviation for s in subjects])
        surprise = list(occlusion_surprise(engine, detector, lanes, windows, np.array([s.start for s in subjects]),
                                           deviation))  # fmt: skip
    # Every subject's lanes at once: the robust centre costs mostly per call, not per row.
    seen = np.concatenate([np.reshape(s.seen, (len(s.lanes), -1)) for s in subjects])
    expected = expected_values(np.concatenate([s.prepared for s in subjects]), seen,
                               Normalisation.from_dict(engine.card.normalisation))
    ends = np.cumsum([len(s.lanes) for s in subjects])[:-1]
    return [explanation(s.channels, channel_surprise, e.ravel(), np.asarray(s.seen, np.float64), threshold)
            for s, channel_surprise, e in zip(subjects, surprise, np.split(expected, ends))]  # fmt: skip
