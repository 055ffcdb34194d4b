"""Turn a dataset file into training arrays: dispatch on its format, pick channels, difference, normalise."""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.datasets.archive import is_archive, read_alert_ranges, read_archive
from trep_edge.datasets.paths import resolve
from trep_edge.datasets.timestamps import median_interval
from trep_edge.datasets.ett import load_csv
from trep_edge.datasets.npy import load_npy
from trep_edge.datasets.physionet import VITALS, iter_patients
from trep_edge.datasets.table import column_positions
from trep_edge.datasets.ts_format import load_ts
from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly
from trep_edge.runtime.core.preprocess import Normalisation, count_levels, difference, fit_normalisation, forward_fill
from trep_edge.runtime.core.windows import step_index

FORMATS = (".csv (ETT-style), .ts (UEA/UCR), .txt (UCR anomaly), .npy, .tar.gz (PhysioNet 2019 .psv), "
           "a telemetry archive folder (docs/retraining.md)")


@dataclass
class TrainingData:
    """Normalised training series ``x [N, T, C]`` plus what the model card needs to reproduce the inputs."""

    x: np.ndarray
    channels: list[str]
    name: str
    normalisation: Normalisation
    differencing: int
    forward_fill: int = 0
    labels: np.ndarray | None = None
    test_x: np.ndarray | None = None
    test_labels: np.ndarray | None = None
    first_step: int | None = None
    """Unix-epoch step (timestamp / ``step_seconds``, rounded) of the first row, for a CSV with timestamps."""
    step_seconds: float | None = None
    """The median seconds between the rows' timestamps, for a CSV with timestamps."""

    @property
    def fingerprint(self) -> str:
        """sha256 of the normalised training array: identifies the data a model was trained on."""
        return hashlib.sha256(np.ascontiguousarray(self.x, dtype=np.float32).tobytes()).hexdigest()


def adf_order(x: np.ndarray, max_order: int = 2, p_value: float = 0.05) -> int:
    """How often to difference: while an ADF test on any channel cannot reject a unit root (TREP.md §5)."""
    from statsmodels.tsa.stattools import adfuller

    series = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
    for order in range(max_order + 1):
        diffed = difference(series[None], order)[0]
        has_root = False
        for c in range(diffed.shape[1]):
            col = diffed[:, c][~np.isnan(diffed[:, c])]
            if len(col) > 20 and np.ptp(col) > 0:
                with warnings.catch_warnings():
                    # statsmodels 0.15 warns that its return type will change; the p-value stays element 1.
                    warnings.simplefilter("ignore", FutureWarning)
                    p = adfuller(col, autolag="AIC")[1]
                has_root |= p > p_value
        if not has_root:
            return order
    return max_order


def row_range(rows: str | None) -> tuple[int | None, int | None]:
    """``--rows START:END`` as the slice bounds it names (None: open on that side; ``(None, None)`` without it)."""
    if not rows:
        return None, None
    try:
        lo_s, hi_s = rows.split(":")
        return (int(lo_s) if lo_s else None), (int(hi_s) if hi_s else None)
    except ValueError as exc:
        raise ValueError(f"--rows {rows!r} is not START:END (e.g. 0:8640)") from exc


def _rows(values: np.ndarray, rows: str | None) -> np.ndarray:
    lo, hi = row_range(rows)
    return values[..., lo:hi, :]


