import io
import json

import numpy as np
import pytest

from trep_edge.runtime.core.alerts import STATUS_OF_STATE, AlertConfig, AlertEvent, AlertTracker, Lifecycle

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


def test_an_episode_keeps_the_cause_that_raised_it_until_it_clears():
    tracker = AlertTracker(AlertConfig(clear_after=1), n_streams=2)
    step = lambda scores, alerts, stuck=None: [(e.stream_idx, e.state, e.cause) for e in tracker.step(  # noqa: E731
        np.array([0, 1]), np.array(scores), 4.0, np.array(alerts), stuck)]  # fmt: skip
    assert step([5.0, 5.0], [True, True], np.array([True, False])) == [(0, "raised", "stuck"), (1, "raised", "anomaly")]
    assert step([9.0, 1.0], [False, False]) == [(0, "updated", "stuck"), (1, "cleared", "anomaly")]
    assert step([1.0, 1.0], [False, False]) == [(0, "cleared", "stuck")]
    assert step([5.0, 1.0], [True, False], np.array([False, False])) == [(0, "raised", "anomaly")]
    restored = AlertTracker.from_state({k: v for k, v in tracker.state_dict().items() if k != "stuck_"})
    assert not restored.stuck_.any()  # a checkpoint from before causes: its open episodes are anomalies
    # A reading beyond its channel's range raises a `range` episode; a stuck sensor's flag wins where both are set.
    def ranged(scores, alerts, stuck, beyond):
        return [(e.stream_idx, e.state, e.cause) for e in tracker.step(
            np.array([0, 1]), np.array(scores), 4.0, np.array(alerts), np.array(stuck), np.array(beyond))]

    assert ranged([1.0, 1.0], [False, False], [False, False], [True, True]) == [(0, "cleared", "anomaly")]
    assert ranged([3.0, 5.0], [True, True], [False, True], [True, True]) == [(0, "raised", "range"),
                                                                           (1, "raised", "stuck")]
    assert ranged([9.0, 1.0], [False, False], [False, False], [False, False]) == [(0, "updated", "range"),
                                                                                (1, "cleared", "stuck")]
    assert not AlertTracker.from_state({k: v for k, v in tracker.state_dict().items() if k != "ranged_"}).ranged_.any()


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


# -- lifecycle: what the daemon publishes, in Grafana's vocabulary -------------------------------------------------


def _changes(lifecycle, steps):
    """Feed (stream, warming, hot_run) steps at timestamps 0, 1, ...; return [(t, stream, status, reason)]."""
    out = []
    for t, (stream, warming, hot) in enumerate(steps):
        change = lifecycle.scored(stream, warming, float(t), hot, {"hot_readings": hot})
        if change is not None:
            out.append((t, change.stream, change.status, change.reason))
    return out


def _episode(stream, state, n=1):
    return {"kind": "anomaly", "alert_id": f"{stream}-{n}", "stream": stream, "state": state}


def test_episode_states_map_to_firing_and_resolved():
    assert STATUS_OF_STATE == {"raised": "firing", "updated": "firing", "cleared": "resolved"}


def test_a_streams_first_scored_reading_is_ok_once_and_for_the_state_topic_only():
    lifecycle = Lifecycle()
    changes = _changes(lifecycle, [("a", True, 0), ("a", False, 0), ("a", False, 0), ("b", False, 0)])
    assert changes == [(1, "a", "ok", "first_score"), (3, "b", "ok", "first_score")]
    first = lifecycle.scored("c", False, 9.0)
    assert first.to_alerts is False and first.retain is None and first.timestamp == 9.0


def test_a_stream_with_an_episode_before_its_first_score_gets_no_ok_over_it():
    lifecycle = Lifecycle()
    lifecycle.episode("a", _episode("a", "raised"))
    lifecycle.episode("a", _episode("a", "cleared"))
    assert _changes(lifecycle, [("a", False, 0)]) == []  # the retained state stays "resolved"


def test_pending_is_published_once_per_hot_run_and_ends_in_ok_or_firing():
    lifecycle = Lifecycle(pending=True)
    steps = [("a", False, 0), ("a", False, 1), ("a", False, 2), ("a", False, 0), ("a", False, 0), ("a", False, 1)]
    assert _changes(lifecycle, steps) == [(0, "a", "ok", "first_score"), (1, "a", "pending", "pending"),
                                          (3, "a", "ok", "pending_ended"), (5, "a", "pending", "pending")]
    lifecycle.episode("a", _episode("a", "raised"))  # the run reached debounce: firing, pending is over
    assert lifecycle.pending == set()
    assert _changes(lifecycle, [("a", False, 0), ("a", False, 3)]) == []  # an open episode is the state
    lifecycle.episode("a", _episode("a", "cleared"))
    assert _changes(lifecycle, [("a", False, 0)]) == []  # resolved: no ok on top of it


def test_a_reading_before_the_latest_of_its_tick_can_only_give_the_first_ok():
    lifecycle = Lifecycle(pending=True)
    assert lifecycle.scored("a", False, 1.0).reason == "first_score"  # hot run unknown: no pending decided on it
    assert lifecycle.scored("a", False, 2.0, 2).status == "pending"
    assert lifecycle.scored("a", False, 3.0) is None  # an earlier reading of a later tick does not end the run


