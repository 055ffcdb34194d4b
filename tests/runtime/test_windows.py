import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.offline import prepare, sliding_windows
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.windows import WindowConfig, WindowStore
from round_trips import json_round_trip, npz_round_trip


def make_card(channels=("HR", "SpO2"), window=4, differencing=0, forward_fill=0):
    c = len(channels)
    return ModelCard(
        name="test", channels=list(channels), normalisation={"mean": [1.5] * c, "std": [2.0] * c},
        differencing=differencing, time_index="relative", time_embedding="none", window=window, repr_dims=8,
        input_dims=c, forward_fill=forward_fill,
    )  # fmt: skip


def feed(store, stream, t, now=None, **values):
    return store.ingest(Reading(stream, float(t), {k: float(v) for k, v in values.items()}), now)


def assert_batches_equal(a, b):
    for field in dataclasses.fields(a):
        np.testing.assert_array_equal(getattr(a, field.name), getattr(b, field.name), err_msg=field.name)


# time steps and preparation


def test_timestamps_are_regularised_to_the_nearest_absolute_step():
    store = WindowStore(make_card(), WindowConfig(period=0.5))
    assert [store.step_of(t) for t in (100.0, 100.2, 100.26, 100.74, 1.7e9)] == [200, 200, 201, 201, 3_400_000_000]
    feed(store, "a", 100.2, HR=1, SpO2=2)
    batch = store.collect(now=0.0)
    assert batch.step.tolist() == [200] and batch.starts.tolist() == [197]
    assert batch.timestamp.tolist() == [100.2]


@pytest.mark.parametrize("differencing, forward_fill", [(0, 0), (1, 0), (2, 0), (0, 3), (1, 2)])
def test_streamed_windows_equal_offline_preparation_bit_for_bit(differencing, forward_fill):
    rng = np.random.default_rng(differencing + 10 * forward_fill)
    card = make_card(window=6, differencing=differencing, forward_fill=forward_fill)
    series = rng.normal(size=(120, 2)).astype(np.float32) * 10
    series[rng.random(series.shape) < (0.4 if forward_fill else 0.1)] = np.nan
    expected = sliding_windows(prepare(SimpleNamespace(card=card), series), card.window)

    store = WindowStore(card)
    got, t = [], 0
    while t < len(series):  # collects after random numbers of readings: several steps per stream per batch
        for _ in range(rng.integers(1, 6)):
            if t < len(series):
                feed(store, "s", 1000 + t, HR=series[t, 0], SpO2=series[t, 1])
                t += 1
        batch = store.collect(now=2000.0)
        full = np.full((len(batch), card.window, 2), np.nan, dtype=np.float32)
        full[batch.complete] = batch.windows
        got.append(full)
        assert batch.reading.all() and not batch.reset.any()
    got = np.concatenate(got)
    complete = ~np.isnan(expected[:, -1]).any(axis=1)
    np.testing.assert_array_equal(got[complete], expected[complete])
    assert store.counters["incomplete"] == int((~complete).sum())


def test_a_meters_total_is_differenced_and_normalised_with_its_last_digits():
    # A running total near 1.2e7 that grows 0.1 or 0.3 a step, scored as its rate (differencing 1). In float32 the
    # total reads in steps of 1, so the increments came out as 0 or 1 (normalised: -0.75 or -0.25).
    card = make_card(channels=("kwh",), window=3, differencing=1)
    increments = np.array([0.1, 0.3, 0.1, 0.1, 0.3])
    totals = 12_345_678.9 + np.concatenate([[0.0], np.cumsum(increments)])
    store = WindowStore(card)
    for t, total in enumerate(totals):
        feed(store, "meter", 1000 + t, kwh=total)
    prepared = store.collect(now=2000.0).prepared[1:, 0]
    np.testing.assert_allclose(prepared, (increments - 1.5) / 2.0, atol=1e-6)
    offline = prepare(SimpleNamespace(card=card), totals[:, None])[1:, 0]
    np.testing.assert_array_equal(offline, prepared)


def test_a_step_with_a_missing_channel_is_incomplete_and_gets_no_window():
    store = WindowStore(make_card())
    feed(store, "a", 0, HR=70)
    feed(store, "b", 0, HR=70, SpO2=np.nan)
    feed(store, "c", 0, HR=70, SpO2=97)
    batch = store.collect(now=0.0)
    assert batch.complete.tolist() == [False, False, True]
    assert batch.windows.shape == (1, 4, 2)
    np.testing.assert_array_equal(batch.raw[0], [70.0, np.nan])


