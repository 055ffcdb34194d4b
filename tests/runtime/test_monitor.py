import dataclasses
import logging
import time

import numpy as np
import pytest

from trep_edge.runtime.core.alerts import AlertConfig
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.windows import WindowConfig
from gates import GAUSSIAN_GATE
from round_trips import json_round_trip, npz_round_trip

T0 = 1_700_000_000  # epoch seconds of the first reading; with period 1 s, also its step index
FAULT = 1000.0  # added to a reading to inject a fault: about 77 of the model's normalisation scales


@pytest.fixture(scope="module")
def vitals_engine(vitals_model):
    return load_engine(vitals_model, "cpu")


def with_card(engine, **changes):
    """The same graph behind a modified card (no detector prior, another scaling, ...)."""
    return dataclasses.replace(engine, card=dataclasses.replace(engine.card, **changes))


def cold(min_count, **changes):
    """Detector settings that ignore the card's prior: a stream's first two readings have no score (no variance
    yet), and it warms up for ``min_count`` scored readings after them. No schedule: on streams of a few dozen
    readings with a short refractory period, alerts a few readings apart would fall on one by chance."""
    return DetectorConfig(min_count=min_count, prior_weight=0, **{"schedule": 0, **changes})


def value(stream, t, v, **extra):
    return Reading(stream, float(T0 + t), {"value": float(v), **extra})


def faulty(stream, times, faults=()):
    """Readings ``cos(t)`` of one stream, with ``FAULT`` added at the steps in ``faults``."""
    return [value(stream, t, np.cos(t) + (FAULT if t in faults else 0.0)) for t in times]


def run(monitor, readings, tick_every=1):
    """Feed readings, ticking every ``tick_every`` readings (and at the end) at the last reading's time."""
    scored, alerts = [], []
    for i, reading in enumerate(readings):
        monitor.ingest(reading)
        if (i + 1) % tick_every == 0 or i == len(readings) - 1:
            result = monitor.tick(reading.timestamp)
            scored += result.scored
            alerts += result.alerts
    return scored, alerts


def series_readings(values, stream="ucr"):
    return [value(stream, t, v) for t, v in enumerate(values)]


# equivalence with offline scoring


def assert_same_as_offline(scored, expected, threshold):
    """Monitor output equals ``offline.detect_recording`` exactly, step by step (one stream of a fixed model)."""
    assert [s.step for s in scored] == list(range(T0, T0 + len(expected.score)))
    np.testing.assert_array_equal([s.raw for s in scored], expected.raw)
    np.testing.assert_array_equal([s.score for s in scored], expected.score)
    np.testing.assert_array_equal([s.alert for s in scored], expected.alerts)
    np.testing.assert_array_equal([s.warming for s in scored], expected.warming)
    assert {s.threshold for s in scored} == {threshold} and {s.channel for s in scored} == {""}


# Some alerts fire on this tiny model; run peaks that fade fast keep its recurring surprises alerting. The alert budget
# binds after 8 of them; its memory of 20,000 readings (not the default 40,000) lets the spent budget fall back far
# enough that at least 10 alert, so the equality covers alerts both inside and beyond the budget.
BUDGET_BOUND = DetectorConfig(threshold=1.0, refractory=20, peak_decay=0.1, budget_span=20_000)


@pytest.fixture(scope="module")
def offline_3000(ucr_series, univariate_engine):
    """3,000 readings of UCR 135 scored offline under ``BUDGET_BOUND`` (once: both tick cadences compare to it)."""
    return detect_recording(univariate_engine, ucr_series.values[:3000].reshape(-1, 1), BUDGET_BOUND)


@pytest.mark.parametrize("tick_every", [1, 37])
def test_streaming_equals_offline_scoring_on_a_real_series(ucr_series, univariate_engine, offline_3000, tick_every):
    assert offline_3000.alerts.sum() >= 10
    scored, _ = run(Monitor(univariate_engine, detector=BUDGET_BOUND), series_readings(ucr_series.values[:3000]),
                    tick_every)  # fmt: skip
    assert_same_as_offline(scored, offline_3000, 1.0)


def test_the_monitor_judges_deviation_over_the_configured_window(ucr_series, univariate_engine, monkeypatch):
    import trep_edge.runtime.core.monitor as monitor_module

    real, calls = monitor_module.window_deviation, []
    monkeypatch.setattr(monitor_module, "window_deviation", lambda windows, span=0, tied=None: (
        calls.append((windows.shape[1], span)), real(windows, span, tied))[-1])
    values = ucr_series.values[:600]
    detector = DetectorConfig(deviation_window=32)
    scored, _ = run(Monitor(univariate_engine, detector=detector), series_readings(values), tick_every=50)
    assert calls and all(span == 32 < width for width, span in calls)  # the last 32 of the model's window
    expected = detect_recording(univariate_engine, values.reshape(-1, 1), detector)
    assert_same_as_offline(scored, expected, detector.threshold)
    default = detect_recording(univariate_engine, values.reshape(-1, 1), DetectorConfig())
    assert not np.array_equal(default.score, expected.score, equal_nan=True)


def test_streaming_equals_offline_from_a_cold_start_without_a_card_prior(ucr_series, univariate_engine):
    engine = with_card(univariate_engine, detector_prior={})  # a model exported before the prior existed
    values = ucr_series.values[:1500]
    # About warm-up from a cold start, not the gate: without run peaks or the schedule this tiny model alerts often.
    detector = DetectorConfig(min_count=50, threshold=1.0, refractory=10, peaks=0, tail_dof=0, schedule=0)
    expected = detect_recording(engine, values.reshape(-1, 1), detector)
    assert expected.alerts.sum() > 10
    assert expected.warming.sum() == 2 + 49  # two readings without a variance, then 49 scored ones
    scored, _ = run(Monitor(engine, detector=detector), series_readings(values), tick_every=50)
    assert_same_as_offline(scored, expected, 1.0)


