"""Load series of the UCR Time Series Anomaly Archive (KDD Cup 2021): values, train split and anomaly labels."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.datasets.cells import parse_floats
from trep_edge.datasets.errors import DataFormatError

FILE_PATTERN = "<id>_UCR_Anomaly_<name>_<trainEnd>_<anomBegin>_<anomEnd>.txt"
_FILE_NAME = re.compile(r"^(\d+)_UCR_Anomaly_(.+)_(\d+)_(\d+)_(\d+)\.txt$")


@dataclass
class AnomalySeries:
    """One archive series: values float32 [T], values[:train_end] are normal, labels bool [T] mark the anomaly."""

    id: int
    name: str
    values: np.ndarray
    train_end: int
    labels: np.ndarray


def load_ucr_anomaly(path: str | os.PathLike[str]) -> AnomalySeries:
    """Load one archive .txt file; the split and the anomaly come from its name (1-based, inclusive positions)."""
    path = Path(path)
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise DataFormatError(path, f"file name does not follow the archive pattern {FILE_PATTERN}")
    series_id, name = int(match[1]), match[2]
    train_end, begin, end = (int(match[i]) for i in (3, 4, 5))
    values = _read_values(path)
    if not 1 <= train_end < begin <= end <= len(values):
        problem = (
            f"file name positions trainEnd={train_end}, anomBegin={begin}, anomEnd={end} do not satisfy "
            f"1 <= trainEnd < anomBegin <= anomEnd <= {len(values)} (the number of values)"
        )
        raise DataFormatError(path, problem)
    labels = np.zeros(len(values), dtype=bool)
    # Positions 1..T in the name are values[0..T-1]; the anomaly end is inclusive.
    labels[begin - 1 : end] = True
    return AnomalySeries(id=series_id, name=name, values=values, train_end=train_end, labels=labels)


def _read_values(path: Path) -> np.ndarray:
    # Most files hold one value a line, some hold many whitespace-separated values on one line; split() reads both.
    try:
        text = path.read_text(encoding="ascii")
    except UnicodeDecodeError as e:
        raise DataFormatError(path, f"not a text file of numbers (byte {e.start} is not ASCII)") from None
    tokens = text.split()
    if not tokens:
        raise DataFormatError(path, "file is empty (expected numbers separated by whitespace)")
    try:
        return np.array(tokens, dtype=np.float32)
    except ValueError:
        pass
    # Slow path only on failure: parse line by line to name the line of the bad value.
    for number, line in enumerate(text.splitlines(), start=1):
        parse_floats(line.split(), source=str(path), line=number)
    raise AssertionError("_read_values: numpy refused values that parse line by line")
