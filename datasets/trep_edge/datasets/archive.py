"""Read the daemon's telemetry archive (``runtime/trep_edge/runtime/service/archive.py``) back as series, for retraining and promotion.

Each stream becomes one or more series on the archive's step grid (step ``k = floor(timestamp / period + 0.5)``,
the daemon's own rule): steps without a reading are NaN, a gap longer than ``max_gap`` steps starts a new
series, two readings of one step keep the later. Channels come from the parts' headers, in the order asked for
(default: the newest part's, i.e. the running model's card order); a channel a part lacks is NaN there.

Alert ranges come from the daemon's alert messages (the archive's ``DAY/alerts.jsonl``, or any JSONL file of
messages captured from the alerts topic): an episode excludes ``[window_start of its raise, timestamp of its
clear]`` of its stream, to the end of the data when it never cleared. numpy and stdlib only.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from trep_edge.datasets.errors import DataFormatError

ARCHIVE_FORMAT = "trep-edge-archive/1"
ALERTS_FILE = "alerts.jsonl"
PART_PATTERN = re.compile(r"^part-(\d+)\.csv\.gz$")
DAY_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}$")
DEFAULT_MAX_GAP = 1000


@dataclass
class ArchivedSeries:
    """One stream's readings on the step grid: ``values [T, C]`` (NaN = missing), ``timestamps [T]`` of each step."""

    stream: str
    channels: list[str]
    timestamps: np.ndarray
    values: np.ndarray


def is_archive(path: str | Path) -> bool:
    """True for a folder holding ``YYYY-MM-DD/part-NNNN.csv.gz`` files."""
    return Path(path).is_dir() and bool(archive_parts(path))


def archive_parts(root: str | Path) -> list[Path]:
    """The parts of an archive, oldest first (day folder, then part number); none for a missing folder."""
    found = [p for p in Path(root).glob("*/part-*.csv.gz") if PART_PATTERN.match(p.name) and DAY_PATTERN.match(p.parent.name)]
    return sorted(found, key=lambda p: (p.parent.name, int(PART_PATTERN.match(p.name)[1])))


def _complete_lines(path: Path) -> Iterator[str]:
    """The lines of a gzip part; a part cut short by a crash yields every complete line it holds."""
    with open(path, "rb") as fh:
        data = fh.read()
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)  # one gzip member; several when a part was appended to
        try:
            out += inflater.decompress(data)
        except zlib.error as exc:
            raise DataFormatError(path, f"not a gzip archive part ({exc})") from None
        if not inflater.eof:
            break  # truncated member: keep what inflated
        data = inflater.unused_data
    text = out.decode("utf-8", errors="replace")
    end = text.rfind("\n")
    yield from text[: end + 1].splitlines()


def read_part(path: Path) -> tuple[dict | None, list[list[str]]]:
    """One part: (header metadata, CSV rows without the column header); (None, []) for one just being opened."""
    lines = iter(_complete_lines(path))
    first = next(lines, None)
    if first is None:
        return None, []
    prefix = f"# {ARCHIVE_FORMAT} "
    if not first.startswith(prefix):
        raise DataFormatError(path, f"first line is not '{prefix}{{...}}': not a trep-edge archive part", 1)
    meta = json.loads(first[len(prefix) :])
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return meta, []
    expected = ["stream", "timestamp", *meta["channels"]]
    if rows[0] != expected:
        raise DataFormatError(path, f"column header {rows[0]} does not match its first line ({expected})", 2)
    return meta, rows[1:]