def test_offline_scoring_is_the_monitor_fed_reading_by_reading_across_short_and_long_gaps(ucr_series,
                                                                                          univariate_engine):
    times = np.r_[np.arange(300), np.arange(310, 600), np.arange(700, 1000)]  # 10 missing steps, then 100: a reset
    values = ucr_series.values[times].reshape(-1, 1)
    detector, windows = DetectorConfig(threshold=1.0, refractory=20), WindowConfig(max_gap=30)
    offline = detect_recording(univariate_engine, values, detector, windows=windows, timestamps=T0 + times)
    monitor = Monitor(univariate_engine, windows, detector=detector)
    scored, _ = run(monitor, [value("ucr", t, v) for t, v in zip(times, values[:, 0])])  # a tick per reading
    assert monitor.counters["resets"] == 1 and monitor.counters["gap_filled_steps"] == 10
    # The first two readings after the long gap wait for a third that far ahead (jump_confirm), then the stream resets.
    assert monitor.counters["ahead"] == 2 and np.isnan(offline.raw[590:592]).all()
    kept = np.r_[0:590, 592:len(times)]  # row 590 is step 700
    assert [s.step - T0 for s in scored] == times[kept].tolist()
    for field in ("raw", "surprise", "score", "warming"):
        streamed = [getattr(s, field) for s in scored]
        np.testing.assert_array_equal(streamed, getattr(offline, field)[kept], err_msg=field)
    np.testing.assert_array_equal([s.alert for s in scored], offline.alerts[kept])
    assert offline.alerts.any() and offline.warming[592] and not offline.warming[589]  # warm-up restarts at the reset


# many streams, one engine call


def test_all_streams_are_scored_in_one_engine_call(univariate_engine):
    monitor = Monitor(univariate_engine)
    rng = np.random.default_rng(0)
    for s in range(300):
        monitor.ingest(value(f"s{s}", 0, rng.normal()))
    result = monitor.tick(T0)
    assert result.batch_rows == 600 and monitor.counters["engine_calls"] == 1
    assert len(result.scored) == 300 and len(monitor.streams) == 300


def test_several_pending_steps_of_a_stream_get_their_own_windows(univariate_engine):
    monitor = Monitor(univariate_engine)
    for t in range(5):
        monitor.ingest(value("a", t, t))
        monitor.ingest(value("b", t, -t))
    monitor.ingest(value("c", 0, 1.0))
    result = monitor.tick(T0 + 5)
    assert result.batch_rows == 2 * 11 and monitor.counters["engine_calls"] == 1
    assert [(s.stream, s.step - T0) for s in result.scored if s.stream == "a"] == [("a", t) for t in range(5)]


def test_performance_smoke_200_streams_tick_well_under_a_second(univariate_engine):
    monitor = Monitor(univariate_engine)
    rng = np.random.default_rng(1)
    for t in range(2):  # the first tick creates the streams and warms onnxruntime up; the second is timed
        for s in range(200):
            monitor.ingest(value(f"s{s}", t, rng.normal()))
        started = time.perf_counter()
        result = monitor.tick(T0 + t)
    assert time.perf_counter() - started < 1.0 and len(result.scored) == 200


# readings: merge, duplicates, late, unknown channels, gaps


def test_channels_from_several_messages_merge_into_one_scored_step(vitals_engine):
    monitor = Monitor(vitals_engine, WindowConfig(settle=0.5))
    ts = float(T0)
    monitor.ingest(Reading("bed1", ts, {"HR": 72.0}), now=ts)
    monitor.ingest(Reading("bed1", ts + 0.1, {"SpO2": 97.0, "RESP": 16.0}), now=ts + 0.2)
    assert monitor.tick(ts + 0.3).scored == []
    (scored,) = monitor.tick(ts + 0.6).scored
    assert scored.values == {"HR": 72.0, "SpO2": 97.0, "RESP": 16.0} and scored.timestamp == ts
    assert scored.raw >= 0 and scored.channel == ""
    # The stream has no history yet: its first reading is judged against the card's prior alone (and cannot alert
    # before min_warmup readings: its window is mostly padding).
    assert vitals_engine.card.detector_prior and np.isfinite(scored.surprise) and scored.warming


def test_a_step_missing_a_channel_is_not_sent_to_the_model(vitals_engine):
    monitor = Monitor(vitals_engine)
    monitor.ingest(Reading("bed1", float(T0), {"HR": 72.0, "SpO2": 97.0}))
    result = monitor.tick(T0)
    assert result.batch_rows == 0 and np.isnan(result.scored[0].raw) and np.isnan(result.scored[0].values["RESP"])
    assert monitor.counters["incomplete"] == 1


def vitals(t, hr):
    return Reading("bed1", float(T0 + t), {"HR": float(hr), "SpO2": 97.0, "RESP": 16.0 + np.sin(t / 3)})


def test_an_implausible_value_is_a_sensor_fault_scored_as_missing_not_an_anomaly(vitals_engine):
    engine = with_card(vitals_engine, ranges={"HR": [0.0, 350.0]})
    monitor = Monitor(engine, detector=cold(5))
    hr = {t: 72 + 3 * np.sin(t / 5) for t in range(120)}
    hr[60], hr[61], hr[90] = 1e15, 2e15, 400.0  # a corrupted register twice, then a plausible-looking unit slip
    scored, events = [], []
    for t in range(120):
        monitor.ingest(vitals(t, hr[t]))
        result = monitor.tick(T0 + t)
        scored += result.scored
        events += [(e.state, e.channel, e.value, t) for e in result.sensor]
    assert events == [("raised", "HR", 1e15, 60), ("cleared", "HR", hr[62], 62), ("raised", "HR", 400.0, 90),
                      ("cleared", "HR", hr[91], 91)]  # fmt: skip
    assert monitor.counters["implausible_values"] == 3
    by_step = {s.step - T0: s for s in scored}
    assert np.isnan(by_step[60].values["HR"]) and np.isnan(by_step[90].values["HR"])
    # Treated as missing, the values blind nothing: every later step is scored and none alerts.
    assert all(np.isfinite(by_step[t].raw) for t in range(62, 120) if t != 90) and not any(s.alert for s in scored)


