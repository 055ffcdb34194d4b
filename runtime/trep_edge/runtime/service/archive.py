"""The telemetry archive: every accepted reading recorded to rolling gzip CSV parts, for retraining.

Layout (read back by ``trep_edge.datasets.archive``)::

    ARCHIVE/2026-11-22/part-0000.csv.gz   one part per rollover (size or time bound, UTC midnight, model swap)
    ARCHIVE/2026-11-22/alerts.jsonl       the daemon's alert state changes, one JSON message per line

A part is one gzip member: a ``# trep-edge-archive/1 {json}`` line (channels, model name and sha256, the step
period), the CSV header ``stream,timestamp,<channel>...``, then one row per accepted reading (empty cell =
channel missing). Why gzip CSV and not Parquet: the edge box has numpy, onnxruntime and paho-mqtt only, and a
line format survives a crash: the open part is flushed every ``flush_seconds``, so a killed daemon loses at most
that much, and the reader keeps every complete line of a truncated member.

Recording never blocks scoring: the scoring loop only puts readings on a bounded queue; when it is full the
reading is counted in ``trep_edge_archive_dropped_total`` and not recorded. A thread of its own writes, rolls
over and enforces the retention limits (oldest parts deleted first).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import math
import queue
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trep_edge.datasets.archive import ALERTS_FILE, ARCHIVE_FORMAT, PART_PATTERN, archive_parts

from trep_edge.runtime.service.config import ArchiveConfig
from trep_edge.runtime.service.http_status import Metrics

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class ArchiveHeader:
    """What every row of a part means: its channels in column order, the model that scored them, the step period."""

    channels: tuple[str, ...]
    model: str
    model_sha256: str
    period: float

    def line(self) -> str:
        """The first line of a part."""
        meta = {"channels": list(self.channels), "model": self.model, "model_sha256": self.model_sha256,
                "period": self.period}  # fmt: skip
        return f"# {ARCHIVE_FORMAT} {json.dumps(meta, sort_keys=True)}\n"


def declare_archive_metrics(metrics: Metrics) -> None:
    """Register the archive's metric families on the daemon's registry."""
    metrics.declare("trep_edge_archived_total", "counter", "readings written to the telemetry archive")
    metrics.declare("trep_edge_archive_dropped_total", "counter",
                    "readings not archived because the archive queue was full (scoring never waits)")  # fmt: skip
    metrics.declare("trep_edge_archive_errors_total", "counter", "archive write failures (logged)")
    metrics.declare("trep_edge_archive_bytes", "gauge", "bytes of the archive on disk after the last retention pass")


def _cell(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else repr(float(value))


class _Part:
    """One open part: a gzip member behind a CSV writer, with its size and age."""

    def __init__(self, path: Path, header: ArchiveHeader, opened: float) -> None:
        self.path = path
        self.header = header
        self.opened = opened
        self.raw = open(path, "xb")
        self.text = io.TextIOWrapper(gzip.GzipFile(fileobj=self.raw, mode="wb"), encoding="utf-8", newline="")
        self.text.write(header.line())
        self.csv = csv.writer(self.text, lineterminator="\n")
        self.csv.writerow(["stream", "timestamp", *header.channels])
        self.flush()  # a reader sees a valid part from the start

    def write(self, stream: str, timestamp: float, values: dict[str, float]) -> None:
        self.csv.writerow([stream, repr(float(timestamp)), *(_cell(values.get(c, math.nan)) for c in self.header.channels)])

    def flush(self) -> None:
        self.text.flush()  # a sync flush of the gzip stream: every complete line so far is readable
        self.raw.flush()

    @property
    def bytes(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.text.close()  # writes the gzip trailer: the member is complete
        self.raw.close()


class ArchiveRecorder:
    """Records readings on its own thread; ``record`` never blocks (a full queue drops and counts the reading)."""

    def __init__(self, config: ArchiveConfig, metrics: Metrics, clock: Callable[[], float] = time.time) -> None:
        self.root = Path(config.path)
        self.limits = config
        self.metrics = metrics
        self.clock = clock
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=config.queue_size)
        self._header: ArchiveHeader | None = None
        self._part: _Part | None = None
        self._last_flush = 0.0
        self._thread: threading.Thread | None = None

    # -- the scoring thread's side ---------------------------------------------------------------------------------
    def start(self, header: ArchiveHeader) -> None:
        """Create the folder, apply retention once and start the writer thread."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._header = header
        self._thread = threading.Thread(target=self._run, name="archive", daemon=True)
        self._thread.start()

    def set_header(self, header: ArchiveHeader) -> None:
        """After a model swap: close the open part; the next reading starts one with the new channels and sha256."""
        self._put(("header", header), critical=True)

    def record(self, stream: str, timestamp: float, values: dict[str, float]) -> None:
        """Queue one accepted reading for the archive, or count it as dropped when the queue is full."""
        self._put(("reading", (stream, timestamp, values)))

    def record_alert(self, message: dict[str, Any]) -> None:
        """Queue one alert message (the JSON the daemon published) for the day's ``alerts.jsonl``."""
        self._put(("alert", message), critical=True)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, close the open part (a complete gzip member) and stop the thread."""
        if self._thread is None:
            return
        self._queue.put(("stop", None))  # blocking on purpose: shutdown waits for the writer, scoring is over
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("archive writer did not finish within %.0f s; the open part may lack its last lines", timeout)
        self._thread = None

    def _put(self, item: tuple[str, Any], critical: bool = False) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            if item[0] == "reading":
                self.metrics.inc("trep_edge_archive_dropped_total")
            elif critical:
                self.metrics.inc("trep_edge_archive_errors_total")
                log.error("archive queue full: lost a %s record", item[0])

    # -- the writer thread ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        self._guard(self._retain)
        while True:
            try:
                kind, payload = self._queue.get(timeout=self.limits.flush_seconds)
            except queue.Empty:
                kind, payload = "idle", None
            if kind == "stop":
                self._guard(self._close_part)
                return
            self._guard(lambda: self._handle(kind, payload))

    def _guard(self, action: Callable[[], None]) -> None:
        """A disk problem costs records, never the writer thread: count, log and carry on."""
        try:
            action()
        except Exception:
            self.metrics.inc("trep_edge_archive_errors_total")
            log.exception("archive write failed under %s", self.root)
            self._part = None  # start a fresh part next time rather than writing into a broken one

    def _handle(self, kind: str, payload: Any) -> None:
        now = self.clock()
        if kind == "reading":
            part = self._open_part(now)
            part.write(*payload)
            self.metrics.inc("trep_edge_archived_total")
        elif kind == "alert":
            with open(self._day_folder(now) / ALERTS_FILE, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(payload, sort_keys=True) + "\n")
        elif kind == "header":
            self._close_part()
            self._header = payload
        if self._part is not None and now - self._last_flush >= self.limits.flush_seconds:
            self._part.flush()
            self._last_flush = now

    def _day_folder(self, now: float) -> Path:
        folder = self.root / time.strftime("%Y-%m-%d", time.gmtime(now))
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _open_part(self, now: float) -> _Part:
        part, limits = self._part, self.limits
        if part is not None:
            same_day = part.path.parent.name == time.strftime("%Y-%m-%d", time.gmtime(now))
            if same_day and part.bytes < limits.max_part_bytes and now - part.opened < limits.max_part_seconds:
                return part
            self._close_part()
        folder = self._day_folder(now)
        numbers = [int(m[1]) for m in map(PART_PATTERN.match, (p.name for p in folder.iterdir())) if m]
        assert self._header is not None, "start() sets the header"
        self._part = _Part(folder / f"part-{max(numbers, default=-1) + 1:04d}.csv.gz", self._header, now)
        self._last_flush = now
        return self._part

    def _close_part(self) -> None:
        if self._part is None:
            return
        part, self._part = self._part, None
        part.close()
        self._retain()

    def _retain(self) -> None:
        """Delete the oldest closed parts while the archive is over its byte or age limit."""
        parts = [p for p in archive_parts(self.root) if self._part is None or p != self._part.path]
        sizes = {p: p.stat().st_size for p in parts}
        total = sum(sizes.values())
        oldest_kept = self.clock() - self.limits.max_age_days * 86400 if self.limits.max_age_days > 0 else -math.inf
        for p in parts:
            too_big = self.limits.max_total_bytes > 0 and total > self.limits.max_total_bytes
            if not too_big and p.stat().st_mtime >= oldest_kept:
                break
            p.unlink()
            total -= sizes[p]
            log.info("archive retention: deleted %s", p)
            if not any(PART_PATTERN.match(q.name) for q in p.parent.iterdir()):
                shutil.rmtree(p.parent)  # the day's alerts go with its last part
        self.metrics.set("trep_edge_archive_bytes", total)
