"""Load ETT-style CSV files (date column plus numeric channels) and other CSVs with a header into a Series."""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cells import is_number, parse_matrix
from .errors import DataFormatError
from .table import Table, read_csv_table


@dataclass
class Series:
    """A multichannel series read from a CSV file.

    values: float32 [T, C], NaN where a cell was empty.
    channels: the C column names, in file order (the timestamp column excluded).
    timestamps: datetime64[s] [T] when the first column holds ISO 8601 date-times, else None.
    name: the file name without its extension.

    In the MIMIC-II numerics (icu_vitals/s00001_numerics/*_decoded.csv) an empty cell is missing and a 0 means
    "sensor not connected"; load those with `zero_as_missing` set to the vital-sign channels so both become NaN.
    """

    values: np.ndarray
    channels: list[str]
    timestamps: np.ndarray | None
    name: str


def load_csv(path: str | os.PathLike[str], zero_as_missing: bool | Collection[str] = False) -> Series:
    """Load a CSV with a header; a first column of ISO date-times becomes the timestamps, the rest float32 values.

    zero_as_missing: True turns every 0 into NaN; a collection of channel names does it for those channels only
    (e.g. the sensor columns of a file whose first column is a minute counter starting at 0).
    """
    table = read_csv_table(path)
    has_time = _first_column_is_datetime(table)
    channels = table.header[1:] if has_time else table.header
    rows = [row[1:] for row in table.rows] if has_time else table.rows
    # Row lengths are checked on the full rows first so a short row is reported as such, not as a bad cell.
    _check_row_lengths(table)
    values = parse_matrix(
        rows, columns=channels, source=table.source, line_numbers=table.line_numbers, missing={""}
    ).astype(np.float32)
    timestamps = _parse_timestamps(table) if has_time else None
    _zeros_to_nan(values, channels, zero_as_missing)
    return Series(values=values, channels=list(channels), timestamps=timestamps, name=Path(path).stem)


def _first_column_is_datetime(table: Table) -> bool:
    first = table.rows[0][0]
    if is_number(first):
        return False
    try:
        np.datetime64(first, "s")
    except ValueError:
        return False
    return True


def _check_row_lengths(table: Table) -> None:
    width = len(table.header)
    for row, line in zip(table.rows, table.line_numbers):
        if len(row) != width:
            raise DataFormatError(table.source, f"expected {width} columns, found {len(row)}", line)


def _parse_timestamps(table: Table) -> np.ndarray:
    cells = [row[0] for row in table.rows]
    try:
        return np.array(cells, dtype="datetime64[s]")
    except ValueError:
        pass
    # Slow path only on failure: find the first cell numpy refuses and report its line.
    for cell, line in zip(cells, table.line_numbers):
        try:
            np.datetime64(cell, "s")
        except ValueError:
            problem = f"column {table.header[0]!r} value {cell!r} is not an ISO 8601 date-time"
            raise DataFormatError(table.source, problem, line) from None
    raise AssertionError("_parse_timestamps: numpy refused cells that parse one by one")


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
