import io
import json

import numpy as np
import pytest

from trep_edge.runtime.alerts import AlertConfig, AlertEvent, AlertTracker

ONE = np.array([0])
# With the default threshold 1 of run(): 1.2 is a warning-level exceedance (critical starts at 1.5).


def run(tracker, scores, thr=1.0, alerts=None):
    """Feed one stream's scores; the detector's alert flags default to score > thr (an alert on every exceedance).
    Returns [(t, state, severity, episode)] for every event."""
    scores = np.asarray(scores, dtype=float)
    alerts = scores > thr if alerts is None else np.asarray(alerts, dtype=bool)
    events = []
    for t, x in enumerate(scores):
        for e in tracker.step(ONE, np.array([x]), np.array([thr]), alerts[t : t + 1]):
            events.append((t, e.state, e.severity, e.episode))
    return events


def test_an_episode_opens_on_the_detectors_alert_and_on_nothing_else():
    tracker = AlertTracker(AlertConfig(clear_after=1, clear_ratio=1.0), n_streams=1)
    # Scores above the threshold without an alert (the detector's refractory period, say) open nothing.
    assert run(tracker, [1.2, 1.2, 0, 1.2, 0], alerts=[0, 0, 0, 1, 0]) == [
        (3, "raised", "warning", 1), (4, "cleared", "warning", 1)]


def test_an_alert_during_an_open_episode_raises_nothing_new():
    tracker = AlertTracker(AlertConfig(clear_after=2), n_streams=1)
    assert run(tracker, [1.2, 1.2, 1.2], alerts=[1, 0, 1]) == [(0, "raised", "warning", 1)]


def test_clear_needs_consecutive_readings_below_the_clear_level():
    tracker = AlertTracker(AlertConfig(clear_after=2, clear_ratio=0.5), n_streams=1)
    # threshold 1, clear level 0.5: 0.7 is below the threshold but not low enough; it also restarts the run.
    events = run(tracker, [1.2, 0.7, 0.4, 0.7, 0.4, 0.4, 0.4])
    assert events == [(0, "raised", "warning", 1), (5, "cleared", "warning", 1)]


def test_unknown_readings_neither_advance_nor_reset_a_clear_run():
    tracker = AlertTracker(AlertConfig(clear_after=2), n_streams=1)
    assert run(tracker, [1.2, 0, np.nan, np.nan, 0]) == [(0, "raised", "warning", 1), (4, "cleared", "warning", 1)]


def test_severity_escalates_to_critical_and_keeps_its_peak_until_cleared():
    tracker = AlertTracker(AlertConfig(clear_after=1, critical_ratio=1.5), n_streams=1)
    # threshold 2: warning above 2, critical above 3, clear below 1.6.
    events = run(tracker, [2.5, 3.5, 2.5, 3.5, 1.0, 3.1, 0.0], thr=2.0)
    assert events == [
        (0, "raised", "warning", 1),
        (1, "updated", "critical", 1),
        (4, "cleared", "critical", 1),
        (5, "raised", "critical", 2),
        (6, "cleared", "critical", 2),
    ]


def test_critical_can_be_disabled():
    tracker = AlertTracker(AlertConfig(critical_ratio=float("inf")), n_streams=1)
    assert run(tracker, [100.0, 0.0], thr=0.0) == [(0, "raised", "warning", 1)]


def test_event_carries_score_threshold_and_formats_a_stable_id():
    tracker = AlertTracker(n_streams=3)
    events = tracker.step(np.array([2, 0]), np.array([3.0, 0.5]), np.array([1.5, 1.0]), np.array([True, False]))
    expected = AlertEvent(stream_idx=2, state="raised", severity="critical", score=3.0, threshold=1.5, episode=1)
    assert events == [expected]
    assert events[0].alert_id("pump-7") == "pump-7-1"


def test_streams_step_independently_and_in_any_order():
    rng = np.random.default_rng(0)
    scores = rng.normal(1.0, 1.0, size=(200, 4))
    scores[rng.random(scores.shape) < 0.05] = np.nan
    thr = rng.normal(1.5, 0.1, size=(200, 4))
    alerts = scores > thr
    cfg = AlertConfig(clear_after=3, clear_ratio=0.7)
    together = AlertTracker(cfg, n_streams=4)
    merged = []
    for t in range(200):
        order = rng.permutation(4)
        events = together.step(order, scores[t, order], thr[t, order], alerts[t, order])
        merged += [(e.stream_idx, t, e.state, e.severity, e.episode) for e in events]
    alone = []
    for s in range(4):
        tracker = AlertTracker(cfg, n_streams=1)
        for t in range(200):
            events = tracker.step(ONE, scores[t, s : s + 1], thr[t, s : s + 1], alerts[t, s : s + 1])
            alone += [(s, t, e.state, e.severity, e.episode) for e in events]
    assert len(alone) > 10
    assert sorted(merged) == sorted(alone)


@pytest.mark.parametrize("fmt", ["npz", "json"])
def test_state_round_trip_gives_identical_next_events(fmt):
    rng = np.random.default_rng(1)
    scores = rng.normal(1.0, 1.0, size=(300, 3))
    alerts = scores > 1.5
    cfg = AlertConfig(clear_after=2, clear_ratio=0.6, critical_ratio=2.0)
    tracker = AlertTracker(cfg, n_streams=3)
    idx = np.arange(3)
    for t in range(150):
        tracker.step(idx, scores[t], 1.5, alerts[t])
    state = tracker.state_dict()
    if fmt == "npz":
        buf = io.BytesIO()
        np.savez(buf, **state)
        buf.seek(0)
        state = dict(np.load(buf))
    else:
        state = json.loads(json.dumps({k: v.tolist() for k, v in state.items()}))
    restored = AlertTracker.from_state(state)
    assert restored.config == cfg
    n_events = 0
    for t in range(150, 300):
        a, b = tracker.step(idx, scores[t], 1.5, alerts[t]), restored.step(idx, scores[t], 1.5, alerts[t])
        assert a == b
        n_events += len(a)
    assert n_events > 5


def test_added_streams_start_idle():
    tracker = AlertTracker(n_streams=1)
    tracker.step(ONE, np.array([5.0]), np.array([1.0]), np.array([True]))
    new = tracker.add_streams(2)
    np.testing.assert_array_equal(new, [1, 2])
    np.testing.assert_array_equal(tracker.active_, [True, False, False])
    np.testing.assert_array_equal(tracker.episode_, [1, 0, 0])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"clear_after": 0}, "clear_after"),
        ({"clear_ratio": 1.2}, "clear_ratio"),
        ({"critical_ratio": 0.9}, "critical_ratio"),
    ],
)
def test_config_rejects_values_out_of_range(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AlertConfig(**kwargs)
