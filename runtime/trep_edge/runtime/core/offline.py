"""The streaming protocol run over a whole recorded series: every step scored exactly as the daemon would.

Used by export calibration, ``trep-edge score``, the detection benchmark and the evaluations, so offline numbers
and the daemon's come from the same windows, the same per-stream scaling, the same engine call and the same
detector. ``encode_recording`` does the model's part (cacheable); ``detect_recording`` runs ``detector.Detector``
over it one reading at a time, as the monitor does.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from trep_edge.runtime.core.detector import Detector, DetectorConfig, window_deviation
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.explain import Explanation, Subject, explain_readings
from trep_edge.runtime.core.preprocess import (Normalisation, StreamScaler, difference, forward_fill, implausible, plausible_bounds,
                         robust_location_scale, scale_windows)
from trep_edge.runtime.core.scoring import raw_score


def prepare(engine: Engine, raw: np.ndarray) -> np.ndarray:
    """Raw readings ``[T, C]`` in the card's channel order → differenced and normalised model input.

    Implausible values (``preprocess.plausible_bounds``) are missing, as the monitor files them.
    """
    card = engine.card
    values = np.asarray(raw, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != card.input_dims:
        raise ValueError(f"series must be [time, {card.input_dims}] ({card.channels}), got shape {values.shape}")
    values = np.where(implausible(values, *plausible_bounds(card)), np.nan, values).astype(np.float32)
    filled = forward_fill(values, card.forward_fill)[0]
    return Normalisation.from_dict(card.normalisation).apply(difference(filled, card.differencing))


def sliding_windows(values: np.ndarray, window: int) -> np.ndarray:
    """``[T, C]`` → ``[T, W, C]``: the window ending at each step, NaN-padded before the series starts."""
    length, channels = values.shape
    padded = np.full((length + window - 1, channels), np.nan, dtype=np.float32)
    padded[window - 1 :] = values
    return np.lib.stride_tricks.sliding_window_view(padded, window, axis=0).transpose(0, 2, 1)


def _pairs(engine: Engine, windows: np.ndarray, start: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Unmasked and masked last-step representations of every window, in batches of ``batch``."""
    w = engine.card.window
    zu = np.empty((len(windows), engine.card.repr_dims), dtype=np.float32)
    zm = np.empty_like(zu)
    for lo in range(0, len(windows), batch):
        chunk = np.ascontiguousarray(windows[lo : lo + batch])
        starts = start + np.arange(lo, lo + len(chunk), dtype=np.int64) - (w - 1)
        zu[lo : lo + len(chunk)], zm[lo : lo + len(chunk)] = engine.last_step_pair(chunk, starts)
    return zu, zm


def raw_scores(engine: Engine, values: np.ndarray, start: int = 0, batch: int = 256) -> np.ndarray:
    """Raw masked-vs-unmasked score of every step of a prepared series ``[T, C]`` (float64 ``[T]``, NaN = none).

    ``start`` is the absolute index of the series' first step (for a periodic time index). The card's fixed
    normalisation only: stream-scaled models go through ``encode_recording``.
    """
    zu, zm = _pairs(engine, sliding_windows(values, engine.card.window), start, batch)
    out = raw_score(zu, zm)
    # A step with a missing channel is masked by the model in both variants, so its score would be a meaningless
    # 0: it has no score (NaN), exactly as in the streaming monitor.
    out[np.isnan(values).any(axis=1)] = np.nan
    return out


def recording_lanes(engine: Engine, values: np.ndarray) -> list[np.ndarray]:
    """The model inputs of a recording ``[T, C]`` (card channel order): one prepared ``[T, C']`` per detector lane.

    A fixed-channel model has one lane of all channels; a channel-independent model one lane per channel.
    """
    values = np.asarray(values, dtype=np.float64)
    if engine.card.channel_mode == "independent":
        return [prepare(engine, values[:, [c]]) for c in range(values.shape[1])]
    return [prepare(engine, values)]


