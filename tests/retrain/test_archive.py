"""The telemetry archive: recorded readings read back on the step grid; rollover, retention, crash tolerance."""
from __future__ import annotations

import gzip
import json
import math
import os
import time

import numpy as np
import pytest

from trep_edge.datasets.archive import archive_parts, read_alert_ranges, read_archive
from trep_edge.datasets.errors import DataFormatError
from trep_edge.runtime.service.archive import ArchiveHeader, ArchiveRecorder, declare_archive_metrics
from trep_edge.runtime.service.config import ArchiveConfig, ConfigError
from trep_edge.runtime.service.http_status import Metrics

HEADER = ArchiveHeader(("HR", "SpO2"), "m", "a" * 64, 1.0)
DAY = 86400.0


class Clock:
    """A settable wall clock for the recorder (rollover and retention depend on it)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _recorder(tmp_path, clock, **settings) -> tuple[ArchiveRecorder, Metrics]:
    metrics = Metrics()
    declare_archive_metrics(metrics)
    config = ArchiveConfig(enabled=True, path=str(tmp_path / "archive"), **settings)
    return ArchiveRecorder(config, metrics, clock=clock), metrics


def test_readings_come_back_per_stream_on_the_step_grid_with_gaps_as_nan(tmp_path):
    clock = Clock(1_700_000_000.0)
    rec, metrics = _recorder(tmp_path, clock)
    rec.start(HEADER)
    t0 = 1_700_000_000.0
    rec.record("bed1", t0, {"HR": 80.0, "SpO2": 97.0})
    rec.record("bed1", t0 + 1.1, {"HR": 81.0})  # step t0+1, SpO2 missing
    rec.record("bed1", t0 + 3, {"HR": 83.0, "SpO2": math.nan})  # step t0+2 has no reading at all
    rec.record("bed,2", t0, {"SpO2": 95.5})  # a comma in a stream id survives the CSV
    rec.record("meter", t0, {"HR": 12_345_678.9})  # a running total keeps its last digits for retraining
    rec.close()
    assert metrics.value("trep_edge_archived_total") == 5
    series = {s.stream: s for s in read_archive(tmp_path / "archive")}
    assert series["meter"].values[0, 0] == 12_345_678.9
    bed1 = series["bed1"]
    assert bed1.channels == ["HR", "SpO2"] and list(bed1.timestamps) == [t0, t0 + 1, t0 + 2, t0 + 3]
    np.testing.assert_array_equal(bed1.values, [[80, 97], [81, np.nan], [np.nan, np.nan], [83, np.nan]])
    np.testing.assert_array_equal(series["bed,2"].values, [[np.nan, 95.5]])
    # Channels in another order (a model with other channels): by name, missing ones NaN.
    (other,) = read_archive(tmp_path / "archive", channels=["Temp", "HR"], since=t0 + 0.5)
    np.testing.assert_array_equal(other.values, [[np.nan, 81], [np.nan, np.nan], [np.nan, 83]])


def test_parts_roll_over_by_time_and_day_and_old_parts_are_deleted(tmp_path):
    clock = Clock(10 * DAY + 100)
    rec, metrics = _recorder(tmp_path, clock, max_part_seconds=60, max_age_days=2, flush_seconds=0.05)
    rec.start(HEADER)
    for i in range(4):  # four parts: one per 61 s
        rec.record("s", clock.now, {"HR": float(i)})
        time.sleep(0.1)
        clock.now += 61
    clock.now = 11 * DAY + 1  # the next day: a new folder
    rec.record("s", clock.now, {"HR": 9.0})
    time.sleep(0.2)
    parts = archive_parts(tmp_path / "archive")
    assert [p.parent.name for p in parts] == ["1970-01-11"] * 4 + ["1970-01-12"]
    old = parts[:4]
    for p in old:  # make the first day's parts older than max_age_days
        os.utime(p, (clock.now - 3 * DAY, clock.now - 3 * DAY))
    rec.set_header(HEADER)  # closes the open part, which runs retention
    rec.close()
    left = archive_parts(tmp_path / "archive")
    assert left == parts[4:] and not (tmp_path / "archive" / "1970-01-11").exists()
    assert metrics.value("trep_edge_archive_bytes") == sum(p.stat().st_size for p in left)


def test_total_size_limit_deletes_oldest_parts_first(tmp_path):
    clock = Clock(1000.0)
    rec, _ = _recorder(tmp_path, clock, max_part_seconds=1, max_total_bytes=1)
    rec.start(HEADER)
    for i in range(3):
        rec.record("s", clock.now, {"HR": float(i)})
        time.sleep(0.05)
        clock.now += 2
    rec.close()
    assert [p.name for p in archive_parts(tmp_path / "archive")] == []  # every closed part is over a 1-byte budget


def test_a_crash_keeps_every_flushed_complete_line_of_the_open_part(tmp_path):
    clock = Clock(5000.0)
    rec, _ = _recorder(tmp_path, clock, flush_seconds=0.01)
    rec.start(HEADER)
    for i in range(50):
        rec.record("s", 5000.0 + i, {"HR": float(i)})
    time.sleep(0.3)
    clock.now += 1
    rec.record("s", 5050.0, {"HR": 50.0})  # triggers a flush of everything before it
    time.sleep(0.3)
    (part,) = archive_parts(tmp_path / "archive")
    crashed = tmp_path / "crashed" / part.parent.name
    crashed.mkdir(parents=True)
    data = part.read_bytes()  # the open part as a SIGKILL leaves it: no gzip trailer
    (crashed / part.name).write_bytes(data[:-3])  # and cut inside the last flushed block
    rec.close()
    (series,) = read_archive(tmp_path / "crashed")
    assert 40 <= len(series.values) <= 51 and series.values[0, 0] == 0  # complete lines only, in order
    with gzip.open(part, "rt") as fh:  # the cleanly closed part is an ordinary gzip file
        assert fh.readline().startswith("# trep-edge-archive/1 ")


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path):
    rec, metrics = _recorder(tmp_path, Clock(0.0), queue_size=3)  # not started: nothing drains the queue
    started = time.perf_counter()
    for i in range(10):
        rec.record("s", float(i), {"HR": 1.0})
    assert time.perf_counter() - started < 0.1
    assert metrics.value("trep_edge_archive_dropped_total") == 7


def test_alert_messages_become_excluded_ranges(tmp_path):
    alerts = tmp_path / "alerts.jsonl"
    messages = [
        {"stream": "a", "alert_id": "a-1", "state": "raised", "window_start": 100.0, "timestamp": 131.0},
        {"stream": "a", "alert_id": "a-1", "state": "cleared", "window_start": 110.0, "timestamp": 140.0},
        {"stream": "b", "alert_id": "b-1", "state": "raised", "window_start": 5.0, "timestamp": 36.0},
    ]
    alerts.write_text("\n".join(json.dumps(m) for m in messages) + "\n")
    assert read_alert_ranges(alerts) == {"a": [(100.0, 140.0)], "b": [(5.0, math.inf)]}
    alerts.write_text('{"stream": "a"}\n')
    with pytest.raises(DataFormatError, match="line 1: not an alert message"):
        read_alert_ranges(alerts)


def test_bad_archive_settings_and_folders_are_named():
    with pytest.raises(ConfigError, match="archive.queue_size"):
        ArchiveConfig(queue_size=0)
    with pytest.raises(DataFormatError, match="no archive parts"):
        read_archive("/nonexistent-archive")


def test_excluded_alert_ranges_become_missing_steps(tmp_path):
    clock = Clock(2000.0)
    rec, _ = _recorder(tmp_path, clock)
    rec.start(HEADER)
    for i in range(10):
        rec.record("s", 2000.0 + i, {"HR": float(i), "SpO2": 97.0})
    rec.close()
    (series,) = read_archive(tmp_path / "archive", exclude={"s": [(2003.0, 2005.0)], "other": [(0, 1e10)]})
    assert np.isnan(series.values[3:6]).all() and not np.isnan(series.values[[2, 6]]).any()