def test_absurd_values_are_implausible_without_declared_ranges_and_offline_agrees(vitals_engine):
    monitor = Monitor(vitals_engine, detector=cold(5))
    hr = 72 + 3 * np.sin(np.arange(100) / 5)
    hr[40], hr[70] = 1e15, 1000.0  # 1e15 is beyond 1e6 training scales; 1000 is an anomaly, not a broken sensor
    hr[85] = -np.inf  # a CSV cell "-inf": a broken sensor too, not a missing reading
    scored, faults = [], []
    for t in range(100):
        monitor.ingest(vitals(t, hr[t]))
        result = monitor.tick(T0 + t)
        scored += result.scored
        faults += [e.value for e in result.sensor if e.state == "raised"]
    assert faults == [1e15, -np.inf]
    values = np.array([[s.values[c] for c in ("HR", "SpO2", "RESP")] for s in scored])
    raw = np.stack([hr, np.full(100, 97.0), 16.0 + np.sin(np.arange(100) / 3)], axis=1)
    expected = detect_recording(vitals_engine, raw, cold(5))
    np.testing.assert_array_equal([s.raw for s in scored], expected.raw)  # offline files it as missing too
    assert np.isnan(values[40, 0]) and values[70, 0] == 1000.0 and np.isnan(values[85, 0])
    # ... and pages it as the daemon does: its row alerts, the fault is raised there and cleared by the next value.
    sensor = [(t, state, alert_id, cause) for t, state, _, alert_id, cause in expected.events if cause == "implausible"]
    assert sensor == [(40, "raised", "recording:sensor:HR", "implausible"),
                      (41, "cleared", "recording:sensor:HR", "implausible"),
                      (85, "raised", "recording:sensor:HR", "implausible"),
                      (86, "cleared", "recording:sensor:HR", "implausible")]  # fmt: skip
    assert expected.alerts[40] and not expected.alerts[41] and expected.alerts[85]


def test_removing_a_stream_clears_its_open_sensor_faults(vitals_engine):
    monitor = Monitor(vitals_engine, detector=cold(5))
    monitor.ingest(vitals(0, 1e20))
    assert [e.state for e in monitor.tick(T0).sensor] == ["raised"]
    monitor.remove_stream("bed1")
    assert [(e.state, e.stream, e.channel) for e in monitor.tick(T0 + 1).sensor] == [("cleared", "bed1", "HR")]
    assert monitor.counters["sensor_faults_cleared"] == 1


def test_a_disconnected_sensor_is_reported_once_its_readings_never_scored_and_its_next_value_clears_it(
    univariate_engine,
):
    monitor = Monitor(univariate_engine, detector=cold(1))

    def off(stream, t):
        return Reading(stream, float(T0 + t), {"value": float("nan")}, disconnected=True)

    assert monitor.ingest(off("new", 0)) is None and monitor.tick(T0).sensor == []  # nothing to score or report yet
    assert "new" not in monitor.streams
    scored, events = [], []
    for t, reading in enumerate(faulty("a", range(10)) + [off("a", t) for t in range(10, 40)] + faulty("a", [40, 41])):
        assert monitor.ingest(reading, now=100.0 + t) is None
        result = monitor.tick(reading.timestamp)
        scored += [s.step - T0 for s in result.scored]
        events += [(e.stream, e.channel, e.fault, e.state, t) for e in result.sensor]
    assert events == [("a", "", "disconnected", "raised", 10), ("a", "", "disconnected", "cleared", 40)]
    assert scored == [*range(10), 40, 41]  # the disconnected steps are a gap: not readings, never scored
    assert monitor.counters["disconnected_readings"] == 31 and monitor.silent(139.5, after=1.0) == []  # alive
    assert monitor.streams == {"a": "warming"}  # back from a disconnection, the stream warms up again


def test_duplicates_are_accepted_and_counted_late_readings_refused_unknown_channels_dropped(univariate_engine):
    monitor = Monitor(univariate_engine)
    assert monitor.ingest(value("a", 0, 1.0)) is None
    assert monitor.ingest(value("a", 0, 2.0)) is None
    (scored,) = monitor.tick(T0).scored
    assert scored.values == {"value": 2.0}
    assert monitor.ingest(value("a", 0, 3.0)) == "late"
    assert monitor.ingest(value("a", 1, 3.0, Temp=1.0)) is None
    assert monitor.ingest(Reading("a", T0 + 2.0, {"Temp": 1.0})) == "empty"
    counters = monitor.counters
    assert (counters["duplicate"], counters["late"], counters["unknown_channel"], counters["empty"]) == (1, 1, 2, 1)
    assert counters["readings_accepted"] == 3


@pytest.mark.parametrize("resume", [True, False])
def test_a_short_gap_is_missing_steps_and_a_long_gap_restarts_warm_up(univariate_engine, resume):
    monitor = Monitor(univariate_engine, WindowConfig(max_gap=5, jump_confirm=1), detector=cold(3, resume=resume))
    scored, alerts = run(monitor, faulty("a", range(10), faults=[9]))
    assert [a.state for a in alerts] == ["raised"] and alerts[0].alert_id == "a-1"
    scored, _ = run(monitor, [value("a", 13, 0.1)])  # 3 missing steps: filled, not scored
    assert [s.step - T0 for s in scored] == [13] and monitor.counters["gap_filled_steps"] == 3
    assert not scored[0].warming
    # The filled steps reach the alert gate unscored: its schedule's clock counts them, its scored readings do not.
    gate = monitor._detector.gate
    assert gate.steps_.tolist() == [14] and gate.scored_[0] < 14
    scored, alerts = run(monitor, faulty("a", range(30, 36)))  # 16 missing: reset
    # The model signals start again: 2 readings without a score, 2 scored, then active.
    assert [s.warming for s in scored] == [True] * 4 + [False] * 2
    # Resumed, the gate's clock ran on over the gap (its schedule stays in step); afresh, it started again.
    assert gate.steps_.tolist() == ([14 + 16 + 6] if resume else [6])
    assert monitor.counters["resets"] == 1
    assert alerts == [] and monitor.streams == {"a": "active"}  # the episode raised before the reset is still open


