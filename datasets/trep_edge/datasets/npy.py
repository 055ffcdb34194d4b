"""Load numeric .npy arrays as [N, T, C] float32 batches of series."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from trep_edge.datasets.errors import DataFormatError

_MAGIC = b"\x93NUMPY"
_NUMERIC_KINDS = "iuf"


def load_npy(path: str | os.PathLike[str]) -> np.ndarray:
    """Load a .npy array of shape [T], [T, C] or [N, T, C] and return it as [N, T, C] floats: float32 if stored so,
    else float64 (an int64 counter or a float64 total keeps its last digits)."""
    path = Path(path)
    with path.open("rb") as f:
        # Checked up front because numpy reports any non-.npy file (an .npz, text) as "pickled data".
        if f.read(len(_MAGIC)) != _MAGIC:
            raise DataFormatError(path, "not a .npy file (it does not start with the \\x93NUMPY magic)")
    try:
        # allow_pickle=False: object arrays run code on load and never hold series.
        array = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise DataFormatError(path, f"unreadable .npy array ({e})") from None
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise DataFormatError(path, f"dtype {array.dtype} is not numeric (expected integer or float values)")
    if array.ndim not in (1, 2, 3):
        expected = "expected [T], [T, C] or [N, T, C]"
        raise DataFormatError(path, f"shape {array.shape} has {array.ndim} dimensions; {expected}")
    # [T] is one single-channel series, [T, C] one multichannel series.
    if array.ndim == 1:
        array = array[None, :, None]
    elif array.ndim == 2:
        array = array[None]
    return array.astype(np.float32 if array.dtype == np.float32 else np.float64, copy=False)
