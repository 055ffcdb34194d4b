"""Recognise and parse the timestamp column of a sensor CSV: ISO 8601 date-times or epoch seconds / milliseconds.

The accepted forms are listed once, in ``CSV_FORMAT``, which ``trep-edge train --help`` prints for pip users.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

import numpy as np

from trep_edge.datasets.cells import is_number
from trep_edge.datasets.errors import DataFormatError

CSV_FORMAT = (
    "CSV format: a header row naming the columns, then one row per reading; cells separated by commas, or by "
    "semicolons (then 12,5 reads as 12.5) or tabs where the header holds no comma. The first column may be a "
    "timestamp: ISO 8601 date-times (2024-05-01T12:00:00Z, 2024-05-01 12:00:00.5, 2024-05-01T14:00:00+02:00, "
    "2024-05-01; zone-less times are taken as UTC), or, in a column named time, timestamp, datetime, date, ts or "
    "epoch (optionally with a unit such as timestamp_ms or time[s]; also any name holding one of those words or "
    "unix, such as unix_time_ms, over values in the epoch range), epoch seconds (1714564800) or epoch milliseconds "
    "(1714564800000; a ms unit in the name forces milliseconds). A column named label, is_anomaly or "
    "anomaly holds 0/1 anomaly labels and is never a sensor channel (trep-edge score reports it beside the scores). "
    "Every other column is a numeric sensor channel; empty cells and null, NULL, NA, N/A, None and - are missing "
    "readings; --channels names the ones to read and leaves the rest (text columns included) unread. Other date "
    "formats (e.g. 05/01/2024) are refused."
)

ACCEPTED = (
    "accepted: ISO 8601 date-times such as 2024-05-01T12:00:00Z or 2024-05-01 12:00:00.5, "
    "epoch seconds such as 1714564800, epoch milliseconds such as 1714564800000"
)

_TIME_NAME = re.compile(r"^(time|timestamp|datetime|date|ts|epoch)(?:[ _\-]?(?:\[(s|ms)\]|\((s|ms)\)|(s|ms)))?$", re.I)
# Epoch values between these bounds (1973..5138 in either unit) are read as seconds or milliseconds; anything
# smaller is a counter or an index, not a time.
_EPOCH_S = (1e8, 1e11)
_EPOCH_MS = (1e11, 1e14)


_TIME_WORDS = frozenset({"time", "timestamp", "datetime", "date", "ts", "epoch", "unix"})
_MS_WORDS = frozenset({"ms", "millis", "msec", "milliseconds"})


def is_time_column(name: str, first_cell: str) -> bool:
    """Whether a first column is a timestamp column: a non-numeric first cell, a time-like name over numbers, or a
    name with a time word in it (``unix_time_ms``, ``Event Time``) over a number in the epoch range. Read as a sensor,
    such a column was rounded to float32 and alerted on as one."""
    if not is_number(first_cell) or _TIME_NAME.match(name) is not None:
        return True
    return bool(_TIME_WORDS & _words(name)) and _EPOCH_S[0] <= abs(float(first_cell)) < _EPOCH_MS[1]


def is_timestamp(cell: str) -> bool:
    """Whether a cell is an ISO 8601 date-time (the text form ``parse_timestamps`` accepts)."""
    try:
        datetime.fromisoformat(cell)
    except ValueError:
        return False
    return True


def _words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def parse_timestamps(name: str, cells: list[str], source: str, line_numbers: list[int]) -> np.ndarray:
    """The column as UTC datetime64[ms]; raise DataFormatError naming the cell and the accepted forms if one fails."""
    if is_number(cells[0]):
        return _parse_epoch(name, cells, source, line_numbers)
    out = np.empty(len(cells), dtype="datetime64[ms]")
    for i, (cell, line) in enumerate(zip(cells, line_numbers)):
        out[i] = _parse_iso(name, cell, source, line)
    return out


def _parse_iso(name: str, cell: str, source: str, line: int) -> np.datetime64:
    try:
        moment = datetime.fromisoformat(cell)
    except ValueError:
        problem = f"column {name!r} value {cell!r} is not a recognised timestamp ({ACCEPTED})"
        raise DataFormatError(source, problem, line) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return np.datetime64(moment, "ms")


def _parse_epoch(name: str, cells: list[str], source: str, line_numbers: list[int]) -> np.ndarray:
    try:
        values = np.array(cells, dtype=np.float64)
    except ValueError:
        bad = next(i for i, c in enumerate(cells) if not is_number(c))
        problem = f"column {name!r} value {cells[bad]!r} is not a recognised timestamp ({ACCEPTED})"
        raise DataFormatError(source, problem, line_numbers[bad]) from None
    match = _TIME_NAME.match(name)
    unit = next((g for g in match.groups()[1:] if g), None) if match else "ms" if _MS_WORDS & _words(name) else None
    low, high = _EPOCH_MS if unit == "ms" or (unit is None and values[0] >= _EPOCH_MS[0]) else _EPOCH_S
    outside = np.flatnonzero(~((values >= low) & (values < high)))
    if outside.size:
        i = int(outside[0])
        problem = (f"column {name!r} value {cells[i]!r} is not a recognised timestamp: epoch "
                   f"{'milliseconds' if low == _EPOCH_MS[0] else 'seconds'} lie between {low:.0e} and {high:.0e} "
                   f"({ACCEPTED})")  # fmt: skip
        raise DataFormatError(source, problem, line_numbers[i])
    millis = values if low == _EPOCH_MS[0] else values * 1000.0
    return np.round(millis).astype(np.int64).astype("datetime64[ms]")


def median_interval(timestamps: np.ndarray) -> float:
    """The typical seconds between consecutive readings (the median positive interval): a recording's sampling period
    when nobody states it; gaps and repeated times do not move a median."""
    steps = np.diff(np.asarray(timestamps, dtype=np.float64))
    steps = steps[steps > 0]
    if not steps.size:
        raise ValueError("the timestamps never advance, so they give no sampling period: set one with --period")
    return float(np.median(steps))
