"""One reading of one stream, the unit every part of the runtime passes on: payload parsers make it, the
monitor files it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reading:
    """One time point of one stream: channel name → value (NaN = missing), time in epoch seconds.

    ``disconnected``: the sensor said it is not connected (``mark_disconnected``); every value is missing.
    """

    stream: str
    timestamp: float
    values: dict[str, float]
    disconnected: bool = False
