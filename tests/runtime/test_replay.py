"""The sensor simulator: dataset loading, the JSON it publishes, pacing, and the ``trep-edge replay`` command."""
from __future__ import annotations

import math
import subprocess
import sys
import time

import numpy as np
import pytest
from broker import broker, collectors  # noqa: F401 - fixtures

from trep_edge.datasets.paths import data_root
from trep_edge.runtime.service.payloads import parse_payload
from trep_edge.runtime.service.replay import (
    Publisher,
    RecordedSeries,
    load_series,
    parse_rename,
    reading_payload,
    replay,
    topic_for,
)

UCR = "UCR_Anomaly/135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"
PHYSIONET = "PhysioNet2019_sepsis/training_setB.tar.gz"


def _data(spec: str):
    try:
        path = data_root() / spec
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def test_ucr_anomaly_file_is_one_labelled_stream():
    (s,) = load_series(_data(UCR))
    assert s.stream == "ucr135" and s.channels == ["value"] and s.values.shape == (7501, 1)
    assert np.flatnonzero(s.labels).tolist() == list(range(4186, 4199))


def test_physionet_patients_become_beds_with_renamed_vitals():
    beds = load_series(_data(PHYSIONET), rename=parse_rename("O2Sat=SpO2,Resp=RESP"), max_series=3)
    assert [b.stream for b in beds] == ["bed001", "bed002", "bed003"]
    assert beds[0].channels == ["HR", "SpO2", "Temp", "SBP", "MAP", "DBP", "RESP"]
    assert all(b.values.shape[1] == 7 and len(b.labels) == len(b.values) for b in beds)
    assert np.isnan(beds[0].values).any()  # missing data everywhere: sent as null


def test_ett_csv_channels_can_be_picked():
    (s,) = load_series(_data("ETT/ETTh1.csv"), channels=["OT", "HUFL"])
    assert s.stream == "ETTh1" and s.channels == ["OT", "HUFL"] and s.values.shape[1] == 2
    with pytest.raises(ValueError, match="not present"):
        load_series(_data("ETT/ETTh1.csv"), channels=["nope"])
    with pytest.raises(ValueError, match=r"share the name\(s\) \['OT'\] \(\['OT', 'OT'\]\)"):
        load_series(_data("ETT/ETTh1.csv"), channels=["OT", "HUFL"], rename={"HUFL": "OT"})


def test_reading_payload_is_what_the_monitor_parses_back_exactly():
    row = np.array([72.123456789, np.nan, 97.5], dtype=np.float32)
    (reading,) = parse_payload(reading_payload(1e9 + 0.25, ["HR", "RESP", "SpO2"], row), "bed1",
                               ["HR", "RESP", "SpO2"], now=1e9)  # fmt: skip
    assert reading.timestamp == 1e9 + 0.25 and reading.stream == "bed1"
    assert np.float32(reading.values["HR"]) == row[0] and math.isnan(reading.values["RESP"])


def test_topic_template_needs_one_placeholder():
    assert topic_for("icu/{bed}/vitals", "bed7") == "icu/bed7/vitals"
    with pytest.raises(ValueError, match="exactly one"):
        topic_for("icu/vitals", "bed7")


def test_replay_publishes_every_reading_in_order_at_the_requested_rate(broker, collectors):
    out = collectors(broker.port, ["sim/#"])
    series = [RecordedSeries(f"s{k}", ["value"], np.arange(20, dtype=np.float32).reshape(-1, 1) + k) for k in range(3)]
    publisher = Publisher("127.0.0.1", broker.port)
    publisher.wait_connected()
    try:
        stats = replay(series, publisher, "sim/{stream}", rate=40.0, period=2.0, t0=1000.0)
    finally:
        publisher.close()
    assert stats.published == 60 and stats.unconfirmed == 0
    assert 19 / 40 <= stats.seconds < 19 / 40 + 1.0  # paced: 20 steps at 40 steps/s
    messages = out.wait_count("sim/", 60)
    for k in range(3):
        got = [m.json() for m in messages if m.topic == f"sim/s{k}"]
        assert [g["ts"] for g in got] == [1000.0 + 2.0 * i for i in range(20)]
        assert [g["values"]["value"] for g in got] == [float(i + k) for i in range(20)]


def test_replay_command_sends_physionet_beds(broker, collectors):
    _data(PHYSIONET)
    out = collectors(broker.port, ["icu/#"])
    cmd = [sys.executable, "-m", "trep_edge.cli", "replay", PHYSIONET, "--topic", "icu/{bed}/vitals", "--broker",
           broker.url, "--max-series", "2", "--limit", "5", "--rate", "0", "--channels", "HR,O2Sat",
           "--rename", "O2Sat=SpO2"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "published 10 readings of 2 stream(s)" in done.stdout
    assert "replaying 2 stream(s) x 5 steps" in done.stdout  # what --limit sends, not the stays' length
    messages = out.wait_count("icu/", 10)
    assert {m.topic for m in messages} == {"icu/bed001/vitals", "icu/bed002/vitals"}
    assert all(set(m.json()["values"]) == {"HR", "SpO2"} for m in messages)
    now = time.time()
    assert all(abs(m.json()["ts"] - now) < 60 for m in messages)  # timestamps start at the replay's wall clock
