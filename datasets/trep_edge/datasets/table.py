"""Read a CSV file with a header row into raw text cells, keeping each row's line number for error messages."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trep_edge.datasets.cells import is_number
from trep_edge.datasets.errors import DataFormatError


@dataclass
class Table:
    """A CSV file as text: stripped header names, stripped cells per row, and each row's 1-based line number."""

    source: str
    header: list[str]
    rows: list[list[str]]
    line_numbers: list[int]

    def column_index(self, name: str) -> int:
        """Return the position of column `name`, or raise DataFormatError listing the columns found."""
        try:
            return self.header.index(name)
        except ValueError:
            found = ", ".join(self.header)
            raise DataFormatError(self.source, f"missing column {name!r} (found {found})", 1) from None


def column_positions(
    names: Sequence[str], wanted: Sequence[str], source: str | os.PathLike[str], line: int | None = None
) -> list[int]:
    """Positions in ``names`` of the ``wanted`` columns, in the order asked; one that is absent is refused, naming
    the columns there are (``line``: where the names stand, 1 for a CSV header)."""
    names = list(names)
    missing = [w for w in wanted if w not in names]
    if missing:
        raise DataFormatError(source, f"column(s) {missing} not present; the sensor columns are {names}", line)
    return [names.index(w) for w in wanted]


def read_csv_table(path: str | os.PathLike[str]) -> Table:
    """Read a comma-separated UTF-8 file whose first line names the columns; blank lines are skipped."""
    source = str(path)
    rows, line_numbers = [], []
    # utf-8-sig drops the byte-order mark spreadsheet exports put before the first column name.
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            first = next(reader, None)
            if first is None:
                raise DataFormatError(source, "file is empty (expected a header row naming the columns)")
            header = [name.strip() for name in first]
            _check_header(header, source)
            for row in reader:
                if row:
                    rows.append([cell.strip() for cell in row])
                    line_numbers.append(reader.line_num)
        except UnicodeDecodeError as e:
            raise DataFormatError(source, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        except csv.Error as e:
            raise DataFormatError(source, f"not valid CSV ({e})", reader.line_num) from None
    if not rows:
        raise DataFormatError(source, "no data rows after the header")
    return Table(source, header, rows, line_numbers)


def _check_header(header: list[str], source: str) -> None:
    if not any(header):
        raise DataFormatError(source, "first line is blank, expected a header row naming the columns", 1)
    # A first line of numbers means the header is missing; reading on would silently drop a data row.
    if all(is_number(name) for name in header):
        raise DataFormatError(source, "no header row: the first line holds numbers, expected column names", 1)
    for i, name in enumerate(header):
        if not name:
            raise DataFormatError(source, f"header column {i + 1} has no name", 1)
        if name in header[:i]:
            raise DataFormatError(source, f"duplicate column name {name!r} in the header", 1)
