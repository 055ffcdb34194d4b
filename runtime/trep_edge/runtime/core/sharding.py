"""Which shard of a scaled-out deployment owns a stream.

A deployment of N daemons (``trep-edge run --shard i/N``, i = 0..N-1) subscribes every daemon to the same topics;
each scores only the streams it owns and skips the others before they reach its windows. Ownership is

    zlib.crc32(stream_id.encode("utf-8")) % N == i

CRC-32 (IEEE 802.3, the one of zip, gzip and PNG) is stable across processes, machines, Python versions and
languages (Go ``hash/crc32.ChecksumIEEE``, Java ``java.util.zip.CRC32``, Node ``zlib.crc32``), unlike Python's
salted ``hash()``; a dispatcher or dashboard outside this package can compute the owner of a stream the same way.
State is keyed by stream id, so changing N moves each stream's state to its new owner (``runtime/trep_edge/runtime/service/reshard.py``).
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")

LANE_SEPARATOR = "\x1f"
"""Joins a stream id and a channel into the name of one lane of a channel-independent model (``monitor.py``); a
control character, so never part of a valid stream id. A lane belongs to the shard of its stream."""


def shard_of(stream: str, count: int) -> int:
    """The index of the shard, out of ``count``, that owns ``stream`` (or the lane ``stream + LANE_SEPARATOR + ...``)."""
    if count < 1:
        raise ValueError(f"the number of shards must be >= 1, got {count}")
    return zlib.crc32(stream.split(LANE_SEPARATOR, 1)[0].encode("utf-8")) % count


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: owns the streams ``shard_of`` assigns to it (``0/1`` owns everything)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: need 0 <= i < N with N >= 1, e.g. 0/3, 1/3, 2/3")

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"i/N"`` (as in ``--shard 1/3``) to a Shard; ValueError naming the expected form otherwise."""
        match = _SHARD.match(text)
        if match is None:
            raise ValueError(f"shard must look like i/N (this daemon's index, the number of shards), got {text!r}")
        return cls(int(match[1]), int(match[2]))

    def owns(self, stream: str) -> bool:
        """True when this shard scores ``stream``."""
        return self.count == 1 or shard_of(stream, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"
