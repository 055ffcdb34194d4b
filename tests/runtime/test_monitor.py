import dataclasses
import logging
import time

import numpy as np
import pytest

from trep_edge.runtime.alerts import AlertConfig
from trep_edge.runtime.engine import load_engine
from trep_edge.runtime.model_card import Scoring
from trep_edge.runtime.monitor import Monitor
from trep_edge.runtime.offline import prepare, raw_scores
from trep_edge.runtime.payloads import Reading
from trep_edge.runtime.scoring import Calibration, score_series
from trep_edge.runtime.windows import WindowConfig
from round_trips import json_round_trip, npz_round_trip

T0 = 1_700_000_000  # epoch seconds of the first reading; with period 1 s, also its step index


@pytest.fixture(scope="module")
def vitals_engine(vitals_model):
    return load_engine(vitals_model, "cpu")


def with_card(engine, **changes):
    """The same graph behind a modified card (another threshold, or no calibration)."""
    return dataclasses.replace(engine, card=dataclasses.replace(engine.card, **changes))


def always_alerting(engine):
    """A card whose threshold every score exceeds: alerts fire as soon as a stream may alert."""
    return with_card(engine, calibration=Calibration(mu=-100.0, sigma=0.0, n=10))


def value(stream, t, v, **extra):
    return Reading(stream, float(T0 + t), {"value": float(v), **extra})


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


@pytest.fixture(scope="module")
def ucr_offline(ucr_series, univariate_engine):
    values = ucr_series.values[:4300]  # the labelled anomaly is at 4186..4198
    raw = raw_scores(univariate_engine, prepare(univariate_engine, values.reshape(-1, 1)), start=T0)
    return values, raw


