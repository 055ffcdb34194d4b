"""The paper protocol's scores (``runtime.core.scoring``) and its alert rule (``evaluation.paper_protocol``)."""
import json

import numpy as np
import pytest

from trep_edge.runtime.core.scoring import (EPS, Calibration, ScoreHistory, adjust_scores, calibrate, raw_score,
                                            threshold)
from trep_edge.training.evaluation.paper_protocol import (DelayRule, OnlineCalibration, StreamScorer, detect,
                                                          score_series)
from round_trips import json_round_trip, npz_round_trip


def random_raw(rng, n, missing=0.05):
    raw = rng.gamma(2.0, 1.5, size=n)
    raw[rng.random(n) < 0.01] *= 20  # spikes, so some alerts fire
    raw[rng.random(n) < missing] = np.nan
    return raw


def interleave(rng, lengths, n_streams_offset=0):
    """Ticks of (stream indices, positions): each stream's points in order, streams mixed in random orders."""
    pos = np.zeros(len(lengths), dtype=int)
    ticks = []
    while (pos < lengths).any():
        live = np.flatnonzero(pos < lengths)
        chosen = rng.permutation(live)[: rng.integers(1, live.size + 1)]
        ticks.append((chosen + n_streams_offset, pos[chosen].copy()))
        pos[chosen] += 1
    return ticks


# raw_score


def test_raw_score_is_l1_over_last_axis_in_float64():
    zu = np.array([[1.0, 2.0], [0.0, 0.0]], dtype=np.float32)
    zm = np.array([[0.0, 4.0], [1.0, -1.0]], dtype=np.float32)
    out = raw_score(zu, zm)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [3.0, 2.0])
    np.testing.assert_array_equal(raw_score(zu[None], zm[None]), [[3.0, 2.0]])


def test_raw_score_of_a_row_does_not_depend_on_the_batch_it_is_in():
    rng = np.random.default_rng(0)
    zu, zm = rng.normal(size=(2, 37, 320)).astype(np.float32)
    full = raw_score(zu, zm)
    for i in (0, 5, 36):
        assert raw_score(zu[i : i + 1], zm[i : i + 1])[0] == full[i]
        assert raw_score(zu[i], zm[i]) == full[i]


def test_raw_score_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="same shape"):
        raw_score(np.zeros((2, 3)), np.zeros((2, 4)))


# adjusted scores


def test_adjust_scores_by_hand():
    out = adjust_scores(np.array([1.0, 2.0, 4.0, 1.0]), z=2)
    np.testing.assert_allclose(out, [np.nan, 1.0, 2.5 / 1.5, -2.0 / 3.0], rtol=1e-15)


def test_adjust_scores_min_history_leaves_early_scores_undefined():
    out = adjust_scores(np.array([1.0, 2.0, 4.0, 1.0]), z=2, min_history=2)
    np.testing.assert_allclose(out, [np.nan, np.nan, 2.5 / 1.5, -2.0 / 3.0])


def test_adjust_scores_skips_missing_readings():
    # The NaN neither enters the mean nor counts as a point: 3 is compared with [1] (z=2), then 5 with [1, 3].
    out = adjust_scores(np.array([1.0, np.nan, 3.0, 5.0]), z=2)
    np.testing.assert_allclose(out, [np.nan, np.nan, 2.0, 1.5])


def test_adjust_scores_guards_a_zero_mean():
    out = adjust_scores(np.array([0.0, 0.0, 1.0]), z=2)
    np.testing.assert_array_equal(out, [np.nan, 0.0, 1.0 / EPS])


def test_adjust_scores_rejects_negative_and_infinite_raw_scores():
    with pytest.raises(ValueError, match="raw scores"):
        adjust_scores(np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="raw scores"):
        adjust_scores(np.array([1.0, np.inf]))