# merging and duplicates


def test_channels_of_one_step_merge_across_messages():
    store = WindowStore(make_card(), WindowConfig(settle=1.0))
    assert feed(store, "bed1", 10.1, now=50.0, HR=70) is None
    assert feed(store, "bed1", 9.8, now=50.3, SpO2=97) is None
    assert len(store.collect(now=50.5)) == 0  # still settling
    batch = store.collect(now=51.0)
    assert len(batch) == 1 and batch.complete.all()
    np.testing.assert_array_equal(batch.raw, [[70.0, 97.0]])
    assert batch.timestamp.tolist() == [10.1]  # the step's first reading
    assert store.counters["readings_accepted"] == 2 and store.counters["duplicate"] == 0


def test_a_second_value_for_a_channel_wins_and_is_counted_but_missing_never_overwrites():
    store = WindowStore(make_card())
    feed(store, "a", 5, HR=70, SpO2=97)
    assert feed(store, "a", 5, HR=72) is None
    assert feed(store, "a", 5, SpO2=np.nan) is None
    np.testing.assert_array_equal(store.collect(now=0.0).raw, [[72.0, 97.0]])
    assert store.counters["duplicate"] == 1 and store.counters["readings_accepted"] == 3


def test_unknown_channels_are_dropped_and_counted_and_a_reading_without_known_ones_is_empty():
    store = WindowStore(make_card())
    assert feed(store, "a", 1, HR=70, Temp=37) is None
    assert feed(store, "a", 2, Temp=37) == "empty"
    assert store.counters["unknown_channel"] == 2 and store.counters["empty"] == 1


def test_bad_readings_are_refused_without_raising():
    store = WindowStore(make_card())
    assert feed(store, "a", float("nan"), HR=1) == "absurd_timestamp"
    assert feed(store, "a", 1, HR=float("inf")) == "non_finite"
    assert store.ingest(Reading("a", 1.0, {"HR": "x"})) == "wrong_type"
    assert store.ingest(Reading("", 1.0, {"HR": 1.0})) == "wrong_type"
    assert store.n_streams == 0


# pending steps, settle, late readings


def test_a_newer_step_finalises_older_ones_and_late_tolerance_holds_them_back():
    store = WindowStore(make_card(), WindowConfig(settle=10.0))
    feed(store, "a", 1, now=0.0, HR=1, SpO2=1)
    feed(store, "a", 2, now=0.0, HR=1, SpO2=1)
    assert store.collect(now=0.0).step.tolist() == [1]
    assert store.pending_steps(0) == [2]

    store = WindowStore(make_card(), WindowConfig(settle=10.0, late_tolerance=2))
    for t in (1, 3, 2):  # out of order within the tolerance: no reading is lost
        feed(store, "a", t, now=0.0, HR=t, SpO2=1)
    assert len(store.collect(now=0.0)) == 0
    feed(store, "a", 4, now=0.0, HR=4, SpO2=1)
    assert store.collect(now=0.0).step.tolist() == [1]
    assert store.collect(now=10.0).step.tolist() == [2, 3, 4]
    assert store.counters["late"] == 0


def test_without_a_clock_at_ingest_the_next_collect_starts_the_settle_wait():
    store = WindowStore(make_card(), WindowConfig(settle=2.0))
    feed(store, "a", 1, HR=1, SpO2=1)
    assert len(store.collect(now=100.0)) == 0
    assert len(store.collect(now=101.9)) == 0
    assert len(store.collect(now=102.0)) == 1


def test_readings_for_finalised_steps_are_dropped_as_late():
    store = WindowStore(make_card())
    feed(store, "a", 5, HR=1, SpO2=1)
    store.collect(now=0.0)
    assert feed(store, "a", 5, HR=2) == "late"
    assert feed(store, "a", 3, HR=2) == "late"
    assert feed(store, "a", 6, HR=2) is None
    assert store.counters["late"] == 2
    assert store.collect(now=0.0).step.tolist() == [6]


def test_a_stream_whose_clock_went_back_is_reanchored_after_consecutive_late_readings():
    store = WindowStore(make_card(), WindowConfig(reanchor_after=3))
    feed(store, "a", 1000, HR=1, SpO2=1)
    store.collect(now=0.0)
    assert [feed(store, "a", t, HR=1, SpO2=1) for t in (10, 11, 12)] == ["late", "late", None]
    batch = store.collect(now=0.0)
    assert batch.step.tolist() == [12] and batch.reset.tolist() == [True]
    assert np.isnan(batch.windows[0, :-1]).all()
    assert store.counters["reanchors"] == 1 and store.counters["late"] == 2


