"""Streaming point anomaly detection (TREP.md §5, the Yahoo protocol) on UCR-anomaly or Yahoo S5 series.

Per series: difference while an ADF test finds a unit root (decided on the train part), z-normalise with the
train part's statistics, score every step with the masked-vs-unmasked window protocol of the daemon
(``runtime.offline.raw_scores``, padding 200 = window 201), adjust by the mean of the previous Z = 21 scores,
threshold at ``μ + β σ`` of the train part's adjusted scores, suppress alerts for ``delay`` points after one, and
count point-adjusted F1 with the same delay (3 as the reference Yahoo run, 7 as the paper says). One encoder is
pretrained on the train parts of all series together, as the reference does.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly
from trep_edge.datasets.yahoo import load_yahoo
from trep_edge.runtime.core.model_card import Scoring
from trep_edge.runtime.core.offline import raw_scores
from trep_edge.runtime.core.preprocess import Normalisation, difference, fit_normalisation
from trep_edge.runtime.core.scoring import adjust_scores, calibrate

from trep_edge.training.data import adf_order
from trep_edge.training.encoder import TRepEncoder
from trep_edge.training.export import TorchEngine, build_card
from trep_edge.training.evaluation.paper_protocol import score_series
from trep_edge.training.evaluation.point_adjusted import aggregate_f1, point_adjust_f1

DELAYS = (3, 7)


@dataclass
class AnomalyCase:
    """One labelled series: raw values ``[T]``, labels ``[T]``; ``values[:train_end]`` is the train part."""

    name: str
    values: np.ndarray
    labels: np.ndarray
    train_end: int


@dataclass
class PreparedCase:
    """A case after ADF differencing and train-statistics normalisation: model input ``values [T, 1]``."""

    case: AnomalyCase
    values: np.ndarray
    differencing: int
    normalisation: Normalisation


def ucr_cases(paths: list[str | os.PathLike[str]]) -> list[AnomalyCase]:
    """UCR anomaly archive files: the train part is the file name's normal prefix."""
    cases = []
    for path in paths:
        s = load_ucr_anomaly(path)
        cases.append(AnomalyCase(f"{s.id:03d}_{s.name}", s.values, s.labels, s.train_end))
    return cases


def yahoo_cases(root: str | os.PathLike[str], train_fraction: float = 0.5) -> list[AnomalyCase]:
    """Yahoo S5 series (A1–A4 layout); the first half of each is the train part, as in the reference protocol."""
    return [
        AnomalyCase(s.name, s.values, s.labels, int(len(s.values) * train_fraction)) for s in load_yahoo(Path(root))
    ]


def prepare_case(case: AnomalyCase) -> PreparedCase:
    """Difference ``d`` times (ADF on the train part) and z-normalise with the train part's mean and std."""
    x = np.asarray(case.values, dtype=np.float32).reshape(-1, 1)
    order = adf_order(x[: case.train_end][None])
    diffed = difference(x, order)
    norm = fit_normalisation(diffed[: case.train_end])
    return PreparedCase(case, norm.apply(diffed), order, norm)


def training_array(prepared: list[PreparedCase]) -> np.ndarray:
    """The train parts of all series as one NaN-padded ``[N, T, 1]`` pretraining array."""
    longest = max(p.case.train_end for p in prepared)
    out = np.full((len(prepared), longest, 1), np.nan, dtype=np.float32)
    for i, p in enumerate(prepared):
        out[i, : p.case.train_end] = p.values[: p.case.train_end]
    return out


def engine_for(encoder: TRepEncoder, config: dict, prepared: PreparedCase, window: int, z: int) -> TorchEngine:
    """The torch encoder behind the runtime engine interface, with a card describing this series' inputs."""
    meta = {"channels": ["value"], "normalisation": prepared.normalisation.to_dict(), "differencing": prepared.differencing}
    card = build_card(prepared.case.name, encoder, meta, config, window, Scoring(z=z), 0)
    return TorchEngine(encoder, card)


def raw_scores_between(engine: TorchEngine, values: np.ndarray, lo: int, hi: int, history: int) -> tuple[np.ndarray, int]:
    """Raw scores of steps ``[first, hi)``, ``first = max(0, lo − history)``, every window holding the real past.

    Returns the scores and ``first``; the ``lo − first`` leading scores only feed the adjusted score's history.
    """
    first = max(0, lo - history)
    begin = max(0, first - (engine.card.window - 1))
    raw = raw_scores(engine, values[begin:hi], start=begin)
    return raw[first - begin :], first


def scored_region(case: AnomalyCase, max_steps: int | None) -> tuple[int, int]:
    """Steps scored for F1: the whole test part, or ``max_steps`` of it centred on its labelled points."""
    length = len(case.values)
    if max_steps is None or length - case.train_end <= max_steps:
        return case.train_end, length
    labelled = np.flatnonzero(case.labels[case.train_end :]) + case.train_end
    if labelled.size == 0:
        return case.train_end, case.train_end + max_steps
    span = labelled[-1] + 1 - labelled[0]
    lo = max(case.train_end, labelled[0] - max(0, max_steps - span) // 2)
    hi = min(length, lo + max_steps)
    return max(case.train_end, hi - max_steps), hi


def evaluate_case(
    engine: TorchEngine,
    prepared: PreparedCase,
    beta: float = 4.0,
    z: int = 21,
    calibration_steps: int | None = None,
    max_test_steps: int | None = None,
    delays: tuple[int, ...] = DELAYS,
) -> dict:
    """Calibrate on the train part, score the test region; point-adjust counts per delay (runtime scoring code)."""
    case = prepared.case
    cal_lo = 0 if calibration_steps is None else max(0, case.train_end - calibration_steps)
    raw_cal, first = raw_scores_between(engine, prepared.values, cal_lo, case.train_end, z)
    cal = calibrate(adjust_scores(raw_cal, z)[cal_lo - first :], source=f"{case.name} train part")
    lo, hi = scored_region(case, max_test_steps)
    raw_test, first = raw_scores_between(engine, prepared.values, lo, hi, z)
    labels = case.labels[lo:hi]
    result = {
        "series": case.name,
        "differencing": prepared.differencing,
        "calibration": {"mu": cal.mu, "sigma": cal.sigma, "n": cal.n, "steps": [cal_lo, case.train_end]},
        "test_steps": [lo, hi],
        "labelled_points": int(labels.sum()),
    }
    for delay in delays:
        scored = score_series(raw_test, z=z, cal=cal, beta=beta, delay=delay)
        alerts = scored.alerts[lo - first :]
        result[f"delay{delay}"] = {**point_adjust_f1(alerts, labels, delay), "alerts": int(alerts.sum()),
                                   "alerts_in_labels": int((alerts & labels).sum())}
    # Diagnostics: is there signal the delay rule misses, or none at all?
    adjusted = scored.adjusted[lo - first :]
    result["threshold"] = float(scored.thresholds[0])
    result["max_adjusted_in_labels"] = _nanmax(adjusted[labels])
    result["max_adjusted_elsewhere"] = _nanmax(adjusted[~labels])
    return result


def _nanmax(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else None


def summarise(per_series: list[dict], delays: tuple[int, ...] = DELAYS) -> dict:
    """Micro-averaged precision, recall and F1 over series (counts summed, as the reference concatenates)."""
    return {f"delay{d}": aggregate_f1(r[f"delay{d}"] for r in per_series) for d in delays}