def test_a_stream_back_from_an_outage_keeps_its_cycle_and_a_restore_just_after_scores_as_an_uninterrupted_run(
    univariate_engine,
):
    # A cycle of 24 found in the first 100 readings, then an outage of 60 steps (past max_gap: the windows restart).
    config = cold(10, seasonal_after=100)
    times = [*range(200), *range(260, 330)]
    readings = [value("a", t, 5 * np.sin(2 * np.pi * t / 24) + 0.1 * np.cos(7 * t)) for t in times]
    runs = {}
    for resume in (True, False):
        monitor = Monitor(univariate_engine, detector=dataclasses.replace(config, resume=resume))
        runs[resume] = run(monitor, readings)[0]
        assert monitor.counters["resets"] == 1
        seasons = monitor._detector.seasons
        # Resumed, the lane keeps its cycle and its ring's clock ran on over the gap; afresh, 70 readings are too few
        # to find it again.
        if resume:
            assert seasons.period_[0, 0] == 24 and seasons.seen_[0] == 330
        else:
            assert seasons.period_[0, 0] == 0 and seasons.seen_[0] < 100
    restored = Monitor(univariate_engine, detector=config)
    first = run(restored, readings[:205])[0]  # 5 readings after the outage
    restored = Monitor.from_state(univariate_engine, npz_round_trip(restored.state_dict()), detector=config)
    second = run(restored, readings[205:])[0]
    np.testing.assert_equal([dataclasses.asdict(s) for s in first + second],
                            [dataclasses.asdict(s) for s in runs[True]])  # fmt: skip


def xy(t, y=True, fault=0.0):
    """One reading of a channel-independent model's stream ``a``: channel ``x`` (with ``fault`` added), and ``y``."""
    return Reading("a", float(T0 + t), {"x": np.cos(t) + fault, **({"y": np.sin(t / 2)} if y else {})})


def test_a_channel_sent_less_often_than_max_gap_restarts_alone_and_its_stream_keeps_alerting(univariate_engine):
    # y arrives every 8 steps, past max_gap: its lane restarts at each reading and is never judged, while x is.
    monitor = Monitor(with_card(univariate_engine, channel_mode="independent"), WindowConfig(max_gap=5, jump_confirm=1),
                      detector=cold(10))  # fmt: skip
    scored, alerts = run(monitor, [xy(t, y=t % 8 == 0, fault=FAULT * (t == 70)) for t in range(80)])
    assert monitor.counters["resets"] >= 8 and monitor.streams == {"a": "active"}
    assert not any(s.warming for s in scored[20:])
    assert {s.channel for s in scored if np.isfinite(s.score)} == {"x"}
    raised = [(a.channel, a.timestamp - T0) for a in alerts if a.state == "raised"]
    assert raised == [("x", 70)]


def test_a_channel_that_starts_late_or_after_a_gap_of_its_own_warms_up_before_it_is_judged(univariate_engine):
    monitor = Monitor(with_card(univariate_engine, channel_mode="independent"), WindowConfig(max_gap=5, jump_confirm=1),
                      detector=cold(10))  # fmt: skip
    readings = [xy(t, y=False) for t in range(30)]  # x alone, then y joins
    readings += [xy(t, y=not 50 <= t < 60) for t in range(30, 100)]  # y silent past max_gap: it alone restarts
    scored, alerts = run(monitor, readings)
    assert monitor.counters["resets"] == 1 and alerts == []
    assert not any(s.warming for s in scored[15:])
    named = {s.step - T0 for s in scored if s.channel == "y"}
    # A lane scores from its third reading (two give a variance): its 10th judged reading is step 41, then 71.
    assert named and not named & ({*range(30, 41)} | {*range(60, 71)})


# warm-up and alert episodes


def test_a_stream_warms_up_before_its_alerts_are_published(ucr_series, univariate_engine):
    assert univariate_engine.card.detector_prior["n"] >= 100
    # The card's prior stands for 100 of the 104 readings: the stream's 4th reading may alert (min_warmup lowered to
    # let it; the next test covers the default).
    monitor = Monitor(univariate_engine, alerts=AlertConfig(clear_after=1),
                      detector=DetectorConfig(min_count=104, min_warmup=4, **GAUSSIAN_GATE))
    faults = (2, 9)
    scored, alerts = run(monitor, [value("a", t, ucr_series.values[t] + FAULT * (t in faults)) for t in range(10)])
    assert np.isfinite([s.surprise for s in scored]).all()  # the prior gives even the first reading a surprise
    assert [s.warming for s in scored] == [True] * 3 + [False] * 7
    assert scored[2].surprise > 5.0 and np.isnan(scored[2].score) and not scored[2].alert  # a fault during warm-up neither alerts nor opens an episode
    assert monitor.streams == {"a": "active"}
    (raised,) = alerts
    assert (raised.alert_id, raised.state, raised.severity, raised.stream) == ("a-1", "raised", "critical", "a")
    fault = scored[9]
    assert fault.alert and not any(s.alert for s in scored[:9])
    assert raised.timestamp == fault.timestamp and raised.score == fault.score and raised.threshold == GAUSSIAN_GATE["threshold"]
    assert raised.window_end == fault.step and raised.window_start == fault.step - 63
    assert raised.values == fault.values and raised.channel == ""