def test_pending_carries_the_gates_count_and_is_off_by_default():
    on = Lifecycle(pending=True)
    on.scored("a", False, 0.0, 0)
    change = on.scored("a", False, 1.0, 2, {"hot_readings": 2, "debounce": 3})
    assert change.status == "pending" and change.to_alerts and change.details == {"hot_readings": 2, "debounce": 3}
    assert _changes(Lifecycle(), [("a", False, 0), ("a", False, 2), ("a", False, 0)]) == [(0, "a", "ok", "first_score")]
    on.pending_enabled = False  # turned off by a reload while pending: the next reading closes it
    assert on.scored("a", False, 2.0, 3).reason == "pending_ended"


def test_no_data_once_per_silence_with_the_open_episode_then_recovery_retains_the_episode_again():
    lifecycle = Lifecycle()
    raised = _episode("a", "raised", 4)
    lifecycle.episode("a", raised)
    [silent] = lifecycle.silent(["a", "b"], 100.0, 30.0)[:1]
    assert (silent.stream, silent.status, silent.open_alert, silent.details) == ("a", "no_data", "a-4",
                                                                                  {"silent_for": 30.0})
    assert silent.to_alerts and silent.retain is None
    assert lifecycle.silent(["a", "b"], 101.0, 30.0) == []  # once per silence
    assert lifecycle.scored("b", False, 102.0, 0) is None  # a late score does not overwrite no_data
    assert lifecycle.accepted("c", 103.0) is None
    back = lifecycle.accepted("a", 104.0)
    assert (back.status, back.reason, back.open_alert, back.retain, back.details) == (
        "ok", "recovered", "a-4", raised, {"no_data_since": 100.0})
    assert back.to_alerts
    plain = lifecycle.accepted("b", 105.0)
    assert plain.retain is None and plain.open_alert is None
    assert lifecycle.accepted("a", 106.0) is None and lifecycle.stale == {}


def test_no_data_ends_a_pending_run_and_forget_drops_everything():
    lifecycle = Lifecycle(pending=True)
    _changes(lifecycle, [("a", False, 1)])
    lifecycle.silent(["a"], 10.0, 5.0)
    assert lifecycle.pending == set() and "a" in lifecycle.stale
    lifecycle.episode("b", _episode("b", "raised"))
    lifecycle.forget(["a", "b"])
    assert (lifecycle.known, lifecycle.open, lifecycle.pending, lifecycle.stale) == (set(), {}, set(), {})


def test_restore_keeps_stale_pending_and_episodes_of_restored_streams_only():
    before = Lifecycle(pending=True)
    before.episode("a", _episode("a", "updated", 2))
    _changes(before, [("p", False, 0), ("p", False, 2)])
    before.silent(["a", "s", "gone"], 50.0, 10.0)
    saved = json.loads(json.dumps(before.to_json()))  # as the checkpoint meta carries it
    streams = {"a": "active", "s": "warming", "p": "active", "w": "warming"}
    after = Lifecycle.restore(False, saved, streams, {"a": "a-2"})
    assert after.stale == {"a": 50.0, "s": 50.0} and after.pending == {"p"} and after.pending_enabled is False
    assert after.open == {"a": _episode("a", "updated", 2)}
    assert after.known == {"a", "s", "p"}  # "w" is warming and was never reported: its first score gets an ok
    assert after.silent(["a"], 60.0, 10.0) == []  # no second no_data after a restart
    assert after.accepted("a", 61.0).retain == _episode("a", "updated", 2)
    assert after.scored("w", False, 62.0, 0).reason == "first_score"


def test_restore_without_a_saved_lifecycle_takes_open_episodes_from_the_tracker():
    after = Lifecycle.restore(True, None, {"a": "active", "b": "active"}, {"b": "b-7"})
    assert after.open == {"b": {"alert_id": "b-7"}} and after.stale == {} and after.known == {"a", "b"}
    assert after.scored("b", False, 1.0, 3) is None  # an open episode: no pending over it
    [silent] = after.silent(["b"], 2.0, 1.0)
    assert silent.open_alert == "b-7"
    back = after.accepted("b", 3.0)
    assert back.open_alert == "b-7" and back.retain is None  # the episode's message is unknown: ok names it
    assert after.to_json()["open"] == {}  # an id-only entry is not saved as a message


def test_tracker_names_its_open_episodes():
    tracker = AlertTracker(n_streams=3)
    tracker.step(np.array([0, 2]), np.array([3.0, 3.0]), 1.0, np.array([True, True]))
    tracker.step(np.array([0]), np.array([0.0]), 1.0, np.array([False]))  # one reading below: still open
    assert tracker.open_ids(["x", "y", "z"]) == {"x": "x-1", "z": "z-1"}


def test_pending_is_not_part_of_the_trackers_saved_state():
    """A checkpoint must still load in a daemon from before the setting (a rollback keeps warm streams)."""
    tracker = AlertTracker(AlertConfig(pending=True), n_streams=1)
    restored = AlertTracker.from_state(tracker.state_dict())
    assert restored.config == AlertConfig()