@dataclass
class RecordingFeatures:
    """What the model says of every step of a recording, per lane: the paper distance and the representation."""

    distance: np.ndarray  # [T, L] float64, NaN = no score (a missing channel, or before the scale is known)
    z: np.ndarray  # [T, L, F] float32, the unmasked last-step representation
    deviation: np.ndarray  # [T, L] float64, detector.window_deviation of each step's window

    @property
    def raw(self) -> np.ndarray:
        """The paper's masked-vs-unmasked L1 per step ``[T]``, summed over lanes (NaN when a lane has none)."""
        return self.distance.sum(axis=1)

    def save(self, path: str | Path) -> None:
        """Write as a compressed ``.npz`` (a benchmark cache)."""
        np.savez_compressed(path, distance=self.distance, z=self.z, deviation=self.deviation)

    @classmethod
    def load(cls, path: str | Path) -> RecordingFeatures:
        """Read ``save`` output."""
        with np.load(path) as data:
            return cls(data["distance"], data["z"], data["deviation"])


def encode_recording(
    engine: Engine, values: np.ndarray, config: DetectorConfig = DetectorConfig(), batch: int = 256
) -> RecordingFeatures:
    """Run the model over every step of a recording ``[T, C]`` (card channel order), as the monitor would."""
    return encode_lanes(engine, recording_lanes(engine, values), config, batch)


def model_windows(engine: Engine, prepared: np.ndarray, config: DetectorConfig = DetectorConfig()) -> np.ndarray:
    """The window the model sees at every step of a prepared lane ``[T, C]`` → ``[T, W, C]``, per-stream scaled as
    the monitor scales it (a view of ``prepared`` for card-normalised models)."""
    windows = sliding_windows(prepared, engine.card.window)
    if engine.card.scaling == "stream" and len(prepared):
        channels = prepared.shape[1]
        scaler = StreamScaler(config.scale_warmup, config.scale_adapt, n_streams=channels)
        rows = np.arange(channels)
        # One step at a time: each window is scaled with the statistics of the readings up to its last step.
        windows = np.stack([scale_windows(scaler, rows, windows[i : i + 1])[0] for i in range(len(prepared))])
    return windows


def encode_lanes(
    engine: Engine, lanes: list[np.ndarray], config: DetectorConfig = DetectorConfig(), batch: int = 256
) -> RecordingFeatures:
    """``encode_recording`` from prepared lane inputs (``recording_lanes`` output, or prepared training data)."""
    t = len(lanes[0]) if lanes else 0
    distance = np.full((t, len(lanes)), np.nan)
    deviation = np.full((t, len(lanes)), np.nan)
    z = np.zeros((t, len(lanes), engine.card.repr_dims), dtype=np.float32)
    for k, prepared in enumerate(lanes):
        windows = model_windows(engine, prepared, config)
        zu, zm = _pairs(engine, windows, 0, batch)
        distance[:, k] = raw_score(zu, zm)
        distance[np.isnan(prepared).any(axis=1), k] = np.nan
        z[:, k] = zu
        for lo in range(0, t, batch):
            deviation[lo : lo + batch, k] = window_deviation(windows[lo : lo + batch])
    return RecordingFeatures(distance, z, deviation)


@dataclass
class Detection:
    """The detector over a recording: per step score (NaN = none), alert, warming and the lane behind the score."""

    raw: np.ndarray  # the paper's masked-vs-unmasked distance, summed over lanes
    surprise: np.ndarray  # the detector's corrected surprise (detector.DetectorStep)
    score: np.ndarray
    alerts: np.ndarray
    warming: np.ndarray
    lane: np.ndarray
    # step -> why it reached the threshold (explain.py), for the steps that did when explanations were asked for
    explanations: dict[int, Explanation] = field(default_factory=dict)


def detect_recording(
    engine: Engine,
    values: np.ndarray,
    config: DetectorConfig = DetectorConfig(),
    features: RecordingFeatures | None = None,
    explain_channels: Sequence[str] | None = None,
) -> Detection:
    """Score and alert every step of a recording ``[T, C]`` with the detector, one reading at a time.

    With ``explain_channels`` (the names of the columns of ``values``), every step whose surprise reaches the
    threshold is explained as the monitor explains the alerts it raises or escalates (``Detection.explanations``).
    """
    features = features if features is not None else encode_recording(engine, values, config)
    subjects = None if explain_channels is None else _Subjects(engine, values, config, tuple(explain_channels))
    return _run_detector(engine, features, config, subjects)[0]


