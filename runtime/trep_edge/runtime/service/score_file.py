"""``trep-edge score``: the daemon's scoring and alerting over a recorded file, written as a CSV and a PNG plot.

The numbers come from the daemon's own ``monitor.Monitor``, fed the file's rows as readings
(``offline.detect_recording``): the same windows, scaling, engine call, detector, warm-up and alert episodes, so
replaying the same file through the daemon gives the same scores and the same alert episodes
(tests/runtime/test_daemon_end_to_end.py). The file is one stream: rows are consecutive steps of the card's period,
or, ``by_time``, rows stand at their own timestamps on a grid of ``windows.period`` as a live feed's readings do in the
daemon: missing steps are gaps, filled with missing values up to ``windows.max_gap`` and beyond that a reset (the
stream starts afresh, as after an outage).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.alerts import AlertConfig
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.explain import Explanation
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.windows import WindowConfig
from trep_edge.runtime.service.replay import RecordedSeries


@dataclass
class FileScores:
    """Per-step results over one recorded series; ``events`` are the alert episode changes (step, state, ...)."""

    stream: str
    channels: list[str]
    values: np.ndarray  # [T, C] in the model's channel order (every channel of the file for an independent model)
    raw: np.ndarray  # the paper's masked-vs-unmasked distance, summed over lanes
    score: np.ndarray  # the detector's score (above the threshold exactly where it alerts)
    surprise: np.ndarray  # the detector's surprise
    threshold: float
    alerts: np.ndarray  # the detector's decisions
    warming: np.ndarray
    channel: list[str]  # the channel behind each step's score ("" for a fixed-channel model)
    events: list[tuple[int, str, str, str, str]]  # (step, state, severity, alert_id, cause), in step order
    labels: np.ndarray | None
    # step -> the explanation of the raised or updated episode at that step, as the daemon publishes it
    explanations: dict[int, Explanation]


def model_inputs(engine: Engine, series: RecordedSeries) -> tuple[list[str], np.ndarray]:
    """The channels the model scores and their columns: the card's, in its order; every column of the file for a
    channel-independent model. A channel the data lacks is an error."""
    if engine.card.channel_mode == "independent":
        return list(series.channels), series.values
    missing = [c for c in engine.card.channels if c not in series.channels]
    if missing:
        raise ValueError(f"the data has no column(s) {missing} for the model's channels {engine.card.channels}; "
                         f"it has {series.channels} (rename with --rename DATA=MODEL)")  # fmt: skip
    return list(engine.card.channels), series.values[:, [series.channels.index(c) for c in engine.card.channels]]


def score_recording(
    engine: Engine,
    series: RecordedSeries,
    alerts: AlertConfig = AlertConfig(),
    detector: DetectorConfig = DetectorConfig(),
    windows: WindowConfig | None = None,
) -> FileScores:
    """Score every step of a recording as the daemon's monitor does (module docstring); with ``windows`` its rows
    stand at their timestamps on that grid (by time), else one step each."""
    channels, values = model_inputs(engine, series)
    stamps = None
    if windows is not None:
        if series.timestamps is None:
            raise ValueError(f"{series.stream}: scoring by time needs timestamps (a CSV whose first column is a "
                             "timestamp); this file has none, so its rows can only be scored as consecutive steps")
        # The daemon's grid: steps counted from the Unix epoch, so a periodic model sees the phases it would live.
        stamps = series.timestamps
    d = detect_recording(engine, values, detector, channels, alerts, windows, stamps, stream=series.stream)
    independent = engine.card.channel_mode == "independent"
    lane_channel = [channels[k] if independent and k >= 0 else "" for k in d.lane.tolist()]
    return FileScores(series.stream, channels, values, d.raw, d.score, d.surprise, detector.threshold, d.alerts,
                      d.warming, lane_channel, d.events, series.labels, d.explanations)  # fmt: skip


def write_csv(result: FileScores, path: str | Path) -> None:
    """One row per step: step, channel values, raw, score, surprise, threshold, alert, warming, channel, event,
    severity, alert_id, cause, explanation (the alert message's, as JSON), label. A step with several events (a sensor
    fault beside an alert, an episode cleared as the next opens) lists each event field in event order, joined by
    ``; ``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    at: dict[int, list[tuple[str, ...]]] = {}
    for step, *rest in result.events:
        at.setdefault(step, []).append(tuple(rest))
    events = {step: tuple("; ".join(field) for field in zip(*rest)) for step, rest in at.items()}

    def num(v: float) -> str:
        return "" if not math.isfinite(v) else repr(float(v))

    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["step", *result.channels, "raw", "score", "surprise", "threshold", "alert", "warming", "channel",
                      "event", "severity", "alert_id", "cause", "explanation", "label"])  # fmt: skip
        for t in range(len(result.raw)):
            state, severity, alert_id, cause = events.get(t, ("", "", "", ""))
            label = "" if result.labels is None else int(result.labels[t])
            why = result.explanations.get(t)
            explanation = "" if why is None else json.dumps(why.to_dict())
            out.writerow([t, *(num(v) for v in result.values[t]), num(result.raw[t]), num(result.score[t]),
                          num(result.surprise[t]), num(result.threshold), int(result.alerts[t]), int(result.warming[t]), result.channel[t],
                          state, severity, alert_id, cause, explanation, label])  # fmt: skip


