"""Streaming-detection metrics, each from its published definition; pure numpy.

- ``nab_score``: the streaming anomaly benchmark score of Lavin & Ahmad (2015). Each labelled event gets a window
  of ``0.1 · length / events`` rows centred on its onset (widened to cover its labelled segment; overlapping windows
  merge). The first detection inside a window earns ``A_TP · σ(y)`` with ``σ(y) = 2 / (1 + e^{5y}) − 1`` and ``y``
  its position relative to the window's end (−1 at the start, 0 at the end); later detections in the same window
  count nothing; a window without one costs ``A_FN``; a detection outside every window costs
  ``A_FP · σ(y)`` with ``y`` its distance past the end of the preceding window in window lengths (−A_FP when no
  window precedes it). Rows of the probationary period (the first 15 %, at most 750) never count. Over a corpus
  the raw totals are normalised as ``100 · (raw − null) / (perfect − null)``: never alerting scores 0, a detection
  at the start of every window and nothing else 100.
- ``nab_interval``: how far a corpus's NAB score rests on which streams it holds: a bootstrap over its streams (drawn
  with replacement, the normalisation taken on each draw), of the score or, paired, of one detector's score less
  another's on the same draws (Efron & Tibshirani 1993, the percentile interval).
- ``event_f1``: an event is found when a detection falls inside its window; precision counts each detection
  outside every window as a false alarm; the mean delay is rows from the onset to the first detection.
- ``ucr_top1``: the UCR anomaly archive's rule: the argmax of the score over the test part lies within ±100 rows of
  the labelled segment.
- Point-adjusted F1 with a delay (the T-Rep paper's protocol) is ``training.evaluation.point_adjusted.point_adjust_f1``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PROFILES = {
    "standard": (1.0, 0.11, 1.0),
    "reward_low_FP": (1.0, 0.22, 1.0),
    "reward_low_FN": (1.0, 0.11, 2.0),
}
"""NAB application profiles: (A_TP, A_FP, A_FN)."""


def probation(length: int) -> int:
    """Rows of the probationary period: the first 15 % of a stream, at most 750."""
    return min(int(0.15 * length), 750)


def scaled_sigmoid(y: np.ndarray | float) -> np.ndarray:
    """NAB's ``2 / (1 + e^{5y}) − 1``: about 0.987 at y = −1, 0 at y = 0, towards −1 far beyond."""
    return 2.0 / (1.0 + np.exp(5.0 * np.asarray(y, dtype=np.float64))) - 1.0


