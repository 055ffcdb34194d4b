"""Assertions shared by the loader tests."""

from pathlib import Path

import pytest

from trep_edge.datasets import DataFormatError


def require(path: Path) -> Path:
    """Skip the calling test when one file of the shared data folder is missing."""
    if not path.exists():
        pytest.skip(f"{path} is not in the shared data folder")
    return path


def assert_names(error: pytest.ExceptionInfo[DataFormatError], file_name: str, line: int | None, problem: str) -> None:
    """Check a DataFormatError message names the file, the line (when given) and the problem."""
    message = str(error.value)
    assert file_name in message
    if line is not None:
        assert f"line {line}:" in message
        assert error.value.line == line
    assert problem in message


def write(folder: Path, name: str, text: str) -> Path:
    """Write `text` to folder/name and return the path."""
    path = folder / name
    path.write_text(text)
    return path
