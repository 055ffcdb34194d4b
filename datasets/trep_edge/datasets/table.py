"""Read a CSV file with a header row into raw text cells, keeping each row's line number for error messages."""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trep_edge.datasets.cells import is_number
from trep_edge.datasets.errors import DataFormatError
from trep_edge.datasets.timestamps import is_timestamp


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


DELIMITERS = (",", ";", "\t")
"""Cell separators a header line may use: a comma, or where it has none a semicolon (spreadsheet exports in locales
whose decimal mark is a comma) or a tab."""

_DECIMAL_COMMA = re.compile(r"^[+-]?\d*,\d+(?:[eE][+-]?\d+)?$")


def read_csv_table(path: str | os.PathLike[str]) -> Table:
    """Read a UTF-8 CSV file whose first line names the columns; blank and whitespace-only lines are skipped.

    The separator is the first of ``DELIMITERS`` the header line holds. In a semicolon-separated file a number
    written with a decimal comma (``12,5``) reads as ``12.5``: such exports come from spreadsheets in most of
    Europe, and refusing them named only a column count. A trailing separator on every line (an empty last
    column) is dropped."""
    source = str(path)
    rows, line_numbers = [], []
    # utf-8-sig drops the byte-order mark spreadsheet exports put before the first column name.
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        try:
            lines = f.readlines()
            delimiter = _delimiter(lines[0] if lines else "")
            reader = csv.reader(lines, delimiter=delimiter)
            first = next(reader, None)
            if first is None:
                raise DataFormatError(source, "file is empty (expected a header row naming the columns)")
            header = [name.strip() for name in first]
            trailing = len(header) > 1 and not header[-1]
            if trailing:  # a trailing separator: the last "column" has no name; its cells must be empty too
                header.pop()
            _check_header(header, source)
            for row in reader:
                cells = [cell.strip() for cell in row]
                if not any(cells) and len(cells) <= 1:
                    continue  # a blank or whitespace-only line, not a reading
                if trailing and len(cells) == len(header) + 1 and not cells[-1]:
                    cells.pop()
                if delimiter == ";":
                    cells = [c.replace(",", ".") if _DECIMAL_COMMA.match(c) else c for c in cells]
                rows.append(cells)
                line_numbers.append(reader.line_num)
        except UnicodeDecodeError as e:
            raise DataFormatError(source, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        except csv.Error as e:
            raise DataFormatError(source, f"not valid CSV ({e})", reader.line_num) from None
    if not rows:
        raise DataFormatError(source, "no data rows after the header")
    return Table(source, header, rows, line_numbers)


def _delimiter(line: str) -> str:
    """The separator of a header ``line``: the first of ``DELIMITERS`` it holds (a comma when it holds none)."""
    return next((d for d in DELIMITERS if d in line), ",")


def _check_header(header: list[str], source: str) -> None:
    if not any(header):
        raise DataFormatError(source, "first line is blank, expected a header row naming the columns", 1)
    # A first line of numbers (after a timestamp, perhaps) means the header is missing; reading on would silently
    # drop a data row and name a channel after a reading.
    if all(is_number(name) for name in header[1:]) and (is_number(header[0]) or is_timestamp(header[0])):
        raise DataFormatError(source, "no header row: the first line holds readings, expected column names "
                              "(add a first line such as timestamp,value)", 1)  # fmt: skip
    for i, name in enumerate(header):
        if not name:
            raise DataFormatError(source, f"header column {i + 1} has no name", 1)
        if name in header[:i]:
            raise DataFormatError(source, f"duplicate column name {name!r} in the header", 1)
