"""Streaming point anomaly detection on PhysioNet 2019 vitals: the daemon's score, sepsis hours as the anomalies.

PhysioNet has sepsis labels, not anomaly labels. Labelling used here: every hour with ``SepsisLabel == 1`` is an
anomalous point, so each septic patient's labelled run is one segment to detect (point-adjusted F1 with delay).
Per patient the hourly vitals (``datasets.physionet.VITALS``) are forward-filled over at most ``FORWARD_FILL``
hours exactly as the daemon does (``runtime.offline.prepare``), z-normalised with the training patients'
statistics, and every hour is scored with the window protocol of the daemon (``runtime.offline.raw_scores``);
the threshold is ``μ + β σ`` of the adjusted scores of held-out non-septic patients. The encoder is pretrained on
non-septic patients only (normal data, as a deployed model would be). Split by patient.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from trep_edge.datasets.physionet import VITALS, iter_patients
from trep_edge.runtime.core.model_card import Scoring
from trep_edge.runtime.core.offline import raw_scores
from trep_edge.runtime.core.preprocess import Normalisation, fit_normalisation, forward_fill
from trep_edge.runtime.core.scoring import adjust_scores, calibrate

from trep_edge.training.encoder import TRepEncoder
from trep_edge.training.export import TorchEngine, build_card
from trep_edge.training.evaluation.point_adjusted import aggregate_f1, point_adjust_f1
from trep_edge.training.evaluation.paper_protocol import score_series

FORWARD_FILL = 8
"""Hours a vital is carried over, as the shipped icu-vitals model does."""
WINDOW = 49
"""Scoring window in hours (the shipped icu-vitals model's)."""


@dataclass
class StreamCohort:
    """Patients' forward-filled vitals (``[T_i, 7]`` each, raw units) and hourly sepsis labels, in three groups."""

    train: list[np.ndarray]
    calibration: list[np.ndarray]
    test: list[tuple[np.ndarray, np.ndarray]]


def load_stream_cohort(
    tar_path: str | os.PathLike[str], n_train: int, n_calibration: int, n_test: int, rng: np.random.Generator
) -> StreamCohort:
    """Non-septic patients for pretraining and calibration; a test set half septic, half not (fewer if short)."""
    septic, healthy = [], []
    columns = None
    for patient in iter_patients(tar_path):
        columns = columns or [patient.columns.index(v) for v in VITALS]
        values = forward_fill(patient.values[:, columns], FORWARD_FILL)[0]
        (septic if patient.sepsis.any() else healthy).append((values, patient.sepsis.copy()))
    healthy = [healthy[i] for i in rng.permutation(len(healthy))]
    septic = [septic[i] for i in rng.permutation(len(septic))]
    n_septic = min(len(septic), n_test // 2)
    train = [v for v, _ in healthy[:n_train]]
    calibration = [v for v, _ in healthy[n_train : n_train + n_calibration]]
    rest = healthy[n_train + n_calibration : n_train + n_calibration + n_test - n_septic]
    return StreamCohort(train, calibration, septic[:n_septic] + rest)


def normalisation(cohort: StreamCohort) -> Normalisation:
    """Per-channel mean and std of the training patients' observed values."""
    return fit_normalisation(np.concatenate(cohort.train))


def training_array(cohort: StreamCohort, norm: Normalisation) -> np.ndarray:
    """The training patients as one NaN-padded, normalised ``[N, T, 7]`` array."""
    longest = max(len(v) for v in cohort.train)
    out = np.full((len(cohort.train), longest, len(VITALS)), np.nan, dtype=np.float32)
    for i, values in enumerate(cohort.train):
        out[i, : len(values)] = norm.apply(values)
    return out


def engine_for(encoder: TRepEncoder, config: dict, norm: Normalisation, z: int) -> TorchEngine:
    """The torch encoder behind the runtime engine interface, with a card for the vitals' inputs."""
    meta = {"channels": list(VITALS), "normalisation": norm.to_dict(), "differencing": 0, "forward_fill": FORWARD_FILL}
    return TorchEngine(encoder, build_card("sepsis-stream", encoder, meta, config, WINDOW, Scoring(z=z), 0))


def evaluate(
    engine: TorchEngine, cohort: StreamCohort, norm: Normalisation, beta: float, z: int, delays: tuple[int, ...]
) -> dict:
    """Calibrate on the calibration patients, score the test patients; point-adjusted counts summed over patients."""
    cal_adjusted = [adjust_scores(raw_scores(engine, norm.apply(v)), z) for v in cohort.calibration]
    cal = calibrate(np.concatenate(cal_adjusted), source="non-septic calibration patients")
    per_delay: dict[int, list[dict]] = {d: [] for d in delays}
    alerts_total = {d: 0 for d in delays}
    for values, labels in cohort.test:
        raw = raw_scores(engine, norm.apply(values))
        for delay in delays:
            alerts = score_series(raw, z=z, cal=cal, beta=beta, delay=delay).alerts
            per_delay[delay].append(point_adjust_f1(alerts, labels, delay))
            alerts_total[delay] += int(alerts.sum())
    out = {f"delay{d}": {**aggregate_f1(per_delay[d]), "alerts": alerts_total[d]} for d in delays}
    out["calibration"] = {"mu": cal.mu, "sigma": cal.sigma, "n": cal.n}
    out["test_patients"] = len(cohort.test)
    out["septic_test_patients"] = int(sum(bool(y.any()) for _, y in cohort.test))
    out["test_hours"] = int(sum(len(y) for _, y in cohort.test))
    out["septic_hours"] = int(sum(int(y.sum()) for _, y in cohort.test))
    return out
