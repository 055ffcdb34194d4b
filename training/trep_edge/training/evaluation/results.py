"""The results file of an evaluation run: one JSON object of rows keyed ``task/dataset/variant``, written as it goes.

A row is written atomically as soon as it is finished, so an interrupted run keeps every finished row and a rerun
skips them (resumable per dataset and variant).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from trep_edge.runtime.service.atomic_file import write_atomically


class ResultsFile:
    """Rows of finished evaluations, persisted after every ``put``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
                raise ValueError(f"{self.path} is not a results file (expected a JSON object with 'rows')")
            self.rows = data["rows"]

    def has(self, key: str) -> bool:
        """Whether the row ``key`` is finished."""
        return key in self.rows

    def put(self, key: str, row: dict) -> None:
        """Record a finished row and rewrite the file atomically."""
        self.rows[key] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"rows": self.rows}, indent=1, sort_keys=True, default=_plain)
        write_atomically(self.path, lambda fh: fh.write(text.encode()))


def _plain(value: object) -> object:
    """numpy scalars and arrays as their Python equivalents."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