class _Subjects:
    """What ``explain.Subject`` needs at each step of a recording, as the monitor has it at that reading."""

    def __init__(self, engine: Engine, values: np.ndarray, config: DetectorConfig, channels: tuple[str, ...]) -> None:
        self.engine, self.channels = engine, channels
        lanes = recording_lanes(engine, values)
        self.prepared = [sliding_windows(lane, engine.card.window) for lane in lanes]
        independent = engine.card.channel_mode == "independent"
        self.windows = None if independent else model_windows(engine, lanes[0], config)
        # Implausible values are filed as missing by the monitor: they were not seen.
        self.seen = np.where(implausible(values, *plausible_bounds(engine.card)), np.nan, values)

    def at(self, i: int, lane_surprise: np.ndarray) -> Subject:
        """The subject of step ``i`` given the detector's per-lane surprise of it."""
        prepared = np.stack([p[i] for p in self.prepared])
        windows = None if self.windows is None else self.windows[i : i + 1]
        start = i - self.engine.card.window + 1
        return Subject(self.channels, np.arange(len(self.prepared)), prepared, self.seen[i], lane_surprise, windows,
                       start)  # fmt: skip


def _run_detector(
    engine: Engine, features: RecordingFeatures, config: DetectorConfig, subjects: _Subjects | None = None
) -> tuple[Detection, np.ndarray]:
    """The detector over precomputed features, one reading at a time; also every lane's log-signals ``[T, L, K]``."""
    t, lanes = features.distance.shape
    detector = Detector(config, engine.card.repr_dims, engine.card.detector_prior)
    detector.add(1, lanes)
    one, rows, lane_of = np.zeros(1, dtype=np.int64), np.arange(lanes), np.zeros(lanes, dtype=np.int64)
    out = Detection(features.raw, np.full(t, np.nan), np.full(t, np.nan), np.zeros(t, dtype=bool),
                    np.ones(t, dtype=bool), np.full(t, -1))  # fmt: skip
    signals = np.full((t, lanes, len(config.signals)), np.nan)
    for i in range(t):
        step = detector.step(one, rows, lane_of, features.distance[i], features.z[i], features.deviation[i])
        out.surprise[i], out.score[i], out.alerts[i] = step.surprise[0], step.score[0], step.alert[0]
        out.warming[i], out.lane[i] = step.warming[0], step.lane[0]
        signals[i] = step.signals
        # A superset of the readings the alert tracker raises or escalates an episode on (both need the threshold).
        if subjects is not None and not step.warming[0] and step.surprise[0] >= config.threshold:
            subject = subjects.at(i, step.lane_score)
            out.explanations[i] = explain_readings(engine, detector, [subject], config.threshold)[0]
    return out, signals


def detector_prior(
    engine: Engine, prepared: list[np.ndarray], config: DetectorConfig = DetectorConfig(), max_steps: int = 20_000
) -> dict:
    """The model card's ``detector_prior``: median and squared robust scale of each signal over normal prepared series.

    Each series runs through the detector exactly as a new stream would (its own memory, no card prior), so the
    prior describes what a fresh stream of this kind looks like, warm-up included.
    """
    cold = dataclasses.replace(config, prior_weight=0)
    pooled, budget = [], max_steps
    for series in prepared:
        if budget <= 0:
            break
        series = np.asarray(series, dtype=np.float32)[:budget]
        budget -= len(series)
        lanes = [series[:, [c]] for c in range(series.shape[1])] if engine.card.channel_mode == "independent" \
            else [series]  # fmt: skip
        pooled.append(_run_detector(engine, encode_lanes(engine, lanes, cold), cold)[1].reshape(-1, len(cold.signals)))
    values = np.concatenate(pooled) if pooled else np.zeros((0, len(cold.signals)))
    finite = np.isfinite(values).all(axis=1)
    if finite.sum() < 2:
        raise ValueError(f"the detector prior needs at least 2 scored steps of calibration data, got {finite.sum()}")
    # Median and robust scale, not mean and variance: calibration data holds its own rare extremes (a flat stretch
    # makes the deviation signal huge), and a variance inflated by them silenced the signal for hundreds of readings
    # of every new stream. The prior should describe a typical stream; the stream's own statistics learn the rest.
    loc, scale = robust_location_scale(values[finite].T)
    return {"signals": list(cold.signals), "mean": loc.tolist(), "var": (scale**2).tolist(), "n": int(finite.sum())}
