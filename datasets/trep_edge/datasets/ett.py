"""Load ETT-style CSV files (date column plus numeric channels) and other CSVs with a header into a Series."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.datasets.cells import parse_matrix
from trep_edge.datasets.errors import DataFormatError
from trep_edge.datasets.table import Table, read_csv_table
from trep_edge.datasets.timestamps import is_time_column, parse_timestamps


@dataclass
class Series:
    """A multichannel series read from a CSV file.

    values: float32 [T, C], NaN where a cell was empty.
    channels: the C column names, in file order (the timestamp column excluded).
    timestamps: UTC datetime64[ms] [T] when the first column holds timestamps (datasets/trep_edge/datasets/timestamps.py), else None.
    name: the file name without its extension.

    In the MIMIC-II numerics (icu_vitals/s00001_numerics/*_decoded.csv) an empty cell is missing and a 0 means
    "sensor not connected"; load those with `zero_as_missing` set to the vital-sign channels so both become NaN.
    """

    values: np.ndarray
    channels: list[str]
    timestamps: np.ndarray | None
    name: str


def load_csv(path: str | os.PathLike[str], zero_as_missing: bool | Collection[str] = False) -> Series:
    """Load a CSV with a header; a first timestamp column becomes the timestamps, the rest float32 values.

    The format (accepted timestamps included) is ``CSV_FORMAT`` in datasets/trep_edge/datasets/timestamps.py.

    zero_as_missing: True turns every 0 into NaN; a collection of channel names does it for those channels only
    (e.g. the sensor columns of a file whose first column is a minute counter starting at 0).
    """
    table = read_csv_table(path)
    has_time = is_time_column(table.header[0], table.rows[0][0])
    channels = table.header[1:] if has_time else table.header
    rows = [row[1:] for row in table.rows] if has_time else table.rows
    # Row lengths are checked on the full rows first so a short row is reported as such, not as a bad cell.
    _check_row_lengths(table)
    values = parse_matrix(
        rows, columns=channels, source=table.source, line_numbers=table.line_numbers, missing={""}
    ).astype(np.float32)
    timestamps = None
    if has_time:
        cells = [row[0] for row in table.rows]
        timestamps = parse_timestamps(table.header[0], cells, table.source, table.line_numbers)
    _zeros_to_nan(values, channels, zero_as_missing)
    return Series(values=values, channels=list(channels), timestamps=timestamps, name=Path(path).stem)


def _check_row_lengths(table: Table) -> None:
    width = len(table.header)
    for row, line in zip(table.rows, table.line_numbers):
        if len(row) != width:
            raise DataFormatError(table.source, f"expected {width} columns, found {len(row)}", line)


def _zeros_to_nan(values: np.ndarray, channels: list[str], zero_as_missing: bool | Collection[str]) -> None:
    if zero_as_missing is True:
        selected = list(range(len(channels)))
    elif zero_as_missing is False:
        return
    else:
        names = [zero_as_missing] if isinstance(zero_as_missing, str) else list(zero_as_missing)
        unknown = [n for n in names if n not in channels]
        if unknown:
            raise ValueError(f"zero_as_missing names unknown channels {unknown}; the channels are {channels}")
        selected = [channels.index(n) for n in names]
    block = values[:, selected]
    block[block == 0] = np.nan
    values[:, selected] = block