def nab_windows(length: int, events: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ``(start, end)`` row windows of a stream's events (onset, last labelled row), merged when overlapping."""
    if not events:
        return []
    half = max(int(0.1 * length / len(events)) // 2, 1)
    spans = sorted((max(onset - half, 0), min(max(onset + half, last), length - 1)) for onset, last in events)
    merged = [spans[0]]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


@dataclass
class NabCounts:
    """One stream's NAB totals for one profile: its raw score and what never alerting and a perfect detector get."""

    raw: float
    null: float
    perfect: float


@dataclass
class NabParts:
    """One stream's NAB score taken apart: what each found window earned, what each false alarm cost, and the
    windows missed. ``nab_stream``'s raw score is ``sum(rewards) + sum(costs) − A_FN · missed``."""

    rewards: list[float]
    costs: list[tuple[int, float]]  # (row, its cost: ≤ 0)
    missed: int
    windows: int
    detected: list[tuple[int, int]]  # per found window, as ``rewards``: (its index in ``nab_windows``, detecting row)


def nab_parts(detections: np.ndarray, events: list[tuple[int, int]], profile: str = "standard") -> NabParts:
    """The parts of one stream's raw NAB score for boolean detections ``[T]`` (module docstring)."""
    a_tp, a_fp, _ = PROFILES[profile]
    detections = np.asarray(detections, dtype=bool)
    length = len(detections)
    windows = nab_windows(length, events)
    found = [False] * len(windows)
    rewards: list[float] = []
    costs: list[tuple[int, float]] = []
    detected: list[tuple[int, int]] = []
    for i in np.flatnonzero(detections[probation(length) :]) + probation(length):
        inside = [k for k, (a, b) in enumerate(windows) if a <= i <= b]
        if inside:
            k = inside[0]
            if not found[k]:
                a, b = windows[k]
                found[k] = True
                detected.append((k, int(i)))
                rewards.append(a_tp * float(scaled_sigmoid(-(b - i) / max(b - a, 1))))
            continue
        before = [(a, b) for a, b in windows if b < i]
        if before:
            a, b = before[-1]
            costs.append((int(i), a_fp * float(scaled_sigmoid((i - b) / max(b - a, 1)))))
        else:
            costs.append((int(i), -a_fp))
    return NabParts(rewards, costs, found.count(False), len(windows), detected)


def nab_stream(detections: np.ndarray, events: list[tuple[int, int]], profile: str = "standard") -> NabCounts:
    """The raw NAB score of one stream's boolean detections ``[T]`` (module docstring)."""
    a_tp, _, a_fn = PROFILES[profile]
    parts = nab_parts(detections, events, profile)
    raw = sum(parts.rewards) + sum(cost for _, cost in parts.costs) - a_fn * parts.missed
    return NabCounts(raw, -a_fn * parts.windows, a_tp * float(scaled_sigmoid(-1.0)) * parts.windows)


def _stream_totals(detections: list[np.ndarray], events: list[list[tuple[int, int]]], profile: str) -> np.ndarray:
    """Each stream's ``nab_stream`` raw, null and perfect totals ``[streams, 3]``."""
    counts = [nab_stream(d, e, profile) for d, e in zip(detections, events)]
    return np.array([[c.raw, c.null, c.perfect] for c in counts], dtype=np.float64).reshape(-1, 3)


def _normalised(totals: np.ndarray) -> np.ndarray:
    """Corpus totals ``[..., 3]`` (raw, null, perfect) as NAB scores: 0 = never alerting, 100 = perfect (0 when no
    window gives the corpus a perfect score above the null one)."""
    raw, null, perfect = np.moveaxis(totals, -1, 0)
    span = perfect - null
    return np.where(span > 0, 100.0 * (raw - null) / np.where(span > 0, span, 1.0), 0.0)


def nab_score(
    detections: list[np.ndarray], events: list[list[tuple[int, int]]], profile: str = "standard"
) -> float:
    """The normalised NAB score (0 = never alerting, 100 = perfect) of a corpus of streams."""
    return float(_normalised(_stream_totals(detections, events, profile).sum(axis=0)))


def nab_interval(
    detections: list[np.ndarray], events: list[list[tuple[int, int]]], baseline: list[np.ndarray] | None = None,
    profile: str = "standard", level: float = 0.9, draws: int = 2000, seed: int = 0,
) -> tuple[float, float]:
    """The ``level`` percentile interval of ``nab_score`` over ``draws`` bootstrap draws of the corpus's streams; with
    ``baseline`` (another detector's detections of the same streams), of ``nab_score`` less the baseline's on the
    same draws. A change whose paired interval holds 0 is within what the choice of streams alone moves."""
    if not 0 < level < 1 or draws < 1:
        raise ValueError(f"nab_interval needs 0 < level < 1 and draws >= 1, got level {level}, draws {draws}")
    if baseline is not None and len(baseline) != len(detections):
        raise ValueError(f"baseline has {len(baseline)} streams, detections {len(detections)}")
    if not detections:
        return 0.0, 0.0
    picks = np.random.default_rng(seed).integers(0, len(detections), size=(draws, len(detections)))
    values = _normalised(_stream_totals(detections, events, profile)[picks].sum(axis=1))  # [draws]
    if baseline is not None:
        values = values - _normalised(_stream_totals(baseline, events, profile)[picks].sum(axis=1))
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def tuned_nab(
    scores: list[np.ndarray], events: list[list[tuple[int, int]]], candidates: int = 200
) -> tuple[float, float]:
    """The best standard NAB score over one threshold for the whole corpus, and that threshold.

    Candidates are the quantiles of every scored post-probation row, finest at the top where thresholds matter; a
    detection is a row whose score is at or above the threshold.
    """
    pooled = np.concatenate([s[probation(len(s)) :] for s in scores])
    pooled = pooled[np.isfinite(pooled)]
    if not pooled.size:
        return 0.0, float("nan")
    levels = 1.0 - np.logspace(-6, -0.3, candidates)
    best = (0.0, float("inf"))
    for threshold in np.unique(np.quantile(pooled, levels)):
        value = nab_score([np.nan_to_num(s, nan=-np.inf) >= threshold for s in scores], events)
        best = max(best, (value, float(threshold)))
    return best


def event_f1(detections: list[np.ndarray], events: list[list[tuple[int, int]]]) -> dict[str, float]:
    """Event precision, recall, F1 and mean detection delay (rows from onset) over a corpus, after probation."""
    tp = fn = fp = 0
    delays = []
    for d, e in zip(detections, events):
        d = np.asarray(d, dtype=bool)
        start = probation(len(d))
        hits = np.flatnonzero(d[start:]) + start
        windows = nab_windows(len(d), e)
        inside = np.zeros(len(hits), dtype=bool)
        for (a, b), (onset, _) in zip(windows, sorted(e)):
            in_window = (hits >= a) & (hits <= b)
            inside |= in_window
            if in_window.any():
                tp += 1
                delays.append(int(hits[in_window][0]) - onset)
            else:
                fn += 1
        fp += int((~inside).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "found": tp, "missed": fn, "false_alarms": fp,
            "mean_delay": float(np.mean(delays)) if delays else float("nan")}  # fmt: skip


def false_alarms_per_1000(detections: list[np.ndarray], events: list[list[tuple[int, int]]]) -> float:
    """Detections outside every event window per 1,000 scored (post-probation) rows."""
    stats = event_f1(detections, events)
    rows = sum(len(d) - probation(len(d)) for d in detections)
    return 1000.0 * stats["false_alarms"] / max(rows, 1)


def probation_alerts(detections: list[np.ndarray]) -> float:
    """Mean alerts per stream inside its probation part: what an operator sees when a stream connects, which no
    other metric counts (the standard score, event F1 and false alarms all skip probation)."""
    return float(np.mean([np.count_nonzero(d[: probation(len(d))]) for d in detections])) if detections else 0.0


def ucr_top1(score: np.ndarray, test_start: int, segment: tuple[int, int], margin: int = 100) -> bool:
    """Whether the argmax of ``score`` over the test part lies within ``margin`` rows of the labelled segment."""
    test = np.nan_to_num(np.asarray(score, dtype=np.float64)[test_start:], nan=-np.inf)
    if not np.isfinite(test).any():
        return False
    top = test_start + int(np.argmax(test))
    return segment[0] - margin <= top <= segment[1] + margin