def load_training_data(
    spec: str,
    data_root: str | None = None,
    channels: list[str] | None = None,
    rows: str | None = None,
    max_series: int | None = None,
    differencing: str | int = 0,
    fill_limit: int = 0,
    exclude_alerts: str | None = None,
    normalisation: Normalisation | None = None,
) -> TrainingData:
    """Load ``spec`` (a file, or a path under the data folder) as normalised training data.

    Each channel's last observation is carried over at most ``fill_limit`` missing steps before differencing
    (the runtime does the same, from the model card). UCR anomaly files train on their normal prefix only; UEA/UCR ``.ts`` files bring their TEST split (when
    present) normalised with the training statistics; PhysioNet archives yield one series per patient; a telemetry
    archive folder one series per stream (and per gap), without the time ranges of the alert messages in
    ``exclude_alerts`` (a JSONL file or an archive folder). The normalisation bends count and burst channels of
    undifferenced data (``preprocess.Normalisation``); ``normalisation`` reuses given statistics (fine-tuning keeps
    the previous model's, so its input contract, and the daemon's windows, survive the swap).
    """
    path = resolve(spec, data_root)
    name = path.name
    labels = test_x = test_labels = stamps = None
    if is_archive(path):
        exclude = read_alert_ranges(exclude_alerts) if exclude_alerts else None
        found = read_archive(path, channels, exclude=exclude)
        if not found:
            raise ValueError(f"{path}: no reading left to train on (every step excluded or missing)")
        x, names = _pad_stack([s.values for s in found]), found[0].channels
    elif path.is_dir():
        raise ValueError(f"{path} is a folder but not a telemetry archive: pass one file, e.g. {path}/<name>_TRAIN.ts")
    elif exclude_alerts:
        raise ValueError("--exclude-alerts applies to a telemetry archive folder only")
    elif name.endswith(".tar.gz"):
        wanted = channels or VITALS
        patients = iter_patients(path, limit=max_series)
        series = [p.values[..., column_positions(p.columns, wanted, path)] for p in patients]
        x, names = _pad_stack(series), list(wanted)
    elif name.endswith(".csv"):
        table = load_csv(path, only=channels or None)
        x, names, stamps = table.values[None], table.channels, table.timestamps
    elif name.endswith(".ts"):
        x, labels = load_ts(path)
        names = [f"dim{i}" for i in range(x.shape[-1])]
        test_path = path.with_name(name.replace("_TRAIN.ts", "_TEST.ts"))
        if test_path != path and test_path.is_file():
            test_x, test_labels = load_ts(test_path)
    elif name.endswith(".txt"):
        series = load_ucr_anomaly(path)
        x = series.values[: series.train_end].reshape(1, -1, 1)
        names = ["value"]
    elif name.endswith(".npy"):
        x = load_npy(path)
        names = [f"dim{i}" for i in range(x.shape[-1])]
    else:
        raise ValueError(f"{path}: unknown data format; supported: {FORMATS}")
    if max_series is not None:
        x = x[:max_series]
    x = _rows(x, rows)
    first_step, step_seconds = _timing(stamps, rows)
    if fill_limit:
        x = np.stack([_fill_observed(s, fill_limit) for s in x])
        if test_x is not None:
            test_x = np.stack([_fill_observed(s, fill_limit) for s in test_x])
    order = adf_order(x) if differencing == "auto" else int(differencing)
    x = difference(x, order)
    # A count or burst channel of undifferenced data reaches the model as asinh(x / c) (preprocess.count_levels).
    norm = normalisation or fit_normalisation(x, count_levels(x) if order == 0 else None, names)
    if test_x is not None:
        longest = max(x.shape[1], test_x.shape[1])
        x, test_x = _pad_to(x, longest), norm.apply(difference(_pad_to(test_x, longest), order))
    return TrainingData(norm.apply(x), names, path.name, norm, order, fill_limit, labels, test_x, test_labels,
                        first_step, step_seconds)  # fmt: skip


def _timing(stamps: np.ndarray | None, rows: str | None) -> tuple[int | None, float | None]:
    """The first training row's Unix-epoch step and the rows' spacing in seconds, counted as the daemon counts steps
    (``windows.step_index``); ``(None, None)`` without timestamps or without one that advances."""
    if stamps is None:
        return None, None
    seconds = _rows(stamps.astype("datetime64[ms]").astype(np.int64)[None, :, None] / 1000.0, rows)[0, :, 0]
    try:
        spacing = median_interval(seconds)
    except ValueError:
        return None, None
    return step_index(seconds[0], spacing), spacing


def _fill_observed(series: np.ndarray, limit: int) -> np.ndarray:
    """Bounded forward fill of ``[T, C]`` that leaves the NaN padding after the last observed step alone.

    Filling into the padding of a shorter series would invent readings after its end (a patient's discharge).
    """
    filled = forward_fill(series, limit)[0]
    observed = np.flatnonzero(~np.isnan(series).all(axis=1))
    filled[observed[-1] + 1 if len(observed) else 0 :] = np.nan
    return filled


def _pad_stack(series: list[np.ndarray]) -> np.ndarray:
    """Series ``[T_i, C]`` of different lengths → ``[N, max T_i, C]``, NaN-padded at the end."""
    dtype = np.result_type(np.float32, *(s.dtype for s in series))  # a float64 source keeps its digits
    x = np.full((len(series), max(len(s) for s in series), series[0].shape[1]), np.nan, dtype=dtype)
    for i, s in enumerate(series):
        x[i, : len(s)] = s
    return x


def _pad_to(x: np.ndarray, length: int) -> np.ndarray:
    """NaN-pad ``[N, T, C]`` to ``length`` steps so train and test share T (unequal-length sets differ by split)."""
    if x.shape[1] >= length:
        return x
    out = np.full((x.shape[0], length, x.shape[2]), np.nan, dtype=np.result_type(np.float32, x.dtype))
    out[:, : x.shape[1]] = x
    return out
