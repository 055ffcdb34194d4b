"""Load the Yahoo S5 anomaly benchmark (Webscope, not redistributable) from its official folder layout.

A1Benchmark/real_<k>.csv and A2Benchmark/synthetic_<k>.csv have columns timestamp,value,is_anomaly;
A3Benchmark/A3Benchmark-TS<k>.csv and A4Benchmark/A4Benchmark-TS<k>.csv have timestamps,value,anomaly,changepoint,
trend,noise,seasonality1,seasonality2,seasonality3. The A3/A4 "_all.csv" summary files are not series and are skipped.
The root is the unpacked download folder that holds the four benchmark folders.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.datasets.cells import binary_labels, parse_matrix
from trep_edge.datasets.table import read_csv_table

# (folder, series file name with its number as group 1, label column) for each of the four benchmarks.
_BENCHMARKS = (
    ("A1Benchmark", re.compile(r"real_(\d+)\.csv"), "is_anomaly"),
    ("A2Benchmark", re.compile(r"synthetic_(\d+)\.csv"), "is_anomaly"),
    ("A3Benchmark", re.compile(r"A3Benchmark-TS(\d+)\.csv"), "anomaly"),
    ("A4Benchmark", re.compile(r"A4Benchmark-TS(\d+)\.csv"), "anomaly"),
)


@dataclass
class LabelledSeries:
    """A univariate series with point anomaly labels: values float32 [T], labels bool [T]."""

    name: str
    values: np.ndarray
    labels: np.ndarray


def load_yahoo(root: str | os.PathLike[str]) -> list[LabelledSeries]:
    """Load every series under root/A1Benchmark..A4Benchmark (those present), in benchmark then file-number order."""
    root = Path(root)
    folders = [root / folder for folder, _, _ in _BENCHMARKS]
    if not any(f.is_dir() for f in folders):
        raise FileNotFoundError(
            f"no Yahoo S5 benchmark folders (A1Benchmark ... A4Benchmark) under {root}; "
            "the data must be requested from Yahoo Webscope (dataset S5) and unpacked there"
        )
    series = []
    for folder, file_name, label_column in _BENCHMARKS:
        if not (root / folder).is_dir():
            continue
        numbered = [(int(m[1]), p) for p in (root / folder).iterdir() if (m := file_name.fullmatch(p.name))]
        # Numeric order (real_2 before real_10) so series positions follow the benchmark's numbering.
        for _, path in sorted(numbered):
            series.append(_load_file(path, label_column, name=f"{folder}/{path.stem}"))
    return series


def _load_file(path: Path, label_column: str, name: str) -> LabelledSeries:
    table = read_csv_table(path)
    value_at, label_at = table.column_index("value"), table.column_index(label_column)
    matrix = parse_matrix(
        table.rows, columns=table.header, source=table.source, line_numbers=table.line_numbers, missing={""}
    )
    labels = binary_labels(
        matrix[:, label_at], column=label_column, source=table.source, line_numbers=table.line_numbers
    )
    return LabelledSeries(name=name, values=matrix[:, value_at].astype(np.float32), labels=labels)
