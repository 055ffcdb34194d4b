"""Alert explanations (runtime/trep_edge/runtime/core/explain.py): each channel's contribution, the top channels, expected vs seen values.

The fault tests run the shipped models on 7-channel streams with a fault in one channel (never the first): the ICU
model (fixed-channel: occlusion) and the general model (channel-independent: its lanes' own surprise).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from trep_edge.runtime.core.alerts import AlertConfig
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.explain import explanation, expected_values, window_centre
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.preprocess import Normalisation, difference
from trep_edge.runtime.service.replay import RecordedSeries
from trep_edge.runtime.service.score_file import score_recording, write_csv
from trep_edge.runtime.core.windows import WindowConfig

from gates import GAUSSIAN_GATE

MODELS = Path(__file__).resolve().parents[2] / "models"
HOUR = 3600.0
VITALS = {"HR": (80, 3), "O2Sat": (97, 1), "Temp": (36.8, 0.2), "SBP": (125, 5), "MAP": (85, 4), "DBP": (65, 4),
          "Resp": (18, 1.5)}  # fmt: skip


@pytest.fixture(scope="module")
def icu_engine():
    return load_engine(MODELS / "icu-vitals.onnx", "cpu")


@pytest.fixture(scope="module")
def general_engine():
    return load_engine(MODELS / "general.onnx", "cpu")


def feed(monitor, stream, channels, values, steps, period, tick_every=1):
    """Ingest one reading per step, ticking every ``tick_every`` readings and at the end; return the alert changes."""
    alerts = []
    for i, t in enumerate(steps):
        monitor.ingest(Reading(stream, period * t, dict(zip(channels, values[t].tolist()))))
        if (i + 1) % tick_every == 0 or i == len(steps) - 1:
            alerts += monitor.tick(period * t).alerts
    return alerts


def assert_same_explanation(streamed, offline):
    assert streamed.channels == offline.channels and streamed.top == offline.top
    for name in ("contribution", "surprise", "expected", "seen"):
        np.testing.assert_allclose(getattr(streamed, name), getattr(offline, name), rtol=1e-4, atol=1e-6)


def test_a_level_shift_in_one_of_seven_vitals_is_named_first_and_trep_edge_score_says_the_same(icu_engine):
    channels = list(icu_engine.card.channels)
    assert channels == list(VITALS)
    rng = np.random.default_rng(1)
    level, noise = (np.array(v, dtype=np.float64) for v in zip(*VITALS.values()))
    at, steps = 220, 224
    values = level + noise * rng.normal(size=(steps, len(channels)))
    values[at:, channels.index("SBP")] += 60.0  # a lasting level shift, 12 noise stds
    monitor = Monitor(icu_engine, WindowConfig(period=HOUR))
    assert feed(monitor, "bed1", channels, values, range(at), HOUR, tick_every=20) == []
    quiet = Monitor.from_state(icu_engine, monitor.state_dict(), alerts=AlertConfig(explain=False))
    alerts = feed(monitor, "bed1", channels, values, range(at, steps), HOUR)
    assert [(a.state, a.window_end) for a in alerts] == [("raised", at * HOUR)]
    why = alerts[0].explanation
    assert why.channels[0] == "SBP" and why.top == ("SBP",)
    assert math.isclose(sum(why.contribution), 1.0) and why.contribution[0] > 0.8
    assert why.surprise[0] >= monitor.detector_config.threshold > max(why.surprise[1:])
    expected, seen = dict(zip(why.channels, why.expected)), dict(zip(why.channels, why.seen))
    assert seen == dict(zip(channels, values[at].tolist()))
    assert abs(expected["SBP"] - 125) < 5 and abs(expected["HR"] - 80) < 3  # the window's median, in mmHg and bpm

    offline = detect_recording(icu_engine, values, channels=channels, alerts=AlertConfig())
    # Row 201's O2Sat of 100.2 is beyond the card's 0–100: the sensor fault the daemon pages, a row of its own offline.
    assert offline.alerts.nonzero()[0].tolist() == [201, at]
    assert [(t, cause) for t, state, _, _, cause in offline.events if state == "raised"] == [
        (201, "implausible"), (at, "anomaly")]  # fmt: skip
    assert_same_explanation(why, offline.explanations[at])
    # Explanations off: the same alert, without one.
    assert [(a.state, a.explanation) for a in feed(quiet, "bed1", channels, values, range(at, steps), HOUR)] == \
        [("raised", None)]  # fmt: skip


def test_a_spike_in_one_of_seven_channels_of_the_general_model_is_named_first_at_no_engine_cost(general_engine):
    channels = [f"c{k}" for k in range(7)]
    rng = np.random.default_rng(2)
    at = 120  # the first readings it may alert on (window, per-stream scale and detector warm-up)
    t = np.arange(at + 1)
    values = np.stack([np.sin(2 * np.pi * t / (20 + 3 * k)) for k in range(7)], axis=1) + rng.normal(0, 0.1, (at + 1, 7))
    values[at, 4] += 5.0
    # The Gaussian-tail detector: under the Student tail this spike does not alert at reading 120 (docs/detection.md,
    # Missing or weak); the subject here is the explanation, not the detector.
    gaussian = DetectorConfig(**GAUSSIAN_GATE)
    monitor = Monitor(general_engine, WindowConfig(period=1.0), detector=gaussian)
    assert feed(monitor, "m1", channels, values, range(at), 1.0, tick_every=20) == []
    rows = monitor.counters["engine_rows"]
    alerts = feed(monitor, "m1", channels, values, [at], 1.0)
    assert monitor.counters["engine_rows"] - rows == 2 * 7  # the reading's own 7 windows: no occlusion rows
    assert [(a.state, a.channel) for a in alerts] == [("raised", "c4")]
    why = alerts[0].explanation
    assert why.channels[0] == "c4" and why.top == ("c4",) and why.contribution[0] > 0.5  # more than all others
    assert dict(zip(why.channels, why.seen)) == dict(zip(channels, values[at].tolist()))
    assert_same_explanation(why, detect_recording(general_engine, values, gaussian, channels=channels,
                                                           alerts=AlertConfig()).explanations[at])


def test_trep_edge_score_writes_the_explanation_of_each_raised_episode_and_none_when_off(tmp_path, icu_engine):
    channels = list(VITALS)
    rng = np.random.default_rng(3)
    level, noise = (np.array(v, dtype=np.float64) for v in zip(*VITALS.values()))
    values = level + noise * rng.normal(size=(150, 7))
    values[120, channels.index("Resp")] += 30.0  # a one-reading spike
    series = RecordedSeries("bed2", channels, values, None)
    result = score_recording(icu_engine, series)
    write_csv(result, tmp_path / "out.csv")
    with open(tmp_path / "out.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["explanation"]]
    assert [int(r["step"]) for r in rows] == [120] and rows[0]["event"] == "raised"
    assert '"top": ["Resp"]' in rows[0]["explanation"] and result.explanations[120].channels[0] == "Resp"
    assert score_recording(icu_engine, series, AlertConfig(explain=False)).explanations == {}


def test_expected_values_undo_differencing_and_normalisation_and_a_count_channels_bend():
    rng = np.random.default_rng(4)
    raw = np.cumsum(rng.normal(size=(40, 2)), axis=0) + [100.0, -5.0]
    norm = Normalisation(np.array([0.1, -0.2], dtype=np.float32), np.array([2.0, 0.5], dtype=np.float32))

    def prepared(series):
        return norm.apply(difference(series.astype(np.float32), 1))[None]

    expected = expected_values(prepared(raw), raw[-1:], norm)
    fixed = raw.copy()
    fixed[-1] = expected[0]
    # The expected raw value puts the last prepared value at the centre of the earlier ones.
    np.testing.assert_allclose(prepared(fixed)[0, -1], window_centre(prepared(raw))[0], atol=1e-4)
    counted = Normalisation(np.float32([1.0, 0.0]), np.float32([0.5, 1.0]), np.float32([20.0, 0.0]))
    feed = np.stack([rng.poisson(20, 40), rng.normal(0, 1, 40)], axis=1).astype(np.float32)
    feed[-1] = [200.0, 4.0]
    expected = expected_values(counted.apply(feed)[None], feed[-1:], counted)
    fixed = feed.copy()
    fixed[-1] = expected[0]
    np.testing.assert_allclose(counted.apply(fixed)[-1], window_centre(counted.apply(feed)[None])[0], atol=1e-4)
    assert 10 < expected[0, 0] < 30  # in the feed's units, near its level


def test_shares_sum_to_one_and_top_names_the_channels_past_the_threshold():
    names = ("a", "b", "c", "d")
    why = explanation(names, np.array([1.0, np.nan, 6.0, 5.0]), np.zeros(4), np.array([1, np.nan, 3, 4]), 4.5)
    assert why.channels == ("c", "d", "a", "b") and why.top == ("c", "d")
    np.testing.assert_allclose(why.contribution, [0.5, 5 / 12, 1 / 12, 0.0])
    message = why.to_dict()
    assert message["top"] == ["c", "d"] and message["channels"][3] == {
        "channel": "b", "contribution": 0.0, "surprise": None, "expected": 0.0, "seen": None}  # fmt: skip
    # None past the threshold: the largest one; no surprise at all: none, ties in name order.
    assert explanation(names, np.array([1.0, 2.0, 0, 0]), np.zeros(4), np.zeros(4), 4.5).top == ("b",)
    quiet = explanation(names[::-1], np.zeros(4), np.zeros(4), np.zeros(4), 4.5)
    assert quiet.top == () and quiet.channels == names and quiet.contribution == (0.0,) * 4
