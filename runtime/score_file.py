"""``trep-edge score``: the daemon's scoring and alerting over a recorded file, written as a CSV and a PNG plot.

The numbers come from the functions the daemon's monitor uses: ``offline.raw_scores`` (the same windows and the
same engine call), ``scoring.score_series`` (adjusted score, threshold, the paper's detector) and
``alerts.AlertTracker`` (episodes), with the monitor's warm-up rule, so replaying the same file through the
daemon gives the same scores and the same alert episodes (tests/runtime/test_daemon_end_to_end.py).
The file is one stream with no long gaps: unlike the daemon, this path does not reset a stream after a gap.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .alerts import AlertConfig, AlertTracker
from .engine import Engine
from .offline import prepare, raw_scores
from .replay import RecordedSeries
from .scoring import DEFAULT_MIN_COUNT, score_series


@dataclass
class FileScores:
    """Per-step results over one recorded series; ``events`` are the alert episode changes (step, state, ...)."""

    stream: str
    channels: list[str]
    values: np.ndarray  # [T, C] in the model's channel order
    raw: np.ndarray
    adjusted: np.ndarray
    thresholds: np.ndarray
    alerts: np.ndarray  # the detector's decisions (paper protocol)
    warming: np.ndarray
    events: list[tuple[int, str, str, str]]  # (step, state, severity, alert_id)
    labels: np.ndarray | None


def model_inputs(engine: Engine, series: RecordedSeries) -> np.ndarray:
    """The series' columns in the model card's channel order; a channel the data lacks is an error."""
    missing = [c for c in engine.card.channels if c not in series.channels]
    if missing:
        raise ValueError(f"the data has no column(s) {missing} for the model's channels {engine.card.channels}; "
                         f"it has {series.channels} (rename with --rename DATA=MODEL)")  # fmt: skip
    return series.values[:, [series.channels.index(c) for c in engine.card.channels]]


def score_recording(
    engine: Engine,
    series: RecordedSeries,
    alerts: AlertConfig = AlertConfig(),
    warmup: int | None = None,
    min_count: int = DEFAULT_MIN_COUNT,
) -> FileScores:
    """Score every step of a recording as the daemon's monitor would (module docstring)."""
    card = engine.card
    values = model_inputs(engine, series)
    raw = raw_scores(engine, prepare(engine, values))
    s = card.scoring
    scored = score_series(raw, s.z, card.calibration, s.beta, s.delay, min_count)
    # The monitor's warm-up: fewer than `warmup` earlier finite raw scores, or no threshold yet.
    finite = np.isfinite(raw)
    earlier = np.cumsum(finite) - finite
    warming = (earlier < (s.z if warmup is None else warmup)) | np.isnan(scored.thresholds)
    tracker = AlertTracker(alerts, n_streams=1)
    one = np.zeros(1, dtype=np.int64)
    events = []
    for t in range(len(raw)):
        adjusted = np.nan if warming[t] else scored.adjusted[t]
        for e in tracker.step(one, np.array([adjusted]), np.array([scored.thresholds[t]])):
            events.append((t, e.state, e.severity, e.alert_id(series.stream)))
    return FileScores(series.stream, list(card.channels), values, raw, scored.adjusted, scored.thresholds,
                      scored.alerts, warming, events, series.labels)  # fmt: skip


def write_csv(result: FileScores, path: str | Path) -> None:
    """One row per step: step, channel values, raw, adjusted, threshold, alert, warming, event, label."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    events = {step: (state, severity, alert_id) for step, state, severity, alert_id in result.events}

    def num(v: float) -> str:
        return "" if not math.isfinite(v) else repr(float(v))

    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["step", *result.channels, "raw", "adjusted", "threshold", "alert", "warming", "event",
                      "severity", "alert_id", "label"])  # fmt: skip
        for t in range(len(result.raw)):
            state, severity, alert_id = events.get(t, ("", "", ""))
            label = "" if result.labels is None else int(result.labels[t])
            out.writerow([t, *(num(v) for v in result.values[t]), num(result.raw[t]), num(result.adjusted[t]),
                          num(result.thresholds[t]), int(result.alerts[t]), int(result.warming[t]), state,
                          severity, alert_id, label])  # fmt: skip


def _spans(mask: np.ndarray) -> list[tuple[int, int]]:
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def write_plot(result: FileScores, path: str | Path, title: str = "") -> None:
    """Signal, adjusted score with threshold, detector alerts, alert episodes and labelled anomalies."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("the PNG plot needs matplotlib: pip install 'trep-edge[train]' or matplotlib, "
                          "or pass --no-plot") from exc  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = np.arange(len(result.raw))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(14, 6), sharex=True, constrained_layout=True)
    for c, name in enumerate(result.channels):
        top.plot(steps, result.values[:, c], lw=0.7, label=name)
    top.set_ylabel("signal")
    bottom.plot(steps, result.adjusted, lw=0.7, color="tab:blue", label="adjusted score")
    bottom.plot(steps, result.thresholds, lw=1.0, color="tab:red", ls="--", label="threshold")
    hits = np.flatnonzero(result.alerts)
    bottom.scatter(hits, result.adjusted[hits], color="tab:red", s=18, zorder=3, label="detector alert")
    bottom.set_ylabel("adjusted score")
    bottom.set_xlabel("step")
    # A few-step anomaly in a long series would be thinner than a pixel: draw spans at least 0.3 % wide.
    pad = max(0.0, (0.003 * len(steps) - 1) / 2)
    for ax in (top, bottom):
        if result.labels is not None:
            for k, (a, b) in enumerate(_spans(result.labels)):
                ax.axvspan(a - pad, b + pad, color="orange", alpha=0.35, label="labelled anomaly" if k == 0 else None)
        for step, state, _, _ in result.events:
            if state == "raised":
                ax.axvline(step, color="crimson", lw=0.8, alpha=0.8)
    top.legend(loc="upper right", fontsize=8)
    bottom.legend(loc="upper right", fontsize=8)
    top.set_title(title or f"{result.stream}: red lines = alert episodes raised")
    fig.savefig(path, dpi=110)
    plt.close(fig)