def test_streaming_history_equals_offline_on_one_stream():
    raw = random_raw(np.random.default_rng(1), 500)
    hist = ScoreHistory(z=21, n_streams=1)
    streamed = np.array([hist.push(np.array([0]), raw[t : t + 1])[0] for t in range(raw.size)])
    np.testing.assert_array_equal(streamed, adjust_scores(raw, z=21))


@pytest.mark.parametrize("seed", [2, 3])
def test_streaming_history_equals_offline_with_interleaved_streams(seed):
    rng = np.random.default_rng(seed)
    lengths = np.array([300, 50, 170, 5, 240])
    series = [random_raw(rng, n, missing=0.1) for n in lengths]
    hist = ScoreHistory(z=7, n_streams=len(series), min_history=3)
    got = [np.full(n, -1.0) for n in lengths]
    for streams, pos in interleave(rng, lengths):
        adjusted = hist.push(streams, np.array([series[s][p] for s, p in zip(streams, pos)]))
        for s, p, a in zip(streams, pos, adjusted):
            got[s][p] = a
    for s, raw in enumerate(series):
        np.testing.assert_array_equal(got[s], adjust_scores(raw, z=7, min_history=3))


def test_history_added_removed_and_reset_streams_start_fresh():
    rng = np.random.default_rng(4)
    a, b, c = random_raw(rng, 40), random_raw(rng, 40), random_raw(rng, 40)
    hist = ScoreHistory(z=5, n_streams=2)
    out_b = []
    for t in range(20):
        out = hist.push(np.array([0, 1]), np.array([a[t], b[t]]))
        out_b.append(out[1])
    np.testing.assert_array_equal(hist.add_streams(1), [2])
    hist.remove_streams(np.array([0]))  # b becomes stream 0, c stream 1
    out_c = []
    for t in range(20, 40):
        out = hist.push(np.array([1, 0]), np.array([c[t - 20], b[t]]))
        out_c.append(out[0])
        out_b.append(out[1])
    np.testing.assert_array_equal(out_b, adjust_scores(b, z=5))
    np.testing.assert_array_equal(out_c, adjust_scores(c[:20], z=5))
    hist.reset_streams(np.array([0]))
    assert np.isnan(hist.push(np.array([0]), np.array([1.0]))[0])


