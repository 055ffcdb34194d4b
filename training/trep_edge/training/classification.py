"""Classification protocol TimeDim (TREP.md §5): max-pool representations to W steps, flatten, RBF-SVM."""
from __future__ import annotations

import numpy as np
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

C_GRID = [10.0**k for k in range(-4, 5)] + [np.inf]


def timedim_features(z: np.ndarray, w: int = 10) -> np.ndarray:
    """Max-pool ``z [N, T, F]`` with kernel = stride = ⌊T/W⌋ along time, then flatten to ``[N, ⌊T/k⌋·F]``."""
    n, length, f = z.shape
    k = max(1, length // w)
    steps = length // k
    pooled = z[:, : steps * k].reshape(n, steps, k, f).max(axis=2)
    return pooled.reshape(n, steps * f)


def fit_svm(features: np.ndarray, labels: np.ndarray, seed: int = 0) -> SVC:
    """RBF-SVM with C chosen by 5-fold CV over 10^-4..10^4 and ∞ (the T-Loss protocol).

    Too few examples per class for 5 folds: fit with C = ∞ directly, as that protocol does.
    """
    _, counts = np.unique(labels, return_counts=True)
    if counts.min() < 5 or len(labels) < 50:
        return SVC(C=np.inf, gamma="scale").fit(features, labels)
    search = GridSearchCV(SVC(gamma="scale", random_state=seed), {"C": C_GRID}, cv=5, n_jobs=1)
    return search.fit(features, labels).best_estimator_


def timedim_accuracy(
    z_train: np.ndarray, y_train: np.ndarray, z_test: np.ndarray, y_test: np.ndarray, w: int = 10
) -> float:
    """Test accuracy of the TimeDim SVM fit on the training representations."""
    svm = fit_svm(timedim_features(z_train, w), y_train)
    return float((svm.predict(timedim_features(z_test, w)) == y_test).mean())
