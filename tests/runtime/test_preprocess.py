"""Preprocessing shared by training, offline scoring and the daemon."""
import json

import numpy as np
import pytest

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.preprocess import (
    COUNT_MIN_READINGS,
    Normalisation,
    StreamScaler,
    count_levels,
    difference,
    fit_normalisation,
    forward_fill,
    plausible_bounds,
    robust_location_scale,
    scale_windows,
)
from round_trips import json_round_trip, npz_round_trip

nan = np.nan


def test_forward_fill_carries_at_most_limit_steps_per_channel():
    x = np.array([[nan, 1], [1, nan], [nan, nan], [nan, nan], [nan, 5], [2, nan]], dtype=np.float32)
    filled, _, age = forward_fill(x, 2)
    expected = np.array([[nan, 1], [1, 1], [1, 1], [1, nan], [nan, 5], [2, 5]], dtype=np.float32)
    np.testing.assert_array_equal(filled, expected)
    assert age[3].tolist() == [2, 3]


def test_forward_fill_does_not_cross_a_barrier_and_continues_a_carry_over():
    x = np.array([[3, 3], [nan, nan], [nan, nan], [nan, 4]], dtype=np.float32)
    barrier = np.array([False, False, True, False])
    age = np.zeros((4, 2))
    x[2] = [7, nan]
    age[2] = [1, 0]
    filled, _, _ = forward_fill(x, 2, barrier, age)
    # Row 2 is a barrier carrying 7 (observed 1 step before): row 3 gets it at age 2; channel 1 has nothing.
    np.testing.assert_array_equal(filled[3], [7, 4])
    np.testing.assert_array_equal(filled[1], [3, 3])


def test_forward_fill_zero_limit_changes_nothing():
    x = np.array([[1, nan], [nan, 2]], dtype=np.float32)
    np.testing.assert_array_equal(forward_fill(x, 0)[0], x)


def test_difference_keeps_length_and_nan_fills_the_start():
    x = np.arange(5, dtype=np.float32).reshape(5, 1) ** 2
    d2 = difference(x, 2)
    assert np.isnan(d2[:2]).all() and d2[2:, 0].tolist() == [2, 2, 2]


def test_normalisation_refuses_an_empty_channel_and_guards_constant_ones():
    x = np.array([[1, 5], [3, 5]], dtype=np.float32)
    norm = fit_normalisation(x)
    assert norm.std.tolist() == [1, 1]
    np.testing.assert_allclose(norm.apply(x)[:, 0], [-1, 1])
    with pytest.raises(ValueError, match=r"channel\(s\) \[1\] have no observed value"):
        fit_normalisation(np.array([[1, nan], [2, nan]], dtype=np.float32))
    with pytest.raises(ValueError, match=r"channel\(s\) \['EtCO2'\] have no observed value"):
        fit_normalisation(np.array([[1, nan], [2, nan]], dtype=np.float32), names=["HR", "EtCO2"])


# per-stream scaling (models with scaling = "stream")


def test_robust_location_scale_falls_back_from_iqr_to_mad_to_std_to_a_share_of_the_level():
    x = np.full((6, 9), nan)
    x[0, :5] = [1, 2, 3, 4, 5]  # IQR 4 - 2
    x[1, :5] = [5, 5, 6, 5, 5]  # IQR 0, MAD 0, std
    x[2, :3] = [50, 50, 50]  # no spread at all: 1 % of the level
    x[3, :2] = [0, 0]  # ... at least 1e-3
    x[4, :3] = [1, nan, 3]  # NaN-aware
    loc, scale = robust_location_scale(x)  # row 5 has no value
    np.testing.assert_allclose(loc, [3, 5, 50, 0, 2, 0])
    np.testing.assert_allclose(scale, [2 / 1.349, np.std([5, 5, 6, 5, 5]), 0.5, 1e-3, 1 / 1.349, 1])


