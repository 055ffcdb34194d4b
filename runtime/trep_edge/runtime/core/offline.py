"""A recorded series run through the daemon's own ``monitor.Monitor``, and the paper protocol's whole-window scores.

``detect_recording`` is how a recording is scored (``trep-edge score``, the detection benchmark, ``promote``'s alert
rate): its rows are fed to a ``Monitor`` as one stream's readings and the monitor is ticked every ``batch`` rows, so
the windows, per-stream scaling, gap resets, detector, warm-up, alert episodes and explanations are the daemon's
code, not a copy of it, and one engine call scores a tick's ``batch`` steps. ``prepare`` gives a recording's model
input as the monitor's window store makes it (training and calibration data).

The rest serves the model card, not the alert decision: ``raw_scores`` is the paper protocol's masked-vs-unmasked
distance of every step of a prepared series (export calibration and parity, the paper's evaluations, whose delay
rule lives in ``training/trep_edge/training/evaluation/paper_protocol.py``), and ``detector_prior`` the card's
``detector_prior`` from prepared calibration series.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from trep_edge.runtime.core.alerts import AlertConfig
from trep_edge.runtime.core.detector import Detector, DetectorConfig, count_channels, window_deviation
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.explain import Explanation
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.preprocess import (Normalisation, StreamScaler, implausible, plausible_bounds,
                                               robust_location_scale, scale_windows)
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.scoring import raw_score
from trep_edge.runtime.core.windows import WindowConfig, WindowStore

BATCH = 256
"""Rows fed to the monitor between two ticks: the steps one engine call scores."""

STREAM = "recording"
"""The stream id a recording is fed under (alert ids read ``recording-1`` unless the caller names it)."""


def prepare(engine: Engine, raw: np.ndarray) -> np.ndarray:
    """Raw readings ``[T, C]`` in the card's channel order, one per step → the model input ``[T, C]`` the monitor's
    window store makes of them (differenced, normalised; implausible values missing, as the monitor files them)."""
    card = engine.card
    values = np.asarray(raw, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != card.input_dims:
        raise ValueError(f"series must be [time, {card.input_dims}] ({card.channels}), got shape {values.shape}")
    values = np.where(implausible(values, *plausible_bounds(card)), np.nan, values)
    store = WindowStore(card)
    for t, row in enumerate(values.tolist()):
        store.ingest(Reading(STREAM, float(t), dict(zip(card.channels, row))), now=0.0)
    return store.collect(0.0, with_windows=False).prepared.reshape(len(values), card.input_dims)


def sliding_windows(values: np.ndarray, window: int) -> np.ndarray:
    """``[T, C]`` → ``[T, W, C]``: the window ending at each step, NaN-padded before the series starts."""
    length, channels = values.shape
    padded = np.full((length + window - 1, channels), np.nan, dtype=np.float32)
    padded[window - 1 :] = values
    return np.lib.stride_tricks.sliding_window_view(padded, window, axis=0).transpose(0, 2, 1)


def _pairs(engine: Engine, windows: np.ndarray, start: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Unmasked and masked last-step representations of every window, in batches of ``batch``; ``start`` is the
    series' first row counted from the first row of the model's training data (which stands at the card's
    ``phase_origin``)."""
    w = engine.card.window
    zu = np.empty((len(windows), engine.card.repr_dims), dtype=np.float32)
    zm = np.empty_like(zu)
    first = engine.card.phase_origin + start
    for lo in range(0, len(windows), batch):
        chunk = np.ascontiguousarray(windows[lo : lo + batch])
        starts = first + np.arange(lo, lo + len(chunk), dtype=np.int64) - (w - 1)
        zu[lo : lo + len(chunk)], zm[lo : lo + len(chunk)] = engine.last_step_pair(chunk, starts)
    return zu, zm


def raw_scores(engine: Engine, values: np.ndarray, start: int = 0, batch: int = 256) -> np.ndarray:
    """Raw masked-vs-unmasked score of every step of a prepared series ``[T, C]`` (float64 ``[T]``, NaN = none).

    ``start`` is the series' first row counted from the first row of the model's training data (for a periodic time
    index: a series without timestamps is taken to begin where the training data began). The paper protocol's
    score with the card's fixed normalisation (no per-stream scaling); the product's scores are ``detect_recording``'s.
    """
    zu, zm = _pairs(engine, sliding_windows(values, engine.card.window), start, batch)
    out = raw_score(zu, zm)
    # A step with a missing channel is masked by the model in both variants, so its score would be a meaningless
    # 0: it has no score (NaN), exactly as in the streaming monitor.
    out[np.isnan(values).any(axis=1)] = np.nan
    return out