# gaps and resets


def test_a_short_gap_is_filled_with_missing_steps():
    store = WindowStore(make_card(window=6), WindowConfig(max_gap=3))
    feed(store, "a", 0, HR=1, SpO2=1)
    store.collect(now=0.0)
    feed(store, "a", 4, HR=5, SpO2=5)
    batch = store.collect(now=0.0)
    assert batch.step.tolist() == [1, 2, 3, 4]
    assert batch.reading.tolist() == [False, False, False, True]
    assert batch.round.tolist() == [0, 1, 2, 3]
    assert batch.complete.tolist() == [False, False, False, True]
    window = batch.windows[0]  # steps -1..4: before the stream, step 0, the gap, step 4
    assert np.isnan(window[[0, 2, 3, 4]]).all() and not np.isnan(window[[1, 5]]).any()
    assert store.counters["gap_filled_steps"] == 3 and store.counters["resets"] == 0


def test_a_long_gap_resets_the_window_and_differencing_memory():
    store = WindowStore(make_card(differencing=1), WindowConfig(max_gap=3, jump_confirm=1))  # follow jumps at once
    for t in range(4):
        feed(store, "a", t, HR=t, SpO2=t)
    feed(store, "a", 8, HR=8, SpO2=8)  # gap of 4 steps after step 3, in the same batch
    feed(store, "a", 9, HR=9, SpO2=9)
    batch = store.collect(now=0.0)
    assert batch.step.tolist() == [0, 1, 2, 3, 8, 9]
    assert batch.reset.tolist() == [False] * 4 + [True, False]
    assert batch.complete.tolist() == [False, True, True, True, False, True]  # differencing restarts after the reset
    assert np.isnan(batch.windows[-1][:-1]).all()
    np.testing.assert_allclose(batch.windows[-1][-1], (1.0 - 1.5) / 2.0)
    assert store.counters["resets"] == 1 and store.counters["gap_filled_steps"] == 0


def test_a_long_gap_before_the_first_new_step_resets_without_an_empty_segment():
    store = WindowStore(make_card(), WindowConfig(max_gap=2, jump_confirm=1))
    feed(store, "a", 0, HR=1, SpO2=1)
    feed(store, "b", 0, HR=1, SpO2=1)
    store.collect(now=0.0)
    feed(store, "a", 10, HR=2, SpO2=2)
    feed(store, "b", 1, HR=2, SpO2=2)
    batch = store.collect(now=0.0)
    assert batch.reset.tolist() == [True, False]
    assert np.isnan(batch.windows[0][:-1]).all() and not np.isnan(batch.windows[1][-2]).any()


def test_one_reading_far_ahead_is_set_aside_and_the_stream_keeps_its_clock():
    store = WindowStore(make_card(), WindowConfig(max_gap=3))
    for t in range(5):
        feed(store, "a", t, HR=t, SpO2=1)
    store.collect(now=0.0)
    assert feed(store, "a", 3600, HR=99, SpO2=1) == "ahead"  # a time-zone slip: one reading an hour ahead
    for t in range(5, 8):
        assert feed(store, "a", t, HR=t, SpO2=1) is None
    batch = store.collect(now=0.0)
    assert batch.step.tolist() == [5, 6, 7] and not batch.reset.any()
    assert store.counters["ahead"] == 1 and store.counters["resets"] == 0


def test_readings_that_keep_arriving_far_ahead_are_followed_after_jump_confirm():
    store = WindowStore(make_card(), WindowConfig(max_gap=3, jump_confirm=3))
    for t in range(5):
        feed(store, "a", t, HR=t, SpO2=1)
    store.collect(now=0.0)
    assert [feed(store, "a", t, HR=t, SpO2=1) for t in (500, 501, 502, 503)] == ["ahead", "ahead", None, None]
    batch = store.collect(now=0.0)
    assert batch.step.tolist() == [502, 503] and batch.reset.tolist() == [True, False]
    assert store.counters["ahead"] == 2 and store.counters["resets"] == 1
    restored = WindowStore.from_state(make_card(), {k: v for k, v in store.state_dict().items() if k != "ahead_run"})
    assert restored.names == ["a"]  # a checkpoint from before the field existed still restores