def test_a_floor_reads_a_mostly_tied_row_by_its_mean_deviation_and_leaves_other_rows_alone():
    # An intermittent count: 95 zeros, then counts 1 to 32. The upper quartile falls half-way between the last zero
    # and the smallest count: an IQR of 0.5, against which an ordinary count of 30 read as 81 scales.
    counts = np.concatenate([np.zeros(95), np.arange(1.0, 33.0)])
    fewer = np.concatenate([np.zeros(100), np.arange(1.0, 28.0)])  # quartiles tied: the std without a floor
    rows = np.stack([counts, fewer, counts])
    loc, scale = robust_location_scale(rows, floor=np.array([0.5, 0.5, 0.0]))
    assert np.percentile(counts, 75) - np.percentile(counts, 25) == 0.5
    assert scale[0] == pytest.approx(0.5 * 1.2533 * counts.mean()) and 30 / scale[0] < 12
    assert scale[1] == pytest.approx(0.5 * 1.2533 * fewer.mean())  # the same rule, not the std: one scale for both
    assert (loc[2], scale[2]) == (0.0, 0.5 / 1.349)  # no floor: the IQR
    # Ordinary readings and a few outliers keep their IQR under the floor.
    rng = np.random.default_rng(0)
    noisy = rng.normal(0, 1, (2, 127))
    noisy[1, :3] = 20.0
    np.testing.assert_array_equal(robust_location_scale(noisy, floor=0.5)[1], robust_location_scale(noisy)[1])


def _learn(scaler, lane, values, window=4):
    """Feed readings one at a time, each as the last step of its window (NaN-padded at the start)."""
    history = np.full(window - 1, nan)
    for v in values:
        history = np.append(history, v)
        scaler.update(np.array([lane]), history[None, -window:])


def test_scaler_warm_up_sets_location_and_scale_robustly_from_the_window():
    scaler = StreamScaler(warmup=3, adapt=0, n_streams=2)
    _learn(scaler, 1, [10.0, 12.0, 14.0])
    loc, scale = robust_location_scale(np.array([[nan, 10.0, 12.0, 14.0]]))
    assert (scaler.loc_[1], scaler.scale_[1], scaler.count_[1]) == (loc[0], scale[0], 3)
    assert (scaler.loc_[0], scaler.scale_[0], scaler.count_[0]) == (0.0, 1.0, 0)  # lanes are separate
    _learn(scaler, 1, [100.0, nan])  # adapt 0: frozen after warm-up; NaN is not a reading
    assert (scaler.loc_[1], scaler.scale_[1], scaler.count_[1]) == (loc[0], scale[0], 4)


def test_scaler_follows_slowly_after_warm_up_and_skips_outliers():
    scaler = StreamScaler(warmup=2, adapt=10, outlier=6.0, n_streams=1)
    _learn(scaler, 0, [0.0, 2.0])  # loc 1, scale 2 / 1.349
    loc, scale = scaler.loc_[0], scaler.scale_[0]
    _learn(scaler, 0, [3.0])
    expected_scale = scale + (abs(3.0 - loc) * np.sqrt(np.pi / 2) - scale) / 10
    assert (scaler.loc_[0], scaler.scale_[0]) == (pytest.approx(loc + (3.0 - loc) / 10), pytest.approx(expected_scale))
    before = (scaler.loc_[0], scaler.scale_[0])
    _learn(scaler, 0, [loc + 7 * scaler.scale_[0]])  # an anomaly never becomes the scale
    assert (scaler.loc_[0], scaler.scale_[0]) == before and scaler.count_[0] == 4