@pytest.mark.parametrize("tick_every", [1, 50])
def test_streaming_equals_offline_scoring_on_a_real_series(ucr_offline, univariate_engine, tick_every):
    values, raw = ucr_offline
    card = univariate_engine.card
    engine = with_card(univariate_engine, scoring=dataclasses.replace(card.scoring, beta=2.0))  # some alerts fire
    expected = score_series(raw, card.scoring.z, card.calibration, 2.0, card.scoring.delay)
    assert expected.alerts.sum() > 10

    scored, _ = run(Monitor(engine), series_readings(values), tick_every)
    assert [s.step for s in scored] == list(range(T0, T0 + len(values)))
    np.testing.assert_allclose([s.raw for s in scored], raw, rtol=1e-5)
    np.testing.assert_allclose([s.adjusted for s in scored], expected.adjusted, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal([s.alert for s in scored], expected.alerts)
    np.testing.assert_array_equal([s.threshold for s in scored], expected.thresholds)


def test_streaming_equals_offline_scoring_with_an_online_threshold(ucr_offline, univariate_engine):
    values, raw = ucr_offline
    engine = with_card(univariate_engine, calibration=None, scoring=Scoring(beta=1.0))
    expected = score_series(raw, 21, None, 1.0, 7, min_count=100)
    assert expected.alerts.sum() > 10
    scored, _ = run(Monitor(engine, min_count=100), series_readings(values), tick_every=50)
    np.testing.assert_allclose([s.threshold for s in scored], expected.thresholds, rtol=1e-4)
    np.testing.assert_array_equal([s.alert for s in scored], expected.alerts)
    assert [s.warming for s in scored] == [bool(np.isnan(t)) or i < 21 for i, t in enumerate(expected.thresholds)]


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
    assert np.isnan(scored.adjusted) and scored.raw >= 0  # the first score has no history to compare with


def test_a_step_missing_a_channel_is_not_sent_to_the_model(vitals_engine):
    monitor = Monitor(vitals_engine)
    monitor.ingest(Reading("bed1", float(T0), {"HR": 72.0, "SpO2": 97.0}))
    result = monitor.tick(T0)
    assert result.batch_rows == 0 and np.isnan(result.scored[0].raw) and np.isnan(result.scored[0].values["RESP"])
    assert monitor.counters["incomplete"] == 1


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


def test_a_short_gap_is_missing_steps_and_a_long_gap_restarts_warm_up(univariate_engine):
    monitor = Monitor(always_alerting(univariate_engine), WindowConfig(max_gap=5), warmup=3)
    scored, alerts = run(monitor, [value("a", t, np.sin(t)) for t in range(10)])
    assert [a.state for a in alerts] == ["raised"] and alerts[0].alert_id == "a-1"
    scored, _ = run(monitor, [value("a", 13, 0.1)])  # 3 missing steps: filled, not scored
    assert [s.step - T0 for s in scored] == [13] and monitor.counters["gap_filled_steps"] == 3
    assert not scored[0].warming
    scored, alerts = run(monitor, [value("a", t, np.sin(t)) for t in range(30, 36)])  # 16 missing: reset
    assert [s.warming for s in scored] == [True] * 3 + [False] * 3
    assert monitor.counters["resets"] == 1
    assert alerts == [] and monitor.streams == {"a": "active"}  # the episode raised before the reset is still open


# warm-up and alert episodes


def test_a_stream_warms_up_before_its_alerts_are_published(univariate_engine):
    monitor = Monitor(always_alerting(univariate_engine), alerts=AlertConfig(clear_after=1), warmup=5)
    assert monitor.warmup == 5
    scored, alerts = run(monitor, [value("a", t, np.cos(t)) for t in range(8)])
    assert [s.warming for s in scored] == [True] * 5 + [False] * 3
    assert scored[1].alert  # the detector's own decision is reported during warm-up, as offline
    assert monitor.streams == {"a": "active"}
    (raised,) = alerts
    assert (raised.alert_id, raised.state, raised.severity, raised.stream) == ("a-1", "raised", "critical", "a")
    first_active = scored[5]
    assert raised.timestamp == first_active.timestamp and raised.score == first_active.raw
    assert raised.adjusted == first_active.adjusted and raised.threshold == -100.0
    assert raised.window_end == first_active.step and raised.window_start == first_active.step - 63
    assert raised.values == first_active.values


def test_default_warm_up_is_the_cards_z(univariate_engine):
    monitor = Monitor(univariate_engine)
    scored, _ = run(monitor, series_readings(np.sin(np.arange(30))))
    assert sum(s.warming for s in scored) == univariate_engine.card.scoring.z


def test_removing_a_stream_clears_its_open_episode(univariate_engine):
    monitor = Monitor(always_alerting(univariate_engine), warmup=1)
    run(monitor, [value("a", t, np.cos(t)) for t in range(4)] + [value("b", 0, 1.0)])
    (cleared,) = monitor.remove_stream("a", now=5.0)
    assert (cleared.alert_id, cleared.state) == ("a-1", "cleared")
    assert list(monitor.streams) == ["b"]
    assert monitor.remove_stream("b") == []


def test_episodes_outlive_resets_and_swaps_and_their_numbers_keep_counting(univariate_engine):
    never_alerting = with_card(univariate_engine, calibration=Calibration(mu=100.0, sigma=0.0, n=10))
    monitor = Monitor(always_alerting(univariate_engine), alerts=AlertConfig(clear_after=1), warmup=2)
    _, alerts = run(monitor, [value("a", t, np.cos(t)) for t in range(4)])
    assert [(a.alert_id, a.state) for a in alerts] == [("a-1", "raised")]
    monitor.swap_engine(never_alerting)  # same inputs, other card: scores restart, the episode stays open
    scored, alerts = run(monitor, [value("a", t, np.cos(t)) for t in range(4, 7)])
    assert [s.warming for s in scored] == [True, True, False]
    assert [(a.alert_id, a.state) for a in alerts] == [("a-1", "cleared")]
    monitor.reset_stream("a")
    assert monitor.streams == {"a": "warming"}
    monitor.swap_engine(always_alerting(univariate_engine))
    _, alerts = run(monitor, [value("a", t, np.cos(t)) for t in range(7, 10)])
    assert [(a.alert_id, a.state) for a in alerts] == [("a-2", "raised")]
    assert monitor.counters["streams_reset"] == 1 and monitor.counters["model_swaps"] == 2
    with pytest.raises(KeyError):
        monitor.reset_stream("nope")


# state and hot swap


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_state_round_trip_gives_identical_next_outputs(univariate_engine, round_trip):
    engine = with_card(univariate_engine, calibration=None, scoring=Scoring(beta=1.0, delay=2))
    rng = np.random.default_rng(3)
    first = [value(s, t, rng.normal()) for t in range(40) for s in ("a", "b", "c")]
    later = [value(s, t, rng.normal() * (5 if t == 55 else 1)) for t in range(41, 70) for s in ("a", "b", "c")]
    monitor = Monitor(engine, WindowConfig(max_gap=3), AlertConfig(clear_after=2), warmup=4, min_count=20)
    run(monitor, first)
    monitor.ingest(value("a", 40, 0.5))  # pending at the save
    restored = Monitor.from_state(engine, round_trip(monitor.state_dict()))
    assert restored.counters == monitor.counters and restored.streams == monitor.streams
    expected, got = run(monitor, later, 3), run(restored, later, 3)
    assert len(expected[0]) == 88 and len(expected[1]) > 0
    np.testing.assert_equal([dataclasses.asdict(s) for s in got[0]], [dataclasses.asdict(s) for s in expected[0]])
    np.testing.assert_equal([dataclasses.asdict(a) for a in got[1]], [dataclasses.asdict(a) for a in expected[1]])


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


def test_swapping_in_other_weights_keeps_windows_and_restarts_scores(univariate_engine, caplog):
    monitor = Monitor(univariate_engine, warmup=3)
    run(monitor, [value("a", t, np.sin(t)) for t in range(10)])
    assert monitor.streams == {"a": "active"}
    with caplog.at_level(logging.INFO, logger="trep_edge.runtime.monitor"):
        monitor.swap_engine(dataclasses.replace(univariate_engine, sha256="other"))
    assert "kept the windows" in caplog.text
    scored, _ = run(monitor, [value("a", 10, 0.5)])
    assert scored[0].warming and np.isnan(scored[0].adjusted) and not np.isnan(scored[0].raw)
    assert monitor.counters["resets"] == 0


def test_swapping_in_a_model_with_other_channels_resets_the_windows(univariate_engine, vitals_engine, caplog):
    monitor = Monitor(univariate_engine, warmup=3)
    run(monitor, [value("bed1", t, np.sin(t)) for t in range(10)])
    monitor.ingest(value("bed1", 10, 0.0))  # pending: discarded, its channel is gone
    with caplog.at_level(logging.WARNING, logger="trep_edge.runtime.monitor"):
        monitor.swap_engine(vitals_engine)
    assert "channels, window" in caplog.text and "reset the windows" in caplog.text
    assert monitor.streams == {"bed1": "warming"} and monitor.counters["discarded"] == 1
    assert monitor.ingest(value("bed1", 11, 1.0)) == "empty"
    monitor.ingest(Reading("bed1", float(T0 + 11), {"HR": 70.0, "SpO2": 97.0, "RESP": 15.0}))
    result = monitor.tick(T0 + 11)
    assert result.batch_rows == 2 and result.scored[0].window_start == T0 + 11 - 31