def test_a_prior_never_lets_a_stream_alert_before_min_warmup_readings(ucr_series, univariate_engine):
    # Per-stream cards carry a narrow prior; a new stream's first windows are mostly padding, and an obvious fault
    # there must wait for min_warmup readings (it alerted on reading 0 before).
    detector = DetectorConfig()
    assert univariate_engine.card.detector_prior["n"] >= detector.min_count and detector.min_warmup == 30
    monitor = Monitor(univariate_engine, detector=detector)
    faults = (0, 5, 20, 35)
    scored, alerts = run(monitor, [value("a", t, ucr_series.values[t] + FAULT * (t in faults)) for t in range(40)])
    assert [s.warming for s in scored] == [True] * 29 + [False] * 11  # the 30th scored reading may alert
    assert max(s.surprise for s in scored[:29]) > detector.threshold  # judged, but not alerted
    alerted = [s.step - T0 for s in scored if s.alert]  # this tiny fixture model also alerts off the faults
    assert alerted and alerted[0] >= 29
    assert [a.timestamp - T0 for a in alerts if a.state == "raised"] == alerted


def test_warm_up_without_a_prior_is_two_unscored_readings_and_min_count_scored_ones(univariate_engine):
    monitor = Monitor(univariate_engine, detector=cold(10))
    scored, _ = run(monitor, series_readings(np.sin(np.arange(30))))
    assert [np.isnan(s.surprise) for s in scored[:3]] == [True, True, False]
    assert sum(s.warming for s in scored) == 2 + 9 and not any(s.warming for s in scored[11:])


def test_removing_a_stream_clears_its_open_episode(univariate_engine):
    monitor = Monitor(univariate_engine, detector=cold(1, **GAUSSIAN_GATE))
    _, alerts = run(monitor, faulty("a", range(4), faults=[3]) + [value("b", 0, 1.0)])
    assert [(a.alert_id, a.state) for a in alerts] == [("a-1", "raised")]
    (cleared,) = monitor.remove_stream("a", now=5.0)
    assert (cleared.alert_id, cleared.state) == ("a-1", "cleared")
    assert list(monitor.streams) == ["b"]
    assert monitor.remove_stream("b") == []


def test_removing_streams_in_one_pass_equals_removing_them_one_by_one(univariate_engine):
    # An eviction sweep may close thousands of streams: one pass, with lanes of a channel-independent model renumbered.
    engine = with_card(univariate_engine, channel_mode="independent", scaling="stream")

    def fed() -> Monitor:
        monitor = Monitor(engine, detector=cold(1))
        for t in range(40):
            for k, stream in enumerate("abcde"):
                monitor.ingest(Reading(stream, float(T0 + t), {"x": np.cos(t + k), "y": np.sin(t * k)}))
            monitor.tick(T0 + t)
        return monitor

    batch, single = fed(), fed()
    batch.remove_streams(["d", "a", "b"])
    for stream in ("d", "a", "b"):
        single.remove_stream(stream)
    one, other = batch.state_dict(), single.state_dict()
    assert one.keys() == other.keys() and list(batch.streams) == ["c", "e"]
    for key in one:
        np.testing.assert_array_equal(one[key], other[key], err_msg=key)
    for monitor in (batch, single):
        monitor.ingest(Reading("e", float(T0 + 40), {"x": 5.0, "y": 0.0}))
    assert [(s.stream, s.step) for s in batch.tick(T0 + 40).scored] == [("e", T0 + 40)]
    with pytest.raises(KeyError):
        batch.remove_streams(["c", "nobody"])
    assert list(batch.streams) == ["c", "e"]  # refused whole


def test_silent_names_the_streams_without_an_accepted_reading_for_a_while(univariate_engine):
    monitor = Monitor(univariate_engine, detector=cold(1))
    for stream, arrival in (("a", 100.0), ("b", 150.0), ("c", 190.0)):
        assert monitor.ingest(value(stream, 0, 1.0), now=arrival) is None
    assert monitor.ingest(value("a", 0, 2.0), now=120.0) is None  # a duplicate step is still a sign of life
    assert monitor.silent(200.0, after=60.0) == ["a"] and monitor.silent(200.0, after=20.0) == ["a", "b"]
    monitor.remove_stream("a")
    assert monitor.silent(200.0, after=20.0) == ["b"]  # the arrival times follow the renumbering
    assert monitor.ingest(value("b", 3600, 1.0), now=199.0) == "ahead"  # refused readings do not count
    assert monitor.silent(200.0, after=20.0) == ["b"]


def test_episodes_outlive_resets_and_swaps_and_their_numbers_keep_counting(univariate_engine):
    monitor = Monitor(univariate_engine, alerts=AlertConfig(clear_after=1), detector=cold(3))
    _, alerts = run(monitor, faulty("a", range(6), faults=[5]))
    assert [(a.alert_id, a.state) for a in alerts] == [("a-1", "raised")]
    # Same inputs, other weights: the stream stays warm, its episode stays open until a normal score clears it.
    monitor.swap_engine(dataclasses.replace(univariate_engine, sha256="other"))
    scored, alerts = run(monitor, faulty("a", range(6, 14)))
    assert not any(s.warming for s in scored) and np.isfinite([s.surprise for s in scored]).all()
    assert [(a.alert_id, a.state) for a in alerts] == [("a-1", "cleared")]
    monitor.reset_stream("a")
    assert monitor.streams == {"a": "warming"}
    # Other inputs (the card's normalisation): windows and scores restart.
    norm = {k: [2 * v for v in vs] for k, vs in univariate_engine.card.normalisation.items()}
    monitor.swap_engine(with_card(univariate_engine, normalisation=norm))
    assert monitor.streams == {"a": "warming"}
    _, alerts = run(monitor, faulty("a", range(14, 20), faults=[19]))
    assert [(a.alert_id, a.state) for a in alerts] == [("a-2", "raised")]
    assert monitor.counters["streams_reset"] == 1 and monitor.counters["model_swaps"] == 2
    with pytest.raises(KeyError):
        monitor.reset_stream("nope")