def test_history_rejects_bad_stream_indices():
    hist = ScoreHistory(z=3, n_streams=2)
    with pytest.raises(ValueError, match="repeat"):
        hist.push(np.array([0, 0]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="0..1"):
        hist.push(np.array([2]), np.array([1.0]))
    with pytest.raises(ValueError, match="raw must have shape"):
        hist.push(np.array([0, 1]), np.array([1.0]))


# calibration


def test_calibrate_matches_numpy_on_finite_scores():
    rng = np.random.default_rng(5)
    adjusted = rng.normal(0.1, 0.3, size=1000)
    with_nan = np.concatenate([[np.nan], adjusted, [np.nan, np.inf]])
    cal = calibrate(with_nan, source="train")
    assert cal == Calibration(float(np.mean(adjusted)), float(np.std(adjusted)), 1000, "train")
    assert threshold(cal, 4.0) == cal.mu + 4.0 * cal.sigma
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def test_calibrate_refuses_too_few_scores():
    with pytest.raises(ValueError, match="at least 2"):
        calibrate(np.array([np.nan, 1.0]))


def test_online_calibration_equals_numpy_expanding_statistics():
    rng = np.random.default_rng(6)
    data = rng.normal([0.0, 5.0, -2.0], [1.0, 0.1, 3.0], size=(200, 3))
    online = OnlineCalibration(beta=4.0, min_count=1000, n_streams=3)  # never warm: nothing is excluded
    idx = np.arange(3)
    for t in range(200):
        online.update(idx, data[t])
        count, mean, std = online.stats(idx)
        np.testing.assert_array_equal(count, t + 1)
        np.testing.assert_allclose(mean, data[: t + 1].mean(axis=0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(std, data[: t + 1].std(axis=0), rtol=1e-9, atol=1e-12)
        assert np.isnan(online.threshold(idx)).all()


def test_online_calibration_warms_up_then_ignores_exceedances_and_nan():
    rng = np.random.default_rng(7)
    normal = rng.normal(size=50)
    online = OnlineCalibration(beta=3.0, min_count=50, n_streams=2)
    for x in normal[:-1]:
        online.update(np.array([0]), np.array([x]))
    assert np.isnan(online.threshold(np.array([0])))[0]
    online.update(np.array([0]), normal[-1:])
    thr = online.threshold(np.array([0, 1]))
    np.testing.assert_allclose(thr[0], normal.mean() + 3.0 * normal.std())
    assert np.isnan(thr[1])
    before = online.state_dict()
    online.update(np.array([0]), np.array([thr[0] + 1e-9]))
    online.update(np.array([0]), np.array([np.nan]))
    for name in ("count_", "mean_", "m2_"):
        np.testing.assert_array_equal(online.state_dict()[name], before[name])
    online.update(np.array([0]), np.array([thr[0]]))  # at the threshold is not above it: learned
    assert online.count_[0] == 51


# detection


def test_detect_suppresses_delay_points_after_each_alert():
    adjusted = np.array([0, 5, 5, 5, 5, 5, 0, 5, np.nan, 5], dtype=float)
    np.testing.assert_array_equal(detect(adjusted, 1.0, delay=2), [0, 1, 0, 0, 1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(detect(adjusted, 1.0, delay=0), [0, 1, 1, 1, 1, 1, 0, 1, 0, 1])
    thresholds = np.array([np.nan, 9, 1, 1, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(detect(adjusted, thresholds, delay=2), [0, 0, 1, 0, 0, 1, 0, 0, 0, 1])


def test_detector_equals_detect_with_interleaved_streams():
    rng = np.random.default_rng(8)
    lengths = np.array([400, 90, 250])
    series = [rng.normal(size=n) for n in lengths]
    for s in series:
        s[rng.random(s.size) < 0.05] = np.nan
    thr = [rng.normal(1.0, 0.2, size=n) for n in lengths]
    det = DelayRule(delay=3, n_streams=3)
    got = [np.zeros(n, dtype=bool) for n in lengths]
    for streams, pos in interleave(rng, lengths):
        alerts = det.step(
            streams,
            np.array([series[s][p] for s, p in zip(streams, pos)]),
            np.array([thr[s][p] for s, p in zip(streams, pos)]),
        )
        for s, p, a in zip(streams, pos, alerts):
            got[s][p] = a
    for s in range(3):
        expected = detect(series[s], thr[s], delay=3)
        assert expected.any()
        np.testing.assert_array_equal(got[s], expected)


# the whole chain: offline score_series == streaming StreamScorer


@pytest.mark.parametrize("cal", [None, Calibration(mu=0.05, sigma=0.4, n=1000, source="train")])
def test_score_series_equals_stream_scorer_with_interleaved_streams(cal):
    rng = np.random.default_rng(9)
    lengths = np.array([600, 150, 400])
    series = [random_raw(rng, n) for n in lengths]
    kwargs = dict(z=21, cal=cal, beta=3.0, delay=5, min_count=30)
    scorer = StreamScorer(z=21, beta=3.0, delay=5, calibration=cal, min_count=30, n_streams=3)
    got = [{k: np.full(n, -7.0) for k in ("adjusted", "thresholds", "alerts")} for n in lengths]
    for streams, pos in interleave(rng, lengths):
        out = scorer.step(streams, np.array([series[s][p] for s, p in zip(streams, pos)]))
        for j, (s, p) in enumerate(zip(streams, pos)):
            for k in got[s]:
                got[s][k][p] = getattr(out, k)[j]
    for s, raw in enumerate(series):
        offline = score_series(raw, **kwargs)
        assert offline.alerts.any()
        for k in got[s]:
            np.testing.assert_array_equal(got[s][k], getattr(offline, k), err_msg=k)


def test_score_series_online_threshold_waits_for_warm_up():
    raw = random_raw(np.random.default_rng(10), 300, missing=0.0)
    out = score_series(raw, z=21, cal=None, beta=4.0, delay=7, min_count=50)
    # Score 0 has no previous raw score, so the 50th finite adjusted score is at t = 50; it sets thresholds[51].
    assert np.isnan(out.thresholds[:51]).all() and np.isfinite(out.thresholds[51:]).all()
    assert not out.alerts[:51].any()
    np.testing.assert_allclose(out.thresholds[51], np.mean(out.adjusted[1:51]) + 4 * np.std(out.adjusted[1:51]))


def test_stream_scorer_forwards_stream_management_to_its_parts():
    scorer = StreamScorer(z=5, n_streams=2)
    np.testing.assert_array_equal(scorer.add_streams(3), [2, 3, 4])
    scorer.remove_streams(np.array([1, 3]))
    assert scorer.n_streams == 3
    assert scorer.history.n_streams == scorer.online.n_streams == scorer.detector.n_streams == 3


# checkpoints


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
@pytest.mark.parametrize("cal", [None, Calibration(mu=0.0, sigma=0.5, n=10, source="x")])
def test_stream_scorer_state_round_trip_gives_identical_next_outputs(round_trip, cal):
    rng = np.random.default_rng(11)
    raw = np.stack([random_raw(rng, 300) for _ in range(4)], axis=1)
    idx = np.arange(4)
    scorer = StreamScorer(z=9, beta=2.5, delay=3, calibration=cal, min_count=20, min_history=2, n_streams=4)
    for t in range(150):
        scorer.step(idx, raw[t])
    restored = StreamScorer.from_state(round_trip(scorer.state_dict()))
    for t in range(150, 300):
        a, b = scorer.step(idx, raw[t]), restored.step(idx, raw[t])
        for k in ("adjusted", "thresholds", "alerts"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert restored.calibration == cal


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_state_parts_round_trip_keep_config_and_arrays(round_trip):
    hist = ScoreHistory(z=4, n_streams=0, min_history=2)
    restored = ScoreHistory.from_state(round_trip(hist.state_dict()))
    assert (restored.z, restored.min_history, restored.ring_.shape) == (4, 2, (0, 4))
    online = OnlineCalibration(beta=2.0, min_count=7, n_streams=2)
    online.update(np.array([1]), np.array([0.5]))
    restored = OnlineCalibration.from_state(round_trip(online.state_dict()))
    assert (restored.beta, restored.min_count) == (2.0, 7)
    np.testing.assert_array_equal(restored.count_, [0, 1])
    assert DelayRule.from_state(round_trip(DelayRule(delay=6, n_streams=1).state_dict())).delay == 6


def test_from_state_rejects_inconsistent_arrays():
    state = ScoreHistory(z=4, n_streams=2).state_dict()
    state["pos_"] = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="disagree"):
        ScoreHistory.from_state(state)
    state = ScoreHistory(z=4, n_streams=2).state_dict()
    state["ring_"] = np.zeros((2, 5))
    with pytest.raises(ValueError, match="ring_"):
        ScoreHistory.from_state(state)


def test_from_state_gives_a_field_the_state_lacks_fresh_rows_and_keeps_the_others():
    hist = ScoreHistory(z=4, n_streams=2)
    hist.push(np.array([0, 1]), np.array([0.5, 0.7]))
    state = hist.state_dict()
    del state["count_"]  # a checkpoint written before the field existed
    restored = ScoreHistory.from_state(state)
    np.testing.assert_array_equal(restored.count_, [0, 0])
    np.testing.assert_array_equal(restored.ring_, hist.ring_)
    with pytest.raises(ValueError, match="none of the fields"):
        ScoreHistory.from_state({"config": state["config"]})
