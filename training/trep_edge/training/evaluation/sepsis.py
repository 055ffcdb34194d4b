"""Segment anomaly detection on PhysioNet 2019 sepsis (TREP.md §5): is the last hour of a 6-hour window septic?

Each stay is forward-filled and cut to its last 45 hours on the paper's ten features (``sepsis_preprocess``).
Features are z-scored with the training patients' statistics; a value never measured so far in a stay is set to
the training mean (0 after z-scoring), because the encoder masks a whole timestep when any channel is NaN, while
the hours before a short stay begins stay NaN (masked). Windows are encoded on their own, max-pooled over their
6 hours, and an RBF-SVM (C by 5-fold CV over 10^-4..10^4) predicts the label of the window's last hour. The
raw-data baseline gives the SVM the window's 60 normalised values instead.

Split by patient: no patient has windows on both sides.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

from trep_edge.datasets.physionet import PAPER_FEATURES, iter_patients, sepsis_preprocess
from trep_edge.runtime.core.preprocess import fit_normalisation
from trep_edge.runtime.core.time_index import time_index

from trep_edge.training.encoder import TRepEncoder

STAY_HOURS = 45
WINDOW_HOURS = 6
C_GRID = [10.0**k for k in range(-4, 5)]


@dataclass
class SepsisCohort:
    """Preprocessed stays: ``x [P, 45, 10]`` (NaN before a short stay begins), ``labels [P, 45]``, patient ids."""

    x: np.ndarray
    labels: np.ndarray
    ids: np.ndarray

    @property
    def septic(self) -> np.ndarray:
        """Patients with at least one septic hour in their last 45 hours."""
        return self.labels.any(axis=1)

    def subset(self, rows: np.ndarray) -> "SepsisCohort":
        """The patients at ``rows``."""
        return SepsisCohort(self.x[rows], self.labels[rows], self.ids[rows])


def load_cohort(tar_path: str | os.PathLike[str], limit: int | None = None) -> SepsisCohort:
    """Every patient of a PhysioNet 2019 archive, preprocessed as the paper does."""
    xs, labels, ids = [], [], []
    for patient in iter_patients(tar_path, limit=limit):
        x, y = sepsis_preprocess(patient, STAY_HOURS, PAPER_FEATURES)
        xs.append(x)
        labels.append(y)
        ids.append(patient.id)
    return SepsisCohort(np.stack(xs), np.stack(labels), np.array(ids))


def sample_patients(cohort: SepsisCohort, n: int, septic_share: float, rng: np.random.Generator) -> SepsisCohort:
    """``n`` patients drawn without replacement, ``septic_share`` of them septic (fewer if the cohort lacks them)."""
    septic = np.flatnonzero(cohort.septic)
    healthy = np.flatnonzero(~cohort.septic)
    n_septic = min(len(septic), int(round(n * septic_share)))
    rows = np.concatenate([rng.choice(septic, n_septic, replace=False), rng.choice(healthy, n - n_septic, replace=False)])
    return cohort.subset(np.sort(rows))


def split_patients(cohort: SepsisCohort, test_share: float, rng: np.random.Generator) -> tuple[SepsisCohort, SepsisCohort]:
    """Patient-level train/test split, stratified by whether the patient is septic."""
    test = np.zeros(len(cohort.ids), dtype=bool)
    for group in (np.flatnonzero(cohort.septic), np.flatnonzero(~cohort.septic)):
        test[rng.choice(group, int(round(len(group) * test_share)), replace=False)] = True
    return cohort.subset(np.flatnonzero(~test)), cohort.subset(np.flatnonzero(test))


def normalise(train: SepsisCohort, *others: SepsisCohort) -> list[np.ndarray]:
    """z-score with ``train``'s statistics; unmeasured values of an observed hour become 0 (the train mean)."""
    norm = fit_normalisation(train.x)
    out = []
    for cohort in (train, *others):
        x = norm.apply(cohort.x)
        observed_hour = ~np.isnan(x).all(axis=-1, keepdims=True)
        out.append(np.where(np.isnan(x) & observed_hour, 0.0, x).astype(np.float32))
    return out


def windows(x: np.ndarray, labels: np.ndarray, hours: int = WINDOW_HOURS) -> tuple[np.ndarray, np.ndarray]:
    """Every window of ``hours`` consecutive hours whose last hour is observed, and that hour's label."""
    view = np.lib.stride_tricks.sliding_window_view(x, hours, axis=1).transpose(0, 1, 3, 2)  # [P, T-h+1, h, C]
    last = labels[:, hours - 1 :]
    keep = ~np.isnan(view[:, :, -1]).all(axis=-1)
    return np.ascontiguousarray(view[keep]), last[keep]


@torch.no_grad()
def window_features(encoder: TRepEncoder, w: np.ndarray, time_index_spec: str = "relative", batch: int = 1024) -> np.ndarray:
    """Encode each window ``[M, h, C]`` on its own and max-pool its representation over time → ``[M, F]``."""
    encoder.eval()
    out = []
    for lo in range(0, len(w), batch):
        chunk = torch.from_numpy(w[lo : lo + batch])
        mask = torch.ones(chunk.shape[:2], dtype=torch.bool)
        t = torch.from_numpy(time_index(time_index_spec, np.zeros(len(chunk), dtype=np.int64), chunk.shape[1]))
        out.append(encoder(chunk, mask, t).amax(dim=1).numpy())
    return np.concatenate(out)


def raw_features(w: np.ndarray) -> np.ndarray:
    """The raw-data baseline: the window's normalised values, flattened, padding hours as 0."""
    return np.nan_to_num(w.reshape(len(w), -1), nan=0.0)


def svm_scores(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    max_train: int,
    seed: int,
    cv_metric: str = "accuracy",
) -> dict:
    """RBF-SVM with C by 5-fold CV (on ``cv_metric``: accuracy or f1) on at most ``max_train`` training windows;
    F1 etc. on every test window."""
    features, labels = train
    rng = np.random.default_rng(seed)
    if len(labels) > max_train:
        rows = rng.choice(len(labels), max_train, replace=False)
        features, labels = features[rows], labels[rows]
    if cv_metric not in ("accuracy", "f1"):
        raise ValueError(f"cv_metric must be accuracy or f1, got {cv_metric!r}")
    search = GridSearchCV(SVC(gamma="scale", cache_size=500), {"C": C_GRID}, cv=5, n_jobs=1, scoring=cv_metric)
    svm = search.fit(features, labels).best_estimator_
    predicted = svm.predict(test[0])
    y = test[1]
    return {
        "f1": float(f1_score(y, predicted, zero_division=0)),
        "accuracy": float(accuracy_score(y, predicted)),
        "precision": float(precision_score(y, predicted, zero_division=0)),
        "recall": float(recall_score(y, predicted, zero_division=0)),
        "C": float(svm.C),
        "train_windows": int(len(labels)),
        "test_windows": int(len(y)),
        "test_positive_share": float(np.mean(y)),
    }