@pytest.mark.parametrize("independent", [False, True])
def test_a_moved_stream_scores_on_under_its_new_id_exactly_as_if_it_had_not_moved(univariate_engine, independent):
    engine = with_card(univariate_engine, channel_mode="independent") if independent else univariate_engine

    def readings(stream, times):
        extra = {"other": 1.0} if independent else {}
        return [value(stream, t, np.cos(t / 3) + (FAULT if t == 45 else 0.0), **extra) for t in times]

    def outputs(scored, alerts):
        return ([(s.step, s.surprise, s.warming, s.alert, s.channel) for s in scored],
                [(a.state, a.window_end) for a in alerts])  # fmt: skip

    stayed = Monitor(engine, detector=cold(5, refractory=1))
    run(stayed, readings("a", range(30)))
    expected = outputs(*run(stayed, readings("a", range(30, 60))))
    moved = Monitor(engine, detector=cold(5, refractory=1))
    run(moved, readings("a", range(30)))
    assert moved.move_stream("a", "b", now=5.0) == []
    assert list(moved.streams) == ["b"] and moved.counters["streams_moved"] == 1
    got = outputs(*run(moved, readings("b", range(30, 60))))
    np.testing.assert_equal(got, expected)  # NaN-aware: same scores, same alerts
    # No warm-up under the new id: every reading is scored at once, and the fault alerts.
    assert not any(warming for _, _, warming, _, _ in got[0]) and got[1][0] == ("raised", float(T0 + 45))
    restored = Monitor.from_state(engine, npz_round_trip(moved.state_dict()))  # names and rows stay consistent
    assert restored.streams == moved.streams


def test_moving_onto_a_known_stream_replaces_it_and_clears_both_ids_episodes(univariate_engine):
    monitor = Monitor(univariate_engine, alerts=AlertConfig(clear_after=1), detector=cold(1, refractory=1))
    _, alerts = run(monitor, faulty("b", range(4), faults=[3]) + faulty("a", range(22), faults=[3, 20]))
    opened = {a.stream: a.alert_id for a in alerts if a.state == "raised"}
    assert opened == {"a": "a-3", "b": "b-1"} and not {a.alert_id for a in alerts if a.state == "cleared"} & {
        "a-3", "b-1"}  # fmt: skip
    cleared = monitor.move_stream("a", "b", now=99.0)
    assert [(a.alert_id, a.state, a.timestamp) for a in cleared] == [("b-1", "cleared", 99.0), ("a-3", "cleared", 99.0)]
    assert list(monitor.streams) == ["b"]
    _, alerts = run(monitor, faulty("b", range(22, 40), faults=[30]))
    assert alerts and (alerts[0].alert_id, alerts[0].state) == ("b-4", "raised")  # above both ids' episodes
    with pytest.raises(KeyError):
        monitor.move_stream("a", "c")
    with pytest.raises(ValueError):
        monitor.move_stream("b", "b")


def test_closing_episodes_on_request_clears_them_and_the_next_alert_opens_a_new_one(univariate_engine):
    monitor = Monitor(univariate_engine, alerts=AlertConfig(clear_after=100), detector=cold(1, refractory=1))
    run(monitor, faulty("a", range(5), faults=[3]))
    assert [(a.alert_id, a.state) for a in monitor.close_episodes(["a"], now=6.0)] == [("a-1", "cleared")]
    assert monitor.close_episodes(["a"]) == []
    _, alerts = run(monitor, faulty("a", range(5, 25), faults=[20]))
    assert alerts and (alerts[0].alert_id, alerts[0].state) == ("a-2", "raised")


# state and hot swap


# Small detector settings, so that within 70 readings the memory ring wraps, the statistics turn exponential,
# the refractory period and the protected run matter: every part of the state must survive the round trip.
SMALL_DETECTOR = DetectorConfig(memory=6, stride=2, exclusion=3, horizon=15, short=3, min_count=4, threshold=2.0,
                                refractory=4, protect=3, scale_warmup=10, scale_adapt=20, prior_weight=0)


def many_channels(stream, t, v):
    """One reading of a channel-independent model's stream: two channels, named by the sender."""
    return Reading(stream, float(T0 + t), {"x": float(v), "y": float(-2 * v)})


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
@pytest.mark.parametrize("kind", ["fixed", "scaled-independent"])
def test_state_round_trip_gives_identical_next_outputs(univariate_engine, round_trip, kind):
    engine, reading = univariate_engine, value
    if kind == "scaled-independent":
        engine, reading = with_card(univariate_engine, scaling="stream", channel_mode="independent"), many_channels
    rng = np.random.default_rng(3)
    first = [reading(s, t, rng.normal()) for t in range(40) for s in ("a", "b", "c")]
    later = [reading(s, t, rng.normal() + (FAULT if t in (50, 55) else 0)) for t in range(41, 70)
             for s in ("a", "b", "c")]  # fmt: skip
    monitor = Monitor(engine, WindowConfig(max_gap=3), AlertConfig(clear_after=2), SMALL_DETECTOR)
    run(monitor, first)
    monitor.ingest(reading("a", 40, 0.5))  # pending at the save
    restored = Monitor.from_state(engine, round_trip(monitor.state_dict()))
    assert restored.counters == monitor.counters and restored.streams == monitor.streams
    expected, got = run(monitor, later, 3), run(restored, later, 3)
    assert len(expected[0]) == 88 and len(expected[1]) > 0
    np.testing.assert_equal([dataclasses.asdict(s) for s in got[0]], [dataclasses.asdict(s) for s in expected[0]])
    np.testing.assert_equal([dataclasses.asdict(a) for a in got[1]], [dataclasses.asdict(a) for a in expected[1]])


def test_a_stream_scaled_lane_idle_since_its_start_is_judged_from_its_first_reading_that_moves(univariate_engine):
    # The scale's warm-up (20) ends on a still window at reading 19: from there the lane is idle, its detector
    # restarts at each reading, and the stream warms up again from reading 60, where the machine starts.
    engine = with_card(univariate_engine, scaling="stream", channel_mode="independent")
    monitor = Monitor(engine, detector=cold(10, scale_warmup=20))
    readings = [Reading("a", float(T0 + t), {"x": 5.0 if t < 60 else 5.0 + np.cos(t / 2) + FAULT * (t == 100)})
                for t in range(110)]  # fmt: skip
    scored, alerts = run(monitor, readings)
    warming = [s.step - T0 for s in scored if s.warming]
    assert set(range(20, 70)) <= set(warming) and max(warming) == 69  # ten scored readings from reading 60
    assert [a.timestamp - T0 for a in alerts if a.state == "raised"] == [100]
    assert monitor.streams == {"a": "active"}