def test_a_warm_up_on_an_idle_sensor_starts_again_and_keeps_its_still_scale_as_the_least():
    # 150 readings at 5.0, then a signal of amplitude 2 around 8: the warm-up (10) ends on the moving readings.
    scaler = StreamScaler(warmup=10, adapt=100, n_streams=1)
    history = np.concatenate([np.full(31, nan), np.full(150, 5.0), 8.0 + 2 * np.sin(np.arange(1, 61) / 3)])
    for t in range(31, len(history)):
        if t == 31 + 150:  # still idle: the warm-up began again at the tenth reading and waits for a move
            assert scaler.count_[0] == 0 and scaler.still_[0] and scaler.scale_[0] == pytest.approx(0.05)
            assert scaler.idle(np.array([0]))[0]
        scaler.update(np.array([0]), history[None, t - 31 : t + 1])
    assert scaler.count_[0] == 60 and 0.5 < scaler.scale_[0] < 3  # the moving signal's scale, not 0.05
    assert not scaler.idle(np.array([0]))[0]
    # A channel at 99 that steps to 98 now and then keeps 1 % of its level as its least scale.
    frozen = StreamScaler(warmup=10, adapt=0, n_streams=1)
    steady = np.concatenate([np.full(31, nan), np.full(20, 99.0), np.tile([99.0] * 9 + [98.0], 6)])
    for t in range(31, len(steady)):
        frozen.update(np.array([0]), steady[None, t - 31 : t + 1])
    assert frozen.still_[0] and frozen.scale_[0] == pytest.approx(0.99)
    # A still stretch that ends before the warm-up does is not an idle start: nothing changes for it.
    fresh = StreamScaler(warmup=10, adapt=0, n_streams=1)
    _learn(fresh, 0, [5.0] * 5 + [5.0 + k for k in range(5)], window=32)
    assert not fresh.still_[0] and fresh.count_[0] == 10


def test_scaler_applies_location_and_scale_and_clips():
    scaler = StreamScaler(warmup=2, clip=5.0, n_streams=2)
    scaler.loc_[:], scaler.scale_[:] = [1.0, -2.0], [2.0, 0.5]
    got = scaler.apply(np.array([0, 1]), np.array([[3.0, 100.0], [-2.0, -1.5]]))
    np.testing.assert_allclose(got, [[1.0, 5.0], [0.0, 1.0]])


def test_scale_windows_learns_each_channel_of_each_window_as_its_own_lane():
    scaler = StreamScaler(warmup=3, n_streams=4)
    windows = np.array([[[1, 10], [2, 20], [3, 30]], [[5, 0], [5, 0], [6, 4]]], dtype=np.float32)  # [n=2, W=3, C=2]
    lanes = np.array([0, 1, 2, 3])  # window i, channel c -> lane 2 i + c
    got = scale_windows(scaler, lanes, windows)
    loc, scale = robust_location_scale(windows.transpose(0, 2, 1).reshape(4, 3))
    np.testing.assert_allclose(scaler.loc_, loc)
    np.testing.assert_allclose(got, (windows - loc.reshape(2, 1, 2)) / scale.reshape(2, 1, 2), rtol=1e-6)


def test_scaler_refuses_bad_settings_naming_them():
    with pytest.raises(ValueError, match="warmup >= 2, adapt >= 0, outlier > 0, clip > 0; got 1, 0, 6.0, 100.0"):
        StreamScaler(warmup=1, adapt=0)


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_scaler_state_round_trip_mid_stream_equals_an_uninterrupted_run(round_trip):
    rng = np.random.default_rng(0)
    values = rng.normal(5, 2, size=(60, 3)) * np.where(rng.random((60, 3)) < 0.05, 20, 1)
    lanes = np.arange(3)
    reference, interrupted = (StreamScaler(warmup=10, adapt=20, n_streams=3) for _ in range(2))
    windows = np.lib.stride_tricks.sliding_window_view(np.vstack([np.full((3, 3), nan), values]), 4, axis=0)
    expected = [scale_windows(reference, lanes, w[None].transpose(0, 2, 1)) for w in windows]
    got = [scale_windows(interrupted, lanes, w[None].transpose(0, 2, 1)) for w in windows[:25]]
    restored = StreamScaler.from_state(round_trip(interrupted.state_dict()))
    got += [scale_windows(restored, lanes, w[None].transpose(0, 2, 1)) for w in windows[25:]]
    np.testing.assert_array_equal(got, expected)
    assert restored.count_.tolist() == [60] * 3


def count_feeds(n: int = 2000, seed: int = 0) -> np.ndarray:
    """``[n, 5]``: requests with bursts (median about 20), a sparse event count (median 0), a symmetric positive
    level (50 ± 2), a signed one (0 ± 1) and a level far from 0 with peaks (60 ± 1, peaks of +40)."""
    rng = np.random.default_rng(seed)
    requests = rng.poisson(20 * np.exp(rng.normal(0, 0.1, n)) * np.where(rng.random(n) < 0.03, 8, 1))
    events = rng.poisson(0.3, n) * rng.integers(1, 6, n)
    peaks = rng.normal(60, 1, n) + 40 * (rng.random(n) < 0.03)
    return np.stack([requests, events, rng.normal(50, 2, n), rng.normal(0, 1, n), peaks], axis=1).astype(np.float64)


