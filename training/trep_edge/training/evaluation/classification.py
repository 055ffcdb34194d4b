"""UEA classification with the TimeDim protocol (TREP.md §5): pretrain on TRAIN, encode whole series, RBF-SVM."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trep_edge.training.classification import timedim_accuracy
from trep_edge.training.data import TrainingData, load_training_data
from trep_edge.training.encode import encode
from trep_edge.training.encoder import TRepEncoder

# The 15 UEA sets of the shared data folder, cheapest first (shortest series, then fewest values), so a
# time-limited run finishes as many as it can.
UEA_ORDER = [
    "ERing", "RacketSports", "Libras", "BasicMotions", "JapaneseVowels", "NATOPS", "Epilepsy",
    "AtrialFibrillation", "StandWalkJump", "FingerMovements", "Handwriting", "UWaveGestureLibrary",
    "ArticularyWordRecognition", "LSST", "PenDigits",
]  # fmt: skip


@dataclass
class ClassificationData:
    """Normalised TRAIN and TEST splits (TEST normalised with TRAIN statistics) and their labels."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_uea_split(name: str, data_root: str | None = None) -> ClassificationData:
    """``UEA/<name>/<name>_TRAIN.ts`` and its TEST file, per-channel z-scored with TRAIN statistics."""
    data: TrainingData = load_training_data(f"UEA/{name}/{name}_TRAIN.ts", data_root)
    if data.test_x is None:
        raise FileNotFoundError(f"UEA/{name}/{name}_TEST.ts is missing: the TimeDim protocol needs the TEST split")
    return ClassificationData(name, data.x, data.labels, data.test_x, data.test_labels)


def accuracy(encoder: TRepEncoder, data: ClassificationData, time_index: str = "relative") -> float:
    """TimeDim SVM test accuracy of ``encoder``'s representations."""
    z_train = encode(encoder, data.x_train, time_index)
    z_test = encode(encoder, data.x_test, time_index)
    return timedim_accuracy(z_train, data.y_train, z_test, data.y_test)