def test_a_restore_keeps_the_learnt_scales_under_the_scale_settings_in_force(univariate_engine):
    engine = with_card(univariate_engine, scaling="stream")
    monitor = Monitor(engine, detector=dataclasses.replace(SMALL_DETECTOR, scale_warmup=10, scale_adapt=20))
    run(monitor, [value("a", t, 50 + np.cos(t)) for t in range(30)])
    new = dataclasses.replace(SMALL_DETECTOR, scale_warmup=40, scale_adapt=500)
    restored = Monitor.from_state(engine, npz_round_trip(monitor.state_dict()), detector=new)
    assert (restored._scaler.warmup, restored._scaler.adapt) == (40, 500)
    np.testing.assert_array_equal(restored._scaler.loc_, monitor._scaler.loc_)
    assert restored._scaler.count_.tolist() == [30]


def test_state_of_a_model_with_other_inputs_is_refused(univariate_engine, vitals_engine):
    monitor = Monitor(univariate_engine)
    run(monitor, [value("a", 0, 1.0)])
    with pytest.raises(ValueError, match="channels, window"):
        Monitor.from_state(vitals_engine, monitor.state_dict())


def test_swapping_in_the_same_model_keeps_every_stream_state(univariate_model, univariate_engine):
    readings = [value(s, t, np.sin(t / 3) + i) for t in range(30) for i, s in enumerate(("a", "b"))]
    kept, reference = Monitor(univariate_engine), Monitor(univariate_engine)
    run(kept, readings[:40])
    run(reference, readings[:40])
    kept.swap_engine(load_engine(univariate_model, "cpu"))
    np.testing.assert_equal([dataclasses.asdict(s) for s in run(kept, readings[40:])[0]],
                            [dataclasses.asdict(s) for s in run(reference, readings[40:])[0]])  # fmt: skip


def test_swapping_in_other_weights_keeps_every_stream_warm_and_alert_capable(univariate_engine, causal_model_other,
                                                                              caplog):  # fmt: skip
    other = load_engine(causal_model_other, "cpu", engine="pruned_pair")  # same inputs, other network
    monitor = Monitor(univariate_engine, detector=cold(30))
    run(monitor, sorted(faulty("a", range(80)) + faulty("b", range(80)), key=lambda r: r.timestamp))
    gate, state = monitor._detector.gate.state_dict(), monitor.state_dict()
    assert monitor.streams == {"a": "active", "b": "active"}
    with caplog.at_level(logging.INFO, logger="trep_edge.runtime.core.monitor"):
        monitor.swap_engine(other)
        restarted = Monitor.from_state(other, npz_round_trip(state))  # a restart with the new model: the same
    assert "resuming with another model" in caplog.text
    assert "kept the windows, scales and alert state of all 2 streams; relearnt the model signals of 2 lanes" \
        in caplog.text  # fmt: skip
    for name in ("record_", "scored_", "since_", "hot_", "alerted_"):
        np.testing.assert_equal(getattr(monitor._detector.gate, name), gate[name])
    # No warm-up gap: the first reading after the swap is scored and may alert.
    readings = faulty("a", [80]) + faulty("b", [80], faults=[80])
    scored, alerts = run(monitor, readings)
    assert [(s.stream, s.warming, s.alert) for s in scored] == [("a", False, False), ("b", False, True)]
    assert np.isfinite([s.score for s in scored]).all() and [a.alert_id for a in alerts] == ["b-1"]
    np.testing.assert_equal([dataclasses.asdict(s) for s in run(restarted, readings)[0]],
                            [dataclasses.asdict(s) for s in scored])  # fmt: skip
    assert monitor.counters["resets"] == 0 and monitor.streams == {"a": "active", "b": "active"}


def test_swapping_in_a_model_with_other_channels_resets_the_windows(univariate_engine, vitals_engine, caplog):
    monitor = Monitor(univariate_engine, detector=cold(3))
    run(monitor, [value("bed1", t, np.sin(t)) for t in range(10)])
    monitor.ingest(value("bed1", 10, 0.0))  # pending: discarded, its channel is gone
    with caplog.at_level(logging.WARNING, logger="trep_edge.runtime.core.monitor"):
        monitor.swap_engine(vitals_engine)
    assert "channels, window" in caplog.text and "reset the windows" in caplog.text
    assert monitor.streams == {"bed1": "warming"} and monitor.counters["discarded"] == 1
    assert monitor.ingest(value("bed1", 11, 1.0)) == "empty"
    monitor.ingest(Reading("bed1", float(T0 + 11), {"HR": 70.0, "SpO2": 97.0, "RESP": 15.0}))
    result = monitor.tick(T0 + 11)
    assert result.batch_rows == 2 and result.scored[0].window_start == T0 + 11 - 31


def test_a_model_trained_on_another_period_is_named_in_a_warning(vitals_engine, caplog):
    hourly = with_card(vitals_engine, period=3600.0)
    with caplog.at_level(logging.WARNING, logger="trep_edge.runtime.core.monitor"):
        Monitor(hourly, WindowConfig(period=3600.0))
        assert not caplog.records
        Monitor(hourly, WindowConfig(period=1.0))
    assert len(caplog.records) == 1 and "every 3600 s, but [windows] period is 1 s" in caplog.text
    assert "window spans 32 s instead; set period = 3600" in caplog.text


