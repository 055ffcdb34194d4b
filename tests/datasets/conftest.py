"""Fixtures for the loader tests: the shared data folder, skipped with a reason when it is absent."""

from pathlib import Path

import pytest

from trep_edge.datasets import data_root


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder, or skip: these tests read real slices of it."""
    try:
        return data_root()
    except FileNotFoundError as e:
        pytest.skip(f"real-data test needs the shared data folder: {e}")
