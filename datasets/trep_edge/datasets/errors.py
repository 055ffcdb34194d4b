"""The one exception every loader raises on bad file content."""

from __future__ import annotations

import os


class DataFormatError(ValueError):
    """A data file's content is malformed; the message names the file, the 1-based line and the problem."""

    def __init__(self, source: str | os.PathLike[str], problem: str, line: int | None = None) -> None:
        self.source = str(source)
        self.problem = problem
        self.line = line
        where = self.source if line is None else f"{self.source} line {line}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str, int | None]]:
        # The default pickling would call __init__ with the formatted message only; worker processes need all three.
        return (type(self), (self.source, self.problem, self.line))