@dataclass
class Detection:
    """A recording as the monitor scored it, per row: what ``ScoredReading`` says of the row's step (NaN, no alert and
    warming for a row the monitor did not score: rejected, or merged into an earlier row's step), the alert episode
    changes and the explanations they carry."""

    raw: np.ndarray  # the paper's masked-vs-unmasked distance, summed over lanes
    surprise: np.ndarray  # the detector's corrected surprise
    score: np.ndarray  # the detector's score (NaN while warming)
    alerts: np.ndarray  # the detector's decisions, and the rows that raised a sensor fault
    warming: np.ndarray
    lane: np.ndarray  # the column (lane) behind each row's score; -1: none
    # (row, state, severity, alert_id, cause): alert episodes, and sensor faults (cause: the fault, no severity)
    events: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    # row -> the explanation of the episode raised or updated at that row ([alerts] explain)
    explanations: dict[int, Explanation] = field(default_factory=dict)


def recording_channels(engine: Engine, columns: int) -> list[str]:
    """Channel names for a recording's columns when the caller has none: the card's (a channel-independent model's one
    channel for a single column, else ``channel0``, ``channel1``, ...)."""
    if columns == engine.card.input_dims:
        return list(engine.card.channels)
    return [f"channel{k}" for k in range(columns)]


