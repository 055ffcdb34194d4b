"""Load ETT-style CSV files (date column plus numeric channels) and other CSVs with a header into a Series."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trep_edge.datasets.cells import binary_labels, parse_matrix
from trep_edge.datasets.errors import DataFormatError
from trep_edge.datasets.table import Table, column_positions, read_csv_table
from trep_edge.datasets.timestamps import is_time_column, parse_timestamps


@dataclass
class Series:
    """A multichannel series read from a CSV file.

    values: float64 [T, C] (``load_csv``'s ``dtype``), NaN where a cell was empty (a meter's total keeps its last
    digits).
    channels: the C column names, in file order (the timestamp column excluded).
    timestamps: UTC datetime64[ms] [T] when the first column holds timestamps (datasets/trep_edge/datasets/timestamps.py), else None.
    name: the file name without its extension.
    labels: bool [T] from a column named as in ``LABEL_COLUMNS`` (never a channel), else None.

    In the MIMIC-II numerics (icu_vitals/s00001_numerics/*_decoded.csv) an empty cell is missing and a 0 means
    "sensor not connected"; load those with `zero_as_missing` set to the vital-sign channels so both become NaN.
    """

    values: np.ndarray
    channels: list[str]
    timestamps: np.ndarray | None
    name: str
    labels: np.ndarray | None = None


MISSING_CELLS = frozenset({"", "null", "NULL", "Null", "NA", "N/A", "n/a", "None", "none", "-"})
"""Cells that spell a missing reading in exports from databases, historians and spreadsheets (``nan`` parses as a
number already): refusing the whole file over them made a user rewrite it before any model could read it."""

LABEL_COLUMNS = ("label", "is_anomaly", "anomaly")
"""Column names (any case) that hold 0/1 anomaly labels: a labelled export names its answer so, and fed to a model
as a sensor channel it would make the detector read the answer (``load_csv`` keeps it apart)."""


def load_csv(
    path: str | os.PathLike[str], zero_as_missing: bool | Collection[str] = False, only: Sequence[str] | None = None,
    dtype: type = np.float64,
) -> Series:
    """Load a CSV with a header; a first timestamp column becomes the timestamps, the rest float64 values.

    The format (accepted timestamps included) is ``CSV_FORMAT`` in datasets/trep_edge/datasets/timestamps.py.

    zero_as_missing: True turns every 0 into NaN; a collection of channel names does it for those channels only
    (e.g. the sensor columns of a file whose first column is a minute counter starting at 0).
    only: the channels to read, in this order; the other columns are not parsed, so a text column (a status, a
    unit) does not stop a file whose sensor columns are named.
    dtype: of the values; float32 for a fixed corpus built from the file since before readings kept float64, so
    that it stays the same corpus.
    """
    table = read_csv_table(path)
    has_time = is_time_column(table.header[0], table.rows[0][0])
    columns = table.header[1:] if has_time else table.header
    rows = [row[1:] for row in table.rows] if has_time else table.rows
    # Row lengths are checked on the full rows first so a short row is reported as such, not as a bad cell.
    _check_row_lengths(table)
    label_at = [i for i, name in enumerate(columns) if name.lower() in LABEL_COLUMNS]
    if len(label_at) > 1:
        raise DataFormatError(table.source, f"several label columns ({', '.join(columns[i] for i in label_at)}): "
                              "keep one, or rename the others if they are sensor channels", 1)  # fmt: skip
    sensor_at = [i for i in range(len(columns)) if i not in label_at]
    sensors = [columns[i] for i in sensor_at]
    keep = sensor_at if only is None else [sensor_at[i] for i in column_positions(sensors, only, table.source, 1)]
    if not keep and label_at:
        raise DataFormatError(table.source, f"no sensor channel: column {columns[label_at[0]]!r} holds anomaly "
                              "labels, not readings", 1)  # fmt: skip
    if not keep:
        raise DataFormatError(table.source, f"no sensor channel: the one column, {table.header[0]!r}, holds "
                              "timestamps; readings go in further columns, separated by commas, semicolons or "
                              "tabs", 1)  # fmt: skip
    read = keep + label_at
    try:
        matrix = parse_matrix([[row[i] for i in read] for row in rows], columns=[columns[i] for i in read],
                              source=table.source, line_numbers=table.line_numbers, missing=MISSING_CELLS)  # fmt: skip
    except DataFormatError as e:
        # Row lengths are checked above, so the one refusal left is a cell that is not a number. A text column (a
        # status, a unit) is common in historian exports: when the columns were not named, say how to leave it out.
        if only is not None:
            raise
        raise DataFormatError(table.source, f"{e.problem}; if it is not a sensor column, name the sensor columns "
                              "to read (--channels)", e.line) from None  # fmt: skip
    labels = None
    if label_at:
        labels = binary_labels(matrix[:, -1], column=columns[label_at[0]], source=table.source,
                               line_numbers=table.line_numbers)  # fmt: skip
    channels = [columns[i] for i in keep]
    values = matrix[:, : len(keep)].astype(dtype)
    timestamps = None
    if has_time:
        cells = [row[0] for row in table.rows]
        timestamps = parse_timestamps(table.header[0], cells, table.source, table.line_numbers)
        _check_oldest_first(timestamps, table)
    _zeros_to_nan(values, channels, zero_as_missing)
    return Series(values=values, channels=channels, timestamps=timestamps, name=Path(path).stem, labels=labels)


def _check_oldest_first(timestamps: np.ndarray, table: Table) -> None:
    """Refuse a file whose rows mostly run back in time (an export newest first): read as it stands, every series
    would be trained and scored backwards. A few steps back (a clock set back an hour in autumn) are let through."""
    back = np.flatnonzero(np.diff(timestamps) < np.timedelta64(0, "ms"))
    if len(back) * 2 > len(timestamps) - 1 > 0:
        raise DataFormatError(table.source, f"timestamps run back in time on {len(back)} of {len(timestamps) - 1} "
                              "rows (newest first?): sort the rows oldest first", table.line_numbers[back[0] + 1])


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
