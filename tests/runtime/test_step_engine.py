"""The incremental step engine of a causal model: selection, exactness against the windowed engine, state."""

import numpy as np
import pytest

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine, probe_windows
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.offline import prepare, raw_scores
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.step_engine import StepEngine, StepGraph
from round_trips import npz_round_trip

T0 = 1_700_000_000
LOW = DetectorConfig(threshold=1.0, refractory=10)  # a low threshold, so that alerts fire


def _step_and_full(path):
    """The model with the step engine and with the full graph forced."""
    return load_engine(path, "cpu", engine="step"), load_engine(path, "cpu", engine="full")


@pytest.fixture(scope="module")
def engines(causal_model):
    return _step_and_full(causal_model)


@pytest.fixture(scope="module")
def other_engines(causal_model_other):
    return _step_and_full(causal_model_other)


def test_the_causal_model_carries_an_exact_step_graph(causal_model):
    engine = load_engine(causal_model, "cpu")
    assert "step" in engine.card.graphs
    assert engine.candidates["step"].startswith("exact")
    windows, starts = probe_windows(engine.card)
    step = load_engine(causal_model, "cpu", engine="step")
    full = load_engine(causal_model, "cpu", engine="full")
    assert step.status["engine"] == "step"
    for ours, reference in zip(step.last_step_pair(windows, starts), full.last_step_pair(windows, starts)):
        np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_offline_scores_through_the_step_engine_equal_the_full_graph(engines, ucr_series):
    step, full = engines
    values = prepare(full, ucr_series.values[:700].reshape(-1, 1))
    values[[100, 350, 351]] = np.nan  # missing steps inside the sliding windows
    ours, reference = raw_scores(step, values, start=T0), raw_scores(full, values, start=T0)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(reference))
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=0)


def test_state_bytes_follow_the_ring_lengths(engines):
    step, _ = engines
    layout = StepGraph(step.graphs["step"]).layout
    assert layout.receptive_field <= step.card.window
    expected = 4 * sum(2 * d * w for d, w in zip(layout.dilations, layout.widths))
    assert layout.state_bytes_per_stream == expected


def test_advancing_a_stream_without_state_is_refused(engines):
    step, _ = engines
    steps = StepEngine(StepGraph(step.graphs["step"]), step.card)
    steps.add_streams(1)
    with pytest.raises(ValueError, match="rebuild"):
        steps.advance(np.array([0]), np.zeros((1, 1), np.float32), np.array([5]))


def _readings(values, stream, offset, rng):
    """A recording with a short gap (filled), a long gap (reset), missing values and a late reading."""
    out = []
    for t, v in enumerate(values):
        if 300 <= t < 305 or 700 <= t < 760:
            continue
        reading = float("nan") if rng.random() < 0.02 else float(v)
        out.append(Reading(stream, float(T0 + t + offset), {"value": reading}))
    return out


def _run(engine, other, series):
    rng = np.random.default_rng(0)
    values = series.values[:1100]
    readings = sorted(_readings(values, "a", 0, rng) + _readings(values, "b", 7, rng) + _readings(values, "c", 250, rng),
                      key=lambda r: r.timestamp)  # fmt: skip
    monitor, scored, alerts = Monitor(engine, detector=LOW), [], []
    for i, reading in enumerate(readings):
        monitor.ingest(reading)
        if i == 900:
            monitor.reset_stream("b")
        if i == 1500:
            monitor.swap_engine(other)  # same inputs, other weights: windows kept, state rebuilt from them
        if i == 2200:
            monitor = Monitor.from_state(monitor.engine, npz_round_trip(monitor.state_dict()))
        if i % 5 == 0 or i == len(readings) - 1:
            result = monitor.tick(reading.timestamp)
            scored += result.scored
            alerts += result.alerts
    return scored, alerts, monitor


def test_step_engine_scores_and_alerts_equal_the_windowed_engine(engines, other_engines, ucr_series):
    step, full = engines
    step_b, full_b = other_engines
    scored_s, alerts_s, monitor = _run(step, step_b, ucr_series)
    scored_f, alerts_f, _ = _run(full, full_b, ucr_series)
    assert [(s.stream, s.step) for s in scored_s] == [(s.stream, s.step) for s in scored_f]
    raw_s, raw_f = np.array([s.raw for s in scored_s]), np.array([s.raw for s in scored_f])
    np.testing.assert_array_equal(np.isnan(raw_s), np.isnan(raw_f))
    np.testing.assert_allclose(raw_s, raw_f, atol=1e-5, rtol=0)
    # The novelty memory stores float16: the engines' last-bit differences can round a stored representation to
    # neighbouring float16 values, which moves a surprise by ~1e-4 (alerts are compared exactly below).
    np.testing.assert_allclose([s.score for s in scored_s], [s.score for s in scored_f], atol=1e-3, rtol=0)
    assert [s.alert for s in scored_s] == [s.alert for s in scored_f]
    assert sum(s.alert for s in scored_f) > 5
    assert [(a.alert_id, a.state) for a in alerts_s] == [(a.alert_id, a.state) for a in alerts_f]
    assert monitor.counters["resets"] >= 3 and monitor.counters["model_swaps"] == 1


def test_a_restored_monitor_resumes_from_the_saved_state_without_rebuilding(engines, ucr_series):
    step, _ = engines
    monitor = Monitor(step)
    for t, v in enumerate(ucr_series.values[:200]):
        monitor.ingest(Reading("a", float(T0 + t), {"value": float(v)}))
    monitor.tick(T0 + 200.0)
    state = npz_round_trip(monitor.state_dict())
    restored = Monitor.from_state(step, state)
    assert restored.state_dict()["steps/valid"].all()  # the saved step state, not a stale one to rebuild
    calls = restored.counters["engine_calls"]
    restored.ingest(Reading("a", float(T0 + 200), {"value": float(ucr_series.values[200])}))
    monitor.ingest(Reading("a", float(T0 + 200), {"value": float(ucr_series.values[200])}))
    ours, theirs = restored.tick(T0 + 201.0), monitor.tick(T0 + 201.0)
    assert restored.counters["engine_calls"] == calls + 1
    assert ours.scored[0].raw == pytest.approx(theirs.scored[0].raw, abs=1e-6)
