"""The time-index convention (TREP.md §4): what value of ``t`` the time-embedding sees.

One function serves training, export checks and the runtime, so a model never meets a ``t`` at inference that
it could not have met in training. The convention is stored in the model card as a string.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimeIndex:
    """A parsed time-index convention: ``relative`` or ``periodic:P``.

    ``origin`` (periodic only) is the absolute step at which the model's cycle starts: a model trained on a file
    whose first row stood at epoch step ``S`` has ``origin = S mod P``, so a live reading at step ``s`` gets the phase
    its training row had. It is the model card's ``phase_origin``, not part of the convention's string.
    """

    kind: str
    period: int = 0
    origin: int = 0

    def __str__(self) -> str:
        return "relative" if self.kind == "relative" else f"periodic:{self.period}"


def parse_time_index(spec: str, origin: int = 0) -> TimeIndex:
    """Parse ``relative`` or ``periodic:P`` (P a positive integer), refusing anything else; ``origin`` as in
    ``TimeIndex`` (a relative convention has none, so it must be 0 there)."""
    spec = spec.strip()
    if spec == "relative":
        if origin:
            raise ValueError(f"a phase origin ({origin}) needs a periodic time index, not 'relative'")
        return TimeIndex("relative")
    if spec.startswith("periodic:"):
        try:
            period = int(spec.split(":", 1)[1])
        except ValueError:
            period = 0
        if period > 0:
            if not 0 <= origin < period:
                raise ValueError(f"phase origin {origin} is outside 0..{period - 1} of time index {spec!r}")
            return TimeIndex("periodic", period, int(origin))
    raise ValueError(f"time index {spec!r} is not understood: use 'relative' or 'periodic:P' with P a positive integer")


def time_index(
    convention: TimeIndex | str,
    start: np.ndarray | int,
    length: int,
    origin: np.ndarray | int | None = None,
) -> np.ndarray:
    """Return ``t`` (float32, ``[batch, length]``) for steps ``start .. start+length-1`` (absolute indices).

    ``relative``: t = index − origin, where origin is the first index of the unit the encoder sees as one
    sequence (the window at inference, so t = 0..W−1; the training section, so both crops of a sample share
    t). ``periodic:P``: t = (index − convention.origin) mod P, computed in int64 so a stream of 10^8+ samples still
    gives a small, exact float32.
    """
    conv = parse_time_index(convention) if isinstance(convention, str) else convention
    starts = np.atleast_1d(np.asarray(start, dtype=np.int64))
    index = starts[:, None] + np.arange(length, dtype=np.int64)[None, :]
    if conv.kind == "relative":
        base = starts if origin is None else np.atleast_1d(np.asarray(origin, dtype=np.int64))
        return (index - base[:, None]).astype(np.float32)
    return ((index - conv.origin) % conv.period).astype(np.float32)