def read_alert_ranges(source: str | Path) -> dict[str, list[tuple[float, float]]]:
    """Stream → [(start, end)] time ranges of alert episodes, from an archive folder or a JSONL file of messages."""
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"alert messages {source} do not exist (an archive folder or a .jsonl file)")
    files = sorted(source.glob(f"*/{ALERTS_FILE}")) if source.is_dir() else [source]
    episodes: dict[tuple[str, str], list[float]] = {}
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
                key, state = (msg["stream"], msg["alert_id"]), msg["state"]
                start = msg.get("window_start") if msg.get("window_start") is not None else msg["timestamp"]
            except (ValueError, KeyError, TypeError) as exc:
                raise DataFormatError(path, f"not an alert message ({exc!r}): expected the daemon's alert JSON",
                                      number) from None
            span = episodes.setdefault(key, [math.inf, math.inf])
            span[0] = min(span[0], float(start))
            if state == "cleared":
                span[1] = float(msg["timestamp"])
    ranges: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (stream, _), (lo, hi) in episodes.items():
        ranges[stream].append((lo, hi))
    return dict(ranges)


def read_archive(
    root: str | Path,
    channels: list[str] | None = None,
    since: float | None = None,
    exclude: dict[str, list[tuple[float, float]]] | None = None,
    max_gap: int = DEFAULT_MAX_GAP,
) -> list[ArchivedSeries]:
    """Every stream's series of an archive, readings before ``since`` (epoch s) and in ``exclude`` ranges dropped."""
    parts = archive_parts(root)
    if not parts:
        raise DataFormatError(root, "no archive parts (expected DAY/part-NNNN.csv.gz, written with [archive] enabled)")
    read = [(m, r) for m, r in map(read_part, parts) if m is not None]
    if not read:
        raise DataFormatError(root, "no archived reading yet (its only part was just opened)")
    metas, rows_per_part = zip(*read)
    periods = {float(m["period"]) for m in metas}
    if len(periods) != 1:
        raise DataFormatError(root, f"parts were recorded with different step periods {sorted(periods)}: "
                                    "train on one period at a time (move the other days aside)")  # fmt: skip
    period = periods.pop()
    channels = list(channels or metas[-1]["channels"])
    readings: dict[str, list[tuple[float, np.ndarray]]] = defaultdict(list)
    for meta, rows in zip(metas, rows_per_part):
        columns = [meta["channels"].index(c) + 2 if c in meta["channels"] else None for c in channels]
        for row in rows:
            ts = float(row[1])
            if since is not None and ts < since:
                continue
            values = np.array([np.nan if i is None or row[i] == "" else float(row[i]) for i in columns], np.float64)
            readings[row[0]].append((ts, values))
    out = []
    for stream in sorted(readings):
        out.extend(_on_grid(stream, channels, readings[stream], period, (exclude or {}).get(stream, []), max_gap))
    return out


def latest_timestamp(series: list[ArchivedSeries]) -> float:
    """The newest reading's timestamp over all series (where "the last day" of an archive ends)."""
    return max(float(s.timestamps[-1]) for s in series)


def _on_grid(
    stream: str, channels: list[str], readings: list[tuple[float, np.ndarray]], period: float,
    exclude: list[tuple[float, float]], max_gap: int,
) -> list[ArchivedSeries]:  # fmt: skip
    stamps = np.array([ts for ts, _ in readings])
    values = np.stack([v for _, v in readings])
    for lo, hi in exclude:
        values[(stamps >= lo) & (stamps <= hi)] = np.nan
    steps = np.floor(stamps / period + 0.5).astype(np.int64)
    order = np.argsort(steps, kind="stable")  # stable: of two readings of one step the later wins below
    steps, values = steps[order], values[order]
    breaks = np.flatnonzero(np.diff(steps) > max_gap) + 1
    series = []
    for seg_steps, seg_values in zip(np.split(steps, breaks), np.split(values, breaks)):
        grid = np.full((seg_steps[-1] - seg_steps[0] + 1, len(channels)), np.nan, dtype=np.float64)
        grid[seg_steps - seg_steps[0]] = seg_values
        if np.isnan(grid).all():
            continue
        stamps_grid = (seg_steps[0] + np.arange(len(grid))) * period
        series.append(ArchivedSeries(stream, list(channels), stamps_grid, grid))
    return series