def detect_recording(
    engine: Engine,
    values: np.ndarray,
    detector: DetectorConfig = DetectorConfig(),
    channels: Sequence[str] | None = None,
    alerts: AlertConfig = AlertConfig(explain=False),
    windows: WindowConfig | None = None,
    timestamps: np.ndarray | None = None,
    stream: str = STREAM,
    batch: int = BATCH,
) -> Detection:
    """Feed a recording ``[T, C]`` (columns named ``channels``, default ``recording_channels``) to a ``Monitor`` as
    the readings of ``stream`` and tick it every ``batch`` rows (module docstring).

    ``timestamps`` (seconds, ``[T]``) place the rows on the step grid of ``windows.period`` (default the card's period,
    else 1 s), so missing steps are gaps the monitor fills or, beyond ``windows.max_gap``, resets after; without them
    row ``t`` is step ``card.phase_origin + t`` (where the training rows began). ``alerts.explain`` attaches
    explanations to raised and updated episodes.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"a recording is [time, channels], got shape {values.shape}")
    names = list(channels) if channels is not None else recording_channels(engine, values.shape[1])
    windows = windows or WindowConfig(period=engine.card.period or 1.0)
    t_len = len(values)
    if timestamps is None:
        # Rows without timestamps begin where the model's training rows began, so a periodic model sees their phases.
        stamps = (engine.card.phase_origin + np.arange(t_len)) * windows.period
    else:
        stamps = np.asarray(timestamps, dtype=np.float64)
    if stamps.shape != (t_len,):
        raise ValueError(f"timestamps must be [T] = [{t_len}], got shape {stamps.shape}")
    monitor = Monitor(engine, windows, alerts, detector)
    out = Detection(np.full(t_len, np.nan), np.full(t_len, np.nan), np.full(t_len, np.nan),
                    np.zeros(t_len, dtype=bool), np.ones(t_len, dtype=bool), np.full(t_len, -1))  # fmt: skip
    lane_of = {name: k for k, name in enumerate(names)}
    # A scored step's timestamp is its first reading's: the row that opened the step.
    row_of: dict[float, int] = {}
    for lo in range(0, t_len, batch):
        for t in range(lo, min(lo + batch, t_len)):
            stamp = float(stamps[t])
            row_of.setdefault(stamp, t)
            monitor.ingest(Reading(stream, stamp, dict(zip(names, values[t].tolist()))), now=0.0)
        result = monitor.tick(windows.settle)  # every step filed so far is ready: its settle wait has passed
        for s in result.scored:
            t = row_of[s.timestamp]
            out.raw[t], out.surprise[t], out.score[t] = s.raw, s.surprise, s.score
            out.alerts[t], out.warming[t] = s.alert, s.warming
            # A fixed-channel model has one lane, which the monitor does not name.
            out.lane[t] = lane_of[s.channel] if s.channel else 0 if math.isfinite(s.surprise) else -1
        for a in result.alerts:
            t = row_of[a.timestamp]
            out.events.append((t, a.state, a.severity, a.alert_id, a.cause))
            if a.explanation is not None:
                out.explanations[t] = a.explanation
        for e in result.sensor:
            # The daemon pages a sensor fault on the alerts topic: a value so far out that it is filed as missing is
            # reported, not dropped without a word (an idle feed's first busy value against a model of the idle part).
            t = row_of[e.timestamp]
            out.events.append((t, e.state, "", e.alert_id, e.fault))
            out.alerts[t] |= e.state == "raised"
    out.events.sort(key=lambda event: event[0])
    return out


# the card's detector prior


def _model_windows(engine: Engine, readings: np.ndarray, config: DetectorConfig) -> np.ndarray:
    """The window the model sees at every step of a prepared lane, from its windows of readings ``[T, W, C]``:
    per-stream scaled as the monitor scales them (the readings themselves for card-normalised models)."""
    if engine.card.scaling != "stream" or not len(readings):
        return readings
    channels = readings.shape[2]
    scaler = StreamScaler(config.scale_warmup, config.scale_adapt, n_streams=channels)
    rows = np.arange(channels)
    # One step at a time: each window is scaled with the statistics of the readings up to its last step.
    return np.stack([scale_windows(scaler, rows, readings[i : i + 1])[0] for i in range(len(readings))])


def _lane_signals(engine: Engine, lanes: list[np.ndarray], config: DetectorConfig, batch: int = BATCH) -> np.ndarray:
    """The detector's log-signals ``[T * L, K]`` of every step of one series' prepared lanes, as a new stream."""
    t, n = len(lanes[0]), len(lanes)
    channels = lanes[0].shape[1]
    distance, deviation = np.full((t, n), np.nan), np.full((t, n, 2, channels), np.nan)
    z = np.zeros((t, n, engine.card.repr_dims), dtype=np.float32)
    tied = count_channels(Normalisation.from_dict(engine.card.normalisation).counts, channels)
    for k, prepared in enumerate(lanes):
        readings = sliding_windows(prepared, engine.card.window)
        zu, zm = _pairs(engine, _model_windows(engine, readings, config), 0, batch)
        distance[:, k] = np.where(np.isnan(prepared).any(axis=1), np.nan, raw_score(zu, zm))
        z[:, k] = zu
        for lo in range(0, t, batch):  # deviation reads the readings before any stream scaling, as the monitor does
            deviation[lo : lo + batch, k] = window_deviation(readings[lo : lo + batch], config.deviation_window, tied)
    detector = Detector(config, engine.card.repr_dims, engine.card.detector_prior, channels)
    detector.add(1, n)
    one, rows, lane_of = np.zeros(1, dtype=np.int64), np.arange(n), np.zeros(n, dtype=np.int64)
    signals = np.full((t, n, len(config.signals)), np.nan)
    for i in range(t):
        signals[i] = detector.step(one, rows, lane_of, distance[i], z[i], deviation[i]).signals
    return signals.reshape(-1, len(config.signals))


def detector_prior(
    engine: Engine, prepared: list[np.ndarray], config: DetectorConfig = DetectorConfig(), max_steps: int = 20_000
) -> dict:
    """The model card's ``detector_prior``: median and squared robust scale of each signal over normal prepared series.

    Each series runs through the detector exactly as a new stream would (its own memory, no card prior), so the
    prior describes what a fresh stream of this kind looks like, warm-up included. Prepared series have no raw
    readings to feed a monitor, so this runs the engine and ``detector.Detector`` itself; it decides no alert.
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
        pooled.append(_lane_signals(engine, lanes, cold))
    values = np.concatenate(pooled) if pooled else np.zeros((0, len(cold.signals)))
    finite = np.isfinite(values).all(axis=1)
    if finite.sum() < 2:
        raise ValueError(f"the detector prior needs at least 2 scored steps of calibration data, got {finite.sum()}")
    # Median and robust scale, not mean and variance: calibration data holds its own rare extremes (a flat stretch
    # makes the deviation signal huge), and a variance inflated by them silenced the signal for hundreds of readings
    # of every new stream. The prior should describe a typical stream; the stream's own statistics learn the rest.
    loc, scale = robust_location_scale(values[finite].T)
    return {"signals": list(cold.signals), "mean": loc.tolist(), "var": (scale**2).tolist(), "n": int(finite.sum())}
