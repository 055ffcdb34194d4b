"""Loaders for every data format in the shared data folder; numpy only, so the edge runtime can use them too."""

from trep_edge.datasets.errors import DataFormatError
from trep_edge.datasets.ett import Series, load_csv
from trep_edge.datasets.npy import load_npy
from trep_edge.datasets.paths import data_root
from trep_edge.datasets.physionet import (
    CLINICAL_COLUMNS,
    LABEL_COLUMN,
    PAPER_FEATURES,
    VITALS,
    Patient,
    iter_patients,
    read_psv,
    sepsis_preprocess,
)
from trep_edge.datasets.ts_format import load_ts, load_uea
from trep_edge.datasets.ucr_anomaly import AnomalySeries, load_ucr_anomaly
from trep_edge.datasets.yahoo import LabelledSeries, load_yahoo

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
