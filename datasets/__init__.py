"""Loaders for every data format in the shared data folder; numpy only, so the edge runtime can use them too."""

from .errors import DataFormatError
from .ett import Series, load_csv
from .npy import load_npy
from .paths import data_root
from .physionet import (
    CLINICAL_COLUMNS,
    LABEL_COLUMN,
    PAPER_FEATURES,
    VITALS,
    Patient,
    iter_patients,
    read_psv,
    sepsis_preprocess,
)
from .ts_format import load_ts, load_uea
from .ucr_anomaly import AnomalySeries, load_ucr_anomaly
from .yahoo import LabelledSeries, load_yahoo

__all__ = [
    "CLINICAL_COLUMNS",
    "LABEL_COLUMN",
    "PAPER_FEATURES",
    "VITALS",
    "AnomalySeries",
    "DataFormatError",
    "LabelledSeries",
    "Patient",
    "Series",
    "data_root",
    "iter_patients",
    "load_csv",
    "load_npy",
    "load_ts",
    "load_uea",
    "load_ucr_anomaly",
    "load_yahoo",
    "read_psv",
    "sepsis_preprocess",
]