def test_count_levels_finds_count_and_burst_channels_with_their_typical_level():
    x = count_feeds()  # requests, events, level, signed, peaks
    levels = count_levels(x)
    assert levels.tolist()[2:] == [0, 0, 0]  # the peaks' upper tail is long, but they are not multiples of 60
    assert levels[0] == np.float32(np.median(x[:, 0]))
    assert levels[1] == np.float32(np.median(x[x[:, 1] > 0, 1])) > 0  # median 0: the level of its non-zero readings
    # Through float32 rounding (here a normalisation and back) zeros come back as ±1e-7 of the level: still none
    # below 0.
    norm = Normalisation(np.float32([20, 0.4, 50, 0, 61]), np.float32([9, 1.1, 2, 1, 7]))
    back = norm.invert(norm.apply(x))
    assert back[:, :2].min() < 0 and (count_levels(back) > 0).tolist() == [True, True, False, False, False]
    assert not count_levels(x[: COUNT_MIN_READINGS - 1]).any()  # too few readings decide nothing


def test_a_count_channel_reaches_the_model_as_asinh_of_its_ratio_to_its_level_and_reads_back_exactly():
    x = count_feeds()[:, :3]  # requests, events, level
    counts = count_levels(x)
    norm = fit_normalisation(x[None], counts)
    bent = np.arcsinh(x[:, :2] / counts[:2])
    np.testing.assert_allclose(norm.mean[:2], bent.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(norm.apply(x)[:, :2], (bent - norm.mean[:2]) / norm.std[:2], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(norm.apply(x)[:, 2], (x[:, 2] - norm.mean[2]) / norm.std[2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.invert(norm.apply(x)), x, rtol=1e-4, atol=1e-4)
    # The card's form: counts kept through JSON; a normalisation that bends nothing keeps the older text.
    again = Normalisation.from_dict(json.loads(json.dumps(norm.to_dict())))
    np.testing.assert_array_equal(again.counts, counts)
    assert set(fit_normalisation(x[None], np.zeros(3)).to_dict()) == {"mean", "std"}
    assert Normalisation.from_dict({"mean": [0.0], "std": [1.0], "counts": [0.0]}).counts is None
    # Plausible readings of a count channel lie within a million times its level (a million of its bent scale's
    # standard deviations would bound nothing); the other channels within a million standard deviations.
    card = ModelCard("m", ["r", "e", "l"], norm.to_dict(), 0, "relative", "time2vec", 8, 4, 3)
    low, high = plausible_bounds(card)
    np.testing.assert_allclose(high[:2], 1e6 * counts[:2], rtol=1e-6)
    np.testing.assert_allclose(low[:2], -1e6 * counts[:2], rtol=1e-6)
    assert high[2] == pytest.approx(norm.mean[2] + 1e6 * norm.std[2])
    # A channel that held almost still in training: its range is a million times 1 % of its level, not a million of
    # its tiny deviations (5 ± 40 filed every ordinary move of a setpoint as a broken sensor).
    still = ModelCard("m", ["s"], {"mean": [5.0], "std": [4e-5]}, 0, "relative", "time2vec", 8, 4, 1)
    low, high = plausible_bounds(still)
    assert high[0] == pytest.approx(5 + 5e4, rel=1e-6) and low[0] == pytest.approx(5 - 5e4, rel=1e-6)
    # Logarithmic well above the level: 8 times a rate of 5 c is as far from it as 8 times 10 c from 10 c; linear
    # below it, so a drop to 0 from c is as far as from 0 to c.
    bend = np.arcsinh(np.float64([5, 40, 10, 80, 0, 1]))
    assert abs((bend[1] - bend[0]) - (bend[3] - bend[2])) < 0.01 and bend[5] - bend[4] > 0.85