def test_streams_are_independent_and_removal_keeps_the_others():
    store = WindowStore(make_card())
    for t in range(3):
        for name, v in (("a", 1), ("b", 2), ("c", 3)):
            feed(store, name, t, HR=v * 10 + t, SpO2=v)
    store.collect(now=0.0)
    c_window = store.window_of(2)
    store.remove_streams(np.array([0]))
    assert store.names == ["b", "c"] and store.index == {"b": 0, "c": 1}
    np.testing.assert_array_equal(store.window_of(1), c_window)
    feed(store, "c", 3, HR=40, SpO2=3)
    assert store.collect(now=0.0).stream_idx.tolist() == [1]


def test_storage_grows_for_many_streams_and_refuses_beyond_max_streams():
    store = WindowStore(make_card(), WindowConfig(max_streams=50))
    for s in range(60):
        feed(store, f"s{s}", 0, HR=s, SpO2=1)
    assert store.n_streams == 50 and store.counters["too_many_streams"] == 10
    batch = store.collect(now=0.0)
    np.testing.assert_array_equal(batch.raw[:, 0], np.arange(50))


# state


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_state_round_trip_gives_identical_next_batches(round_trip):
    card = make_card(differencing=1)
    config = WindowConfig(settle=5.0, max_gap=2)
    store = WindowStore(card, config)
    for t in range(6):
        feed(store, "a", t, now=float(t), HR=t, SpO2=1)
        feed(store, "b", t, now=float(t), HR=2 * t)
    store.collect(now=3.0)
    feed(store, "a", 9, now=7.0, HR=9, SpO2=2)  # pending across the save, and a reset to come
    restored = WindowStore.from_state(card, round_trip(store.state_dict()))
    assert restored.config == config and restored.counters == store.counters
    assert_batches_equal(restored.collect(now=20.0), store.collect(now=20.0))


def test_state_of_another_model_or_period_is_refused():
    store = WindowStore(make_card())
    feed(store, "a", 0, HR=1, SpO2=1)
    state = store.state_dict()
    with pytest.raises(ValueError, match="channels"):
        WindowStore.from_state(make_card(channels=("HR", "RESP")), state)
    with pytest.raises(ValueError, match="window"):
        WindowStore.from_state(make_card(window=5), state)
    with pytest.raises(ValueError, match="period"):
        WindowStore.from_state(make_card(), state, WindowConfig(period=2.0))


def test_window_config_refuses_nonsense():
    with pytest.raises(ValueError, match="period"):
        WindowConfig(period=0)
    with pytest.raises(ValueError, match="max_gap"):
        WindowConfig(max_gap=-1)


def test_collect_without_windows_gives_the_same_rows_and_state():
    with_w, without = WindowStore(make_card()), WindowStore(make_card())
    for store in (with_w, without):
        for t in range(6):
            feed(store, "a", t, HR=t, SpO2=2 * t)
            feed(store, "b", t, HR=-t)  # incomplete steps: prepared but not scored
    full, lean = with_w.collect(now=0.0), without.collect(now=0.0, with_windows=False)
    assert full.windows.shape == (6, 4, 2) and lean.windows.shape == (0, 4, 2)
    for field in dataclasses.fields(full):
        if field.name != "windows":
            np.testing.assert_array_equal(getattr(full, field.name), getattr(lean, field.name), err_msg=field.name)
    np.testing.assert_array_equal(with_w.window_of(0), without.window_of(0))


def test_each_streams_sampling_period_is_observed_from_its_reading_times():
    store = WindowStore(make_card(), WindowConfig(period=60.0, settle=2.0, max_gap=1000))
    for k in range(12):
        feed(store, "minutely", 60.0 * k, HR=1)
        feed(store, "minutely", 60.0 * k + 0.5, SpO2=1)  # the same step's other channel, sent apart within settle
        if k < 7:
            feed(store, "young", 10.0 * k, HR=1)
    feed(store, "minutely", 60.0 * 12 + 3600, HR=1)  # one long gap moves the estimate by a factor, not to an hour
    periods = store.observed_periods()
    assert 60.0 < periods[0] < 60.0 * 1.4 and np.isnan(periods[1])  # "young": 6 intervals are not enough yet
    restored = WindowStore.from_state(make_card(), npz_round_trip(store.state_dict()))
    np.testing.assert_array_equal(restored.observed_periods(), periods)