def test_streams_sampled_far_from_the_models_period_are_named(vitals_engine):
    monitor = Monitor(with_card(vitals_engine, period=60.0), WindowConfig(period=1.0, max_gap=10_000))
    for k in range(20):
        monitor.ingest(vitals(k, 70))  # bed1: every second
        monitor.ingest(Reading("bed2", float(T0 + 60 * k), {"HR": 70.0, "SpO2": 97.0, "RESP": 16.0}))
        monitor.ingest(Reading("bed3", float(T0 + 100 * k), {"HR": 70.0, "SpO2": 97.0, "RESP": 16.0}))
    assert monitor.period_mismatches() == {"bed1": 1.0}  # 100 s is within a factor 2 of 60 s
    assert Monitor(vitals_engine).period_mismatches() == {}  # a card without a period fits any


def test_a_stream_scaled_model_judges_deviation_on_the_readings_before_the_scaling(monkeypatch):
    # The stream scaling clips and moves the level; a constant window's scale floor (1 % of its level) moved with it,
    # so the first change after a constant opening read as a deviation of thousands under the general model.
    import trep_edge.runtime.core.monitor as monitor_module
    from pathlib import Path

    engine = load_engine(Path(__file__).resolve().parents[2] / "models" / "general.onnx", "cpu")
    assert engine.card.scaling == "stream"
    real, seen = monitor_module.window_deviation, []
    monkeypatch.setattr(monitor_module, "window_deviation",
                        lambda windows, span=0, tied=None: seen.append(np.array(windows)) or real(windows, span, tied))
    rng = np.random.default_rng(0)
    values = np.r_[np.full(120, 500.0), 500.0 + rng.normal(0, 2.0, 280)]
    values[300] += 40.0  # a spike far beyond what the scale learnt from the constant opening
    detect_recording(engine, values.reshape(-1, 1), DetectorConfig())
    last = np.concatenate([w[:, -1, 0] for w in seen])
    readings = values.astype(np.float32)  # as the windows hold them
    assert np.isin(last, readings).all() and last.max() == readings.max()  # the readings themselves, spike unclipped


# count channels (card ``normalisation.counts``)


def test_a_count_channel_reaches_model_and_deviation_bent_and_a_drop_to_zero_stands_out_more(univariate_engine,
                                                                                             monkeypatch):
    import trep_edge.runtime.core.monitor as monitor_module

    rng = np.random.default_rng(3)
    x = rng.poisson(20 * np.where(rng.random(900) < 0.03, 6, 1)).astype(np.float64)
    x[800:840] = 0.0  # the feed stops
    bent = np.arcsinh(x / 20.0)
    plain = with_card(univariate_engine, normalisation={"mean": [float(x.mean())], "std": [float(x.std())]})
    counted = with_card(univariate_engine, normalisation={"mean": [float(bent.mean())], "std": [float(bent.std())],
                                                          "counts": [20.0]})  # fmt: skip
    real, seen, stop, tied = monitor_module.window_deviation, {}, {}, {}
    for name, engine in (("plain", plain), ("counted", counted)):
        calls, marks = seen[name], tied[name] = [], []
        monkeypatch.setattr(monitor_module, "window_deviation", lambda windows, span=0, ties=None: (
            calls.append(windows), marks.append(ties), real(windows, span, ties))[-1])
        # Only the deviation signal: the graph is not trained on either input.
        scored, _ = run(Monitor(engine, detector=DetectorConfig(signals=("deviation",))), series_readings(x), 100)
        stop[name] = max(s.surprise for s in scored[800:845])
    # Linear below the level, while the bursts above it no longer widen the scale: the stop stands out more.
    assert stop["counted"] > stop["plain"] + 0.25
    # The count channel's scales have the tied windows' floor (TIED_FLOOR); a plain channel has none.
    assert all(m is None for m in tied["plain"]) and all(m.tolist() == [True] for m in tied["counted"])
    windows = np.concatenate(seen["plain"]) * x.std() + x.mean()  # the readings
    np.testing.assert_allclose(np.concatenate(seen["counted"]), (np.arcsinh(windows / 20.0) - bent.mean()) / bent.std(),
                               rtol=1e-4, atol=1e-4)  # fmt: skip


def test_swapping_in_a_model_that_bends_a_count_channel_restarts_the_windows(univariate_engine, caplog):
    monitor = Monitor(univariate_engine, detector=cold(3))
    run(monitor, [value("a", t, np.sin(t)) for t in range(80)])
    counted = with_card(univariate_engine, normalisation={**univariate_engine.card.normalisation, "counts": [1.0]})
    with caplog.at_level(logging.WARNING, logger="trep_edge.runtime.core.monitor"):
        monitor.swap_engine(counted)
    assert "normalisation" in caplog.text and "reset the windows" in caplog.text and monitor.streams == {"a": "warming"}
    run(monitor, [value("a", t, np.sin(t)) for t in range(80, 160)])
    assert monitor.streams == {"a": "active"}
    monitor.swap_engine(with_card(counted))  # the same input contract keeps the stream warm
    assert monitor.streams == {"a": "active"} and monitor.counters["model_swaps"] == 2


def test_swapping_between_channel_modes_gives_each_stream_the_lanes_of_the_new_mode(univariate_engine):
    fixed = with_card(univariate_engine, period=60.0)  # readings every second: every stream is off the card's period
    independent = with_card(fixed, channel_mode="independent")
    monitor = Monitor(independent, detector=cold(3))
    run(monitor, [xy(t) for t in range(10)])
    assert monitor.period_mismatches() == {"a": 1.0}
    monitor.swap_engine(fixed)
    assert monitor._store.names == ["a"] and monitor.period_mismatches() == {}
    scored, _ = run(monitor, [value("a", t, np.cos(t)) for t in range(10, 20)])
    assert {s.channel for s in scored} == {""} and np.isfinite(scored[-1].score)
    assert monitor.period_mismatches() == {"a": 1.0}
    monitor.swap_engine(independent)
    scored, _ = run(monitor, [xy(t) for t in range(20, 30)])
    assert monitor._store.names == ["a\x1fx", "a\x1fy"] and {s.channel for s in scored[-3:]} <= {"x", "y"}
    assert monitor.period_mismatches() == {"a": 1.0}
    assert Monitor.from_state(independent, npz_round_trip(monitor.state_dict())).streams == monitor.streams