def _spans(mask: np.ndarray) -> list[tuple[int, int]]:
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def write_plot(result: FileScores, path: str | Path, title: str = "", step_hours: float | None = None) -> None:
    """Signal, detector score with threshold, detector alerts, alert episodes and labelled anomalies.

    step_hours: hours per step, to draw time in hours (e.g. 1.0 for PhysioNet's hourly rows) instead of steps.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = np.arange(len(result.raw)) * (step_hours or 1.0)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(14, 6), sharex=True, constrained_layout=True)
    for c, name in enumerate(result.channels):
        column = result.values[:, c]
        (line,) = top.plot(steps, column, lw=0.7, label=name)
        # A line needs two neighbouring readings: sparse readings (e.g. hourly vitals with gaps) get markers.
        finite = np.isfinite(column)
        neighbour = np.zeros_like(finite)
        neighbour[1:] |= finite[:-1]
        neighbour[:-1] |= finite[1:]
        lone = finite & ~neighbour
        top.plot(steps[lone], column[lone], ".", ms=4, color=line.get_color())
    top.set_ylabel("signal")
    bottom.plot(steps, result.score, lw=0.7, color="tab:blue", label="score (surprise)")
    bottom.axhline(result.threshold, lw=1.0, color="tab:red", ls="--", label="threshold")
    hits = np.flatnonzero(result.alerts)
    bottom.scatter(steps[hits], result.score[hits], color="tab:red", s=18, zorder=3, label="detector alert")
    bottom.set_ylabel("score")
    bottom.set_xlabel("hours" if step_hours else "step")
    # A few-step anomaly in a long series would be thinner than a pixel: draw spans at least 0.3 % wide.
    unit = step_hours or 1.0
    pad = max(0.0, (0.003 * len(steps) - 1) / 2)
    for ax in (top, bottom):
        if result.labels is not None:
            for k, (a, b) in enumerate(_spans(result.labels)):
                ax.axvspan((a - pad) * unit, (b + pad) * unit, color="orange", alpha=0.35,
                           label="labelled anomaly" if k == 0 else None)  # fmt: skip
        for step, state, *_ in result.events:
            if state == "raised":
                ax.axvline(step * unit, color="crimson", lw=0.8, alpha=0.8)
    top.legend(loc="upper right", fontsize=8)
    bottom.legend(loc="upper right", fontsize=8)
    top.set_title(title or f"{result.stream}: red lines = alert episodes raised")
    fig.savefig(path, dpi=110)
    plt.close(fig)
