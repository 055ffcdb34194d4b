"""Training data layout and contextual-consistency crops (TREP.md §3), all drawn from one numpy Generator.

Keeping every random draw of the data path in a single ``np.random.Generator`` makes a checkpoint that stores its
state resume the exact same batches and crops.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Sections:
    """Training data cut to at most ``max_train_length`` steps: ``x [M, L, C]`` and each section's start."""

    x: np.ndarray
    start: np.ndarray


def make_sections(x: np.ndarray, max_len: int) -> Sections:
    """Cut ``[N, T, C]`` series into sections of ≤ max_len (NaN-padding the last), dropping all-NaN sections."""
    if x.ndim != 3:
        raise ValueError(f"training data must be [series, time, channels], got shape {x.shape}")
    n, length, c = x.shape
    if length <= max_len:
        pieces, starts = x, np.zeros(n, dtype=np.int64)
    else:
        count = -(-length // max_len)
        padded = np.full((n, count * max_len, c), np.nan, dtype=np.float32)
        padded[:, :length] = x
        pieces = padded.reshape(n * count, max_len, c)
        starts = np.tile(np.arange(count, dtype=np.int64) * max_len, n)
    keep = ~np.isnan(pieces).all(axis=(1, 2))
    if not keep.any():
        raise ValueError("training data holds no observed value (every step is NaN)")
    return Sections(np.ascontiguousarray(pieces[keep], dtype=np.float32), starts[keep])


@dataclass
class CropPair:
    """Two overlapping views of a batch: absolute positions of each view's steps and the overlap length.

    View 1 ends with the overlap, view 2 begins with it: ``z1[:, -overlap:]`` and ``z2[:, :overlap]`` describe
    the same timesteps.
    """

    pos1: np.ndarray
    pos2: np.ndarray
    overlap: int


def draw_crops(rng: np.random.Generator, batch: int, length: int, temporal_unit: int = 0) -> CropPair:
    """Draw ``0 ≤ a1 ≤ a2 ≤ b1 ≤ b2 ≤ T`` (overlap ``[a2, b1)``) with a random shift per instance."""
    shortest = min(2 ** (temporal_unit + 1), length)
    overlap = int(rng.integers(shortest, length + 1))
    a2 = int(rng.integers(length - overlap + 1))
    b1 = a2 + overlap
    a1 = int(rng.integers(a2 + 1))
    b2 = int(rng.integers(b1, length + 1))
    shift = rng.integers(-a1, length - b2 + 1, size=batch)
    pos1 = shift[:, None] + np.arange(a1, b1)[None, :]
    pos2 = shift[:, None] + np.arange(a2, b2)[None, :]
    return CropPair(pos1, pos2, overlap)


def gather(x: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``x[rows[b], positions[b, k]]`` for every b, k (a per-row crop)."""
    return x[rows[:, None], positions]


def random_keep_mask(rng: np.random.Generator, shape: tuple[int, int], p_keep: float = 0.5) -> np.ndarray:
    """Bernoulli timestamp mask: True = keep."""
    return rng.random(shape) < p_keep
