"""Turn text cells into float arrays, fast when the data is clean and precise (file, line, cell) when it is not."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from trep_edge.datasets.errors import DataFormatError

_NAN = "nan"


def parse_floats(
    tokens: list[str], *, source: str, line: int, what: str = "", missing: Collection[str] = ()
) -> np.ndarray:
    """Parse one line's tokens to float64; tokens in `missing` become NaN; `what` names them in errors."""
    if missing:
        tokens = [_NAN if t in missing else t for t in tokens]
    try:
        return np.array(tokens, dtype=np.float64)
    except ValueError:
        bad = next(t for t in tokens if not is_number(t))
        subject = f"{what} value" if what else "value"
        raise DataFormatError(source, f"{subject} {bad!r} is not a number", line) from None


def parse_matrix(
    rows: list[list[str]],
    *,
    columns: Sequence[str],
    source: str,
    line_numbers: Sequence[int],
    missing: Collection[str] = (),
) -> np.ndarray:
    """Parse equal-length rows of text cells to a float64 [rows, columns] matrix; `missing` cells become NaN."""
    if missing:
        rows = [[_NAN if c in missing else c for c in row] for row in rows]
    try:
        matrix = np.array(rows, dtype=np.float64).reshape(len(rows), -1) if rows else np.empty((0, len(columns)))
    except ValueError:
        matrix = None
    if matrix is not None and matrix.shape[1] == len(columns):
        return matrix
    # Only the slow path looks at single cells, so clean files pay for one vectorised conversion.
    for row, line in zip(rows, line_numbers):
        if len(row) != len(columns):
            raise DataFormatError(source, f"expected {len(columns)} columns, found {len(row)}", line)
        for name, cell in zip(columns, row):
            if not is_number(cell):
                raise DataFormatError(source, f"column {name!r} value {cell!r} is not a number", line)
    raise AssertionError("parse_matrix: numpy refused rows that parse one by one")


def binary_labels(
    values: np.ndarray, *, column: str, source: str, line_numbers: Sequence[int]
) -> np.ndarray:
    """Check a label column holds only 0 and 1 and return it as bool."""
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        i = int(bad[0])
        raise DataFormatError(source, f"column {column!r} value {values[i]:g} is not 0 or 1", line_numbers[i])
    return values == 1


def is_number(text: str) -> bool:
    """Tell whether numpy parses `text` as a float (the same parser the fast paths use)."""
    try:
        np.float64(text)
    except ValueError:
        return False
    return True
