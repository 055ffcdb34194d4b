"""Point-adjusted F1 with delay (TREP.md §5; Ren et al. 2019, the TS2Vec / T-Rep evaluation protocol).

Convention, per series of T points with boolean ``alerts`` and ``labels``:

- a labelled segment is a maximal run of ``True`` labels, ``[start, end)``;
- the segment is detected if an alert falls in ``[start, min(start + delay + 1, end))``: with ``delay = 0``
  only an alert on its first point counts, with ``delay = 7`` one within its first 8 points;
- every point of a detected segment is a true positive, every point of a missed one a false negative; alerts
  inside a segment after its first ``delay + 1`` points change nothing (they are neither TP nor FP);
- every alert on an unlabelled point is a false positive (points are counted, not runs);
- precision, recall and F1 are 0 when their denominator is 0 (scikit-learn's ``zero_division`` result).

Across series the counts are summed before computing the ratios (micro average), as the reference protocol
concatenates all series. Missing timestamps must be filled (as unlabelled, unalerted points) by the caller.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np


def _ratios(tp: int, fp: int, fn: int) -> dict[str, float | int]:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def point_adjust_f1(alerts: np.ndarray, labels: np.ndarray, delay: int) -> dict[str, float | int]:
    """Return precision, recall, F1 and the tp/fp/fn point counts of one series (module docstring)."""
    alerts = np.asarray(alerts, dtype=bool)
    labels = np.asarray(labels, dtype=bool)
    if alerts.ndim != 1 or alerts.shape != labels.shape:
        raise ValueError(f"alerts {alerts.shape} and labels {labels.shape} must be 1-D series of the same length")
    if delay < 0:
        raise ValueError(f"delay must be >= 0 points, got {delay}")
    edges = np.diff(np.concatenate([[0], labels.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    alerts_before = np.concatenate([[0], np.cumsum(alerts)])
    window_end = np.minimum(starts + delay + 1, ends)
    detected = alerts_before[window_end] > alerts_before[starts]
    lengths = ends - starts
    tp = int(lengths[detected].sum())
    fn = int(lengths[~detected].sum())
    fp = int(np.count_nonzero(alerts & ~labels))
    return _ratios(tp, fp, fn)


def aggregate_f1(results: Iterable[Mapping[str, float | int]]) -> dict[str, float | int]:
    """Return precision, recall and F1 of the tp/fp/fn counts summed over series (micro average)."""
    tp = fp = fn = 0
    for r in results:
        tp, fp, fn = tp + int(r["tp"]), fp + int(r["fp"]), fn + int(r["fn"])
    return _ratios(tp, fp, fn)
