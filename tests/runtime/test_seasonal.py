"""The seasonal floor of ``deviation`` and scheduled channels: a channel's cycle, the seasonal level, where the floor
holds and which channels keep to their cycle closely enough to be judged by it alone."""
import json
from pathlib import Path

import numpy as np
import pytest
from trep_edge.runtime.core.detector import Detector, DetectorConfig, SignalStats, window_deviation
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.seasonal import DISAGREE, SeasonalRecord, cycle_fit

from round_trips import json_round_trip, npz_round_trip

PERIOD = 24


def _pulses(n: int, seed: int = 0) -> np.ndarray:
    """Noise with a pulse of 10 every ``PERIOD`` readings."""
    x = np.random.default_rng(seed).normal(0.0, 0.3, n)
    x[::PERIOD] += 10.0
    return x


def _levels(record: SeasonalRecord, x: np.ndarray) -> np.ndarray:
    """The seasonal level of each reading of one channel pushed into lane 0 of ``record``."""
    out = np.full(len(x), np.nan)
    for t, value in enumerate(x):
        rows, _, differences = record.push(np.array([0]), np.array([[value]]))
        if len(rows):
            out[t] = window_deviation(differences[:, :, None])[0, 0, 0]
    return out


def test_a_cycle_is_found_in_the_first_readings_and_a_pulse_that_recurs_reads_small_against_a_cycle_earlier():
    x = _pulses(600)
    x[500] += 10.0  # a spike between two pulses (500 % 24 = 20)
    record = SeasonalRecord(channels=1, span=128, after=200, n_streams=1)
    levels = _levels(record, x)
    assert record.period_[0, 0] == PERIOD
    assert np.isnan(levels[:199]).all()  # no cycle until the 200th reading
    pulse = 504
    plain = window_deviation(x[None, pulse - 127 : pulse + 1, None])[0, 0, 0]
    assert plain > 10 and levels[pulse] < 3  # far out against the window, ordinary against a cycle earlier
    assert levels[500] > 10  # the spike is news either way


def test_a_channel_without_a_cycle_has_no_seasonal_level_and_a_reset_looks_again():
    record = SeasonalRecord(channels=2, span=64, after=100, n_streams=1)
    noise = np.random.default_rng(1).normal(size=100)
    for t in range(100):
        record.push(np.array([0]), np.array([[_pulses(100)[t], noise[t]]]))
    assert record.period_[0].tolist() == [PERIOD, 0]
    record.reset_streams(np.array([0]))
    assert record.period_[0].tolist() == [0, 0] and np.isnan(record.ring_).all()


def test_the_floor_holds_until_the_cycle_has_foretold_enough_of_the_loud_readings_and_returns_when_they_are_news():
    record = SeasonalRecord(channels=2, span=32, after=40, n_streams=1)
    record.period_[0] = [PERIOD, 0]  # channel 1 has no cycle: always judged plain

    def judge(plain: float, seasonal: float) -> list[float]:
        level = record.judged(np.array([0]), np.array([[plain, plain]]), np.array([[seasonal, seasonal]]),
                              gain=1.5, trust=0.3, loud=4.0, ratio=0.5, need=2)  # fmt: skip
        return level[0].tolist()

    for _ in range(5):  # loud readings before the cycle is known: judged plain, and counted neither way
        assert judge(6.0, np.nan) == [6.0, 6.0]
    assert record.loud_[0].tolist() == [0, 0]
    assert judge(6.0, 1.0) == [1.5, 6.0]  # no foretold loud reading yet: floored
    assert judge(6.0, 1.0) == [1.5, 6.0]  # one (need 2)
    assert judge(6.0, 1.0) == [6.0, 6.0]  # two of two: the cycle foretells this channel's loud readings
    assert judge(3.0, 1.0) == [3.0, 3.0]  # a quiet reading counts for neither
    for _ in range(8):  # loud readings the cycle did not foretell: before each, 3 foretold of 3 … 10, at least 0.3
        assert judge(6.0, 6.0)[0] == 6.0
    assert judge(6.0, 1.0) == [1.5, 6.0]  # 3 of 11 < 0.3 before this reading: floored again
    assert judge(6.0, np.nan) == [6.0, 6.0]  # no seasonal level: plain
    assert np.isnan(judge(np.nan, 1.0)).all()  # no plain level: none


def _inputs(n: int = 400, seed: int = 3):
    """One lane of one channel: pulses every ``PERIOD`` readings and their deviation parts over the last 32."""
    x = _pulses(n, seed)
    x[300] += 12.0
    rng = np.random.default_rng(seed)
    distance = rng.lognormal(size=n)
    z = rng.normal(size=(n, 4))
    deviation = np.full((n, 2, 1), np.nan)
    for t in range(17, n):
        deviation[t] = window_deviation(x[None, max(0, t - 31) : t + 1, None])[0]
    return x, distance, z, deviation


def _run(detector: Detector, x, distance, z, deviation):
    one = np.array([0])
    out = []
    for t in range(len(x)):
        step = detector.step(one, one, one, distance[t : t + 1], z[t : t + 1], deviation[t : t + 1], None,
                             x[t : t + 1, None])  # fmt: skip
        out.append((float(step.score[0]), bool(step.alert[0]), float(step.deviation[0, 0])))
    return out


CONFIG = DetectorConfig(deviation_window=32, seasonal_after=100, min_count=20, prior_weight=0, threshold=3.0,
                        refractory=10, seasonal_fit=0)  # fmt: skip
"""The floor's settings: the pulses keep to their cycle, so without ``seasonal_fit=0`` they would be scheduled."""


def fresh(config: DetectorConfig = CONFIG) -> Detector:
    detector = Detector(config, dims=4)
    detector.add(streams=1, lanes=1)
    return detector


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_a_save_and_restore_mid_stream_equals_an_uninterrupted_run_with_the_floor(round_trip):
    inputs = _inputs()
    expected = _run(fresh(), *inputs)
    first = fresh()
    got = _run(first, *(a[:250] for a in inputs))
    restored = fresh()
    restored.load_state(round_trip(first.state_dict()))
    got += _run(restored, *(a[250:] for a in inputs))
    np.testing.assert_array_equal(np.array(got), np.array(expected))  # NaN where warming, in both
    # The floor is at work across the restore: the cycle is found at reading 100, the pulses from 120 on are judged
    # lower than without it until five of them have been foretold (216), and plainly after.
    plain = _run(fresh(CONFIG.with_overrides("seasonal_gain=0")), *inputs)
    assert all(expected[t][2] < plain[t][2] / 5 for t in range(120, 217, PERIOD))
    assert all(expected[t][2] == plain[t][2] for t in range(240, 400, PERIOD))


def test_a_trusted_channel_s_seasonal_level_is_read_only_where_it_counts_and_every_score_is_unchanged(monkeypatch):
    inputs = _inputs()
    unused, skipped = SeasonalRecord.unused, []

    def counted(self, *args):
        out = unused(self, *args)
        skipped.append(int(out.sum()))
        return out

    monkeypatch.setattr(SeasonalRecord, "unused", counted)
    spared = _run(fresh(), *inputs)
    # Trusted after reading 216: its readings after that are skipped but for the loud ones (the pulses, the spike).
    assert 150 < sum(skipped) < 400 - 216
    monkeypatch.setattr(SeasonalRecord, "unused", lambda self, idx, plain, *args: np.zeros(plain.shape, dtype=bool))
    np.testing.assert_array_equal(np.array(spared), np.array(_run(fresh(), *inputs)))


def test_the_floor_is_judged_but_the_plain_deviation_is_learned():
    inputs = _inputs()
    floored, plain = (Detector(config, dims=4) for config in (CONFIG.with_overrides("threshold=50"),
                                                              CONFIG.with_overrides("threshold=50;seasonal_gain=0")))
    for detector in (floored, plain):
        detector.add(streams=1, lanes=1)
    a, b = _run(floored, *inputs), _run(plain, *inputs)
    assert sum(x[0] < y[0] for x, y in zip(a, b)) > 5  # pulses score lower under the floor
    for key, value in plain.stats.state_dict().items():  # nothing alerts: both learned the same values
        np.testing.assert_array_equal(floored.stats.state_dict()[key], value)
    assert floored.seasons.period_[0, 0] == PERIOD and plain.seasons.ring_.shape[2] == 0


def test_the_monitor_brings_each_reading_to_the_floor_which_starts_after_the_first_seasonal_after_readings():
    # A daily pulse whose size varies: loud readings its cycle mostly does not foretell, so the floor holds.
    rng = np.random.default_rng(5)
    n, period = 1200, 48
    x = rng.normal(0.0, 0.3, n)
    x[::period] += rng.uniform(4.0, 12.0, len(x[::period]))
    engine = load_engine(Path(__file__).resolve().parents[2] / "models" / "general.onnx", "cpu")
    config = DetectorConfig(seasonal_after=400, seasonal_scaled=True)  # the general model has no floor by default
    floored = detect_recording(engine, x[:, None], config)
    plain = detect_recording(engine, x[:, None], config.with_overrides("seasonal_gain=0"))
    # The same surprise until the cycle is found at the 400th reading (row 399); afterwards the pulses read lower
    # (without the readings from the monitor there would be no floor and every row would be equal).
    np.testing.assert_array_equal(floored.surprise[:399], plain.surprise[:399])
    pulses = np.arange(432, n, period)
    assert (floored.surprise[pulses] < plain.surprise[pulses]).mean() > 0.5
    # Without seasonal_scaled the stream-scaled general model is judged as without the floor, to the last bit.
    default = detect_recording(engine, x[:, None], DetectorConfig(seasonal_after=400))
    np.testing.assert_array_equal(default.surprise, plain.surprise)
    np.testing.assert_array_equal(default.alerts, plain.alerts)


def test_the_floor_is_for_card_normalised_models_unless_seasonal_scaled():
    config = DetectorConfig()
    assert config.for_scaling(None) is config and config.for_scaling("card") is config
    assert config.seasonal_gain > 0 and config.for_scaling("stream").seasonal_gain == 0
    both = config.with_overrides("seasonal_scaled=1")
    assert both.for_scaling("stream").seasonal_gain == both.seasonal_gain
    assert DetectorConfig.from_dict(json.loads(json.dumps(both.to_dict()))) == both


def test_a_state_saved_with_the_floor_resumes_on_a_detector_without_it():
    # A general-model daemon's checkpoint from before seasonal_scaled holds seasonal readings; resumed, the detector
    # without the floor keeps none, and new streams still join.
    floored = Detector(CONFIG, dims=4)
    floored.add(streams=2, lanes=2)
    _run(floored, *_inputs())
    plain = Detector(CONFIG.for_scaling("stream"), dims=4)
    plain.add(streams=2, lanes=2)
    plain.load_state(npz_round_trip(floored.state_dict()))
    plain.add(streams=3, lanes=3)
    assert plain.seasons.ring_.shape == (5, 1, 0) and not plain.seasonal
    np.testing.assert_array_equal(plain.stats.count_[:2], floored.stats.count_)


def _shifts(n: int, seed: int = 0, noise: float = 0.3) -> np.ndarray:
    """A line that runs (10) for the middle half of every ``PERIOD`` readings and rests (0) otherwise, with noise."""
    busy = ((np.arange(n) % PERIOD) >= PERIOD // 4) & ((np.arange(n) % PERIOD) < 3 * PERIOD // 4)
    return 10.0 * busy + np.random.default_rng(seed).normal(0.0, noise, n)


def test_a_schedule_kept_to_the_reading_fits_its_cycle_and_a_carrier_whose_cycles_differ_does_not():
    rng = np.random.default_rng(2)
    assert cycle_fit(_shifts(200), PERIOD) < 0.1
    # The same cycle whose level wanders from one cycle to the next by more than the cycle's own swing.
    wandering = _shifts(200) + np.repeat(rng.normal(0, 8, 200 // PERIOD + 1), PERIOD)[:200]
    assert cycle_fit(wandering, PERIOD) > 0.2
    assert cycle_fit(rng.normal(size=200), PERIOD) > 1.0  # no cycle at all: the differences are √2 times wider
    quantised = np.round(_shifts(200, noise=0.0))
    quantised[::7] += 1.0  # mostly exact repeats a cycle apart: the quartiles of the differences would read 0
    assert 0 < cycle_fit(quantised, PERIOD) < 0.2
    assert cycle_fit(_shifts(200), 0) == np.inf and cycle_fit(np.zeros(200), PERIOD) == np.inf


def test_a_scheduled_channel_is_judged_by_its_seasonal_level_and_no_other_is():
    record = SeasonalRecord(channels=2, span=32, after=100, fit=0.2, n_streams=1)
    wandering = np.random.default_rng(4).normal(0, 1.0, 100) + np.sin(np.arange(100) * 2 * np.pi / PERIOD)
    for t in range(100):
        record.push(np.array([0]), np.array([[_shifts(100)[t], wandering[t]]]))
    assert record.period_[0].tolist() == [PERIOD, PERIOD] and record.scheduled_[0].tolist() == [True, False]
    levels = record.scheduled_levels(np.array([0]), np.array([[1.0, 1.0]]), np.array([[9.0, 9.0]]))
    assert levels[0].tolist() == [9.0, 1.0]  # out of step: far out though the window finds it ordinary
    # An edge of the cycle: far out against the window, ordinary against a cycle earlier; no seasonal level: plain.
    levels = record.scheduled_levels(np.array([0]), np.array([[5.0, 1.0]]), np.array([[2.0, np.nan]]))
    assert levels[0].tolist() == [2.0, 1.0]
    # No reading a cycle earlier: a scheduled channel has no level (its plain one is not what its statistics learn).
    levels = record.scheduled_levels(np.array([0]), np.array([[5.0, 1.0]]), np.array([[np.nan, 3.0]]))
    assert np.isnan(levels[0, 0]) and levels[0, 1] == 1.0
    record.reset_streams(np.array([0]))
    assert not record.scheduled_.any()


def _missing_shift(n: int = 400, seed: int = 5):
    """One lane of a line's shifts whose shift at readings 318–329 does not happen, with its deviation parts."""
    x = _shifts(n, seed)
    x[318:330] = np.random.default_rng(seed + 1).normal(0.0, 0.3, 12)
    rng = np.random.default_rng(seed)
    deviation = np.full((n, 2, 1), np.nan)
    for t in range(17, n):
        deviation[t] = window_deviation(x[None, max(0, t - 31) : t + 1, None])[0]
    return x, rng.lognormal(size=n), rng.normal(size=(n, 4)), deviation


@pytest.mark.parametrize("floor", ["seasonal_gain=1.414", "seasonal_gain=0"])  # per-stream models; the general model
def test_a_shift_that_does_not_start_alerts_only_where_the_channel_is_scheduled(floor):
    inputs = _missing_shift()
    scheduled = _run(fresh(CONFIG.with_overrides(f"seasonal_fit=0.2;{floor}")), *inputs)
    plain = _run(fresh(CONFIG.with_overrides("seasonal_fit=0;seasonal_gain=0")), *inputs)
    assert any(alert for _, alert, _ in scheduled[318:330])
    assert not any(alert for _, alert, _ in plain[318:330])  # each missing reading lies inside the window's range
    assert max(d for _, _, d in plain[318:330]) < 3
    # Before the cycle is known (at the 100th reading) nothing changes.
    np.testing.assert_array_equal(np.array(scheduled[:99]), np.array(_run(fresh(CONFIG), *inputs)[:99]))


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_a_save_and_restore_mid_stream_equals_an_uninterrupted_run_with_a_scheduled_channel(round_trip):
    inputs, config = _missing_shift(), CONFIG.with_overrides("seasonal_fit=0.2")
    expected = _run(fresh(config), *inputs)
    first = fresh(config)
    got = _run(first, *(a[:250] for a in inputs))
    restored = fresh(config)
    restored.load_state(round_trip(first.state_dict()))
    got += _run(restored, *(a[250:] for a in inputs))
    np.testing.assert_array_equal(np.array(got), np.array(expected))
    assert restored.seasons.scheduled_[0, 0]


def test_the_cycle_after_a_fault_is_judged_against_the_cycle_before_it_not_the_fault():
    # The shift at 318–329 does not start; the next one (342–353) does. Against one cycle only, the missing shift is
    # the next one's reference and the normal shift alerts too.
    inputs = _missing_shift()
    one, two = (_run(fresh(CONFIG.with_overrides(f"seasonal_fit=0.2;seasonal_week=0;seasonal_cycles={k}")), *inputs)
                for k in (1, 2))  # fmt: skip
    for out in (one, two):
        assert any(alert for _, alert, _ in out[318:330])
    assert any(alert for _, alert, _ in one[342:354])
    assert not any(alert for _, alert, _ in two[342:354]) and max(d for _, _, d in two[342:354]) < 3
    with pytest.raises(ValueError, match="seasonal_cycles must be >= 1"):
        DetectorConfig(seasonal_cycles=0)


def test_a_scheduled_channel_is_read_against_the_nearer_cycle_only_where_two_earlier_cycles_disagree():
    record = SeasonalRecord(channels=2, span=8, after=100, fit=0.2, cycles=2, n_streams=1)
    assert record.size == 2 * 49 + 8
    x = np.stack([_shifts(200), _shifts(200, seed=1)], axis=1)
    x[150:156] = 5.0  # both channels off their cycle for a while
    for t in range(180):
        record.push(np.array([0]), x[t : t + 1])
    assert record.scheduled_[0].all() and 0 < record.typical_[0, 0] < 0.5  # noise of 0.3: differences of about 0.42
    record.scheduled_[0, 1], record.typical_[0, 1] = False, 0.0  # channel 1: read against a cycle earlier only
    rows, channels, differences = record.push(np.array([0]), x[180:181])
    t = np.arange(173, 181)  # the last 8 readings; 150–155 are a cycle before 174–179
    assert channels.tolist() == [0, 1]
    np.testing.assert_allclose(differences[1], x[t, 1] - x[t - PERIOD, 1], atol=1e-5)
    one, two = x[t, 0] - x[t - PERIOD, 0], x[t, 0] - x[t - 2 * PERIOD, 0]
    disagree = np.abs(x[t - PERIOD, 0] - x[t - 2 * PERIOD, 0]) > DISAGREE * record.typical_[0, 0]
    assert disagree.tolist() == [False] + [True] * 6 + [False]
    np.testing.assert_allclose(differences[0], np.where(disagree & (np.abs(two) < np.abs(one)), two, one), atol=1e-5)
    assert np.abs(differences[0]).max() < 2 < np.abs(differences[1]).max()
    # Where the two earlier cycles agree, the last one counts: the nearer of two would pick the smaller noise.
    np.testing.assert_allclose(differences[0][[0, 7]], one[[0, 7]], atol=1e-5)


def _working_weeks(weeks: int = 4) -> np.ndarray:
    """``_shifts`` on weekdays (days of ``PERIOD`` readings, the first a Monday) and none at the weekend, whose
    Wednesday of the third week (readings 384–407) runs no shift either."""
    x = _shifts(weeks * 7 * PERIOD, seed=6)
    weekend = (np.arange(len(x)) // PERIOD) % 7 >= 5
    x[weekend] = np.random.default_rng(7).normal(0.0, 0.3, int(weekend.sum()))
    x[16 * PERIOD : 17 * PERIOD] = np.random.default_rng(8).normal(0.0, 0.3, PERIOD)
    return x


def test_a_working_week_reads_its_weekend_and_its_monday_against_the_same_day_a_week_earlier():
    x = _working_weeks()
    week, no_week = (SeasonalRecord(channels=1, span=32, after=100, fit=0.2, cycles=2, week=w, n_streams=1)
                     for w in (7, 0))  # fmt: skip
    assert (week.lags, week.size) == ((2, 7), 7 * 49 + 32) and (no_week.lags, no_week.size) == ((2,), 2 * 49 + 32)
    with_week, without = _levels(week, x), _levels(no_week, x)
    assert week.scheduled_[0, 0] and week.period_[0, 0] == PERIOD  # found in the first 100 readings, all weekdays

    def busy(day: int) -> np.ndarray:  # the readings of a day's shift (or of where it would be)
        return np.arange(day * PERIOD + PERIOD // 4, day * PERIOD + 3 * PERIOD // 4)

    # The first Saturday has no week behind it: out of step with Friday either way.
    assert with_week[busy(5)].max() > 10 and without[busy(5)].max() > 10
    # The next Saturday and Monday are like the Saturday and Monday before them, out of step with the day before.
    for day in (12, 14):
        assert with_week[busy(day)].max() < 4 < 10 < without[busy(day)].max()
    # A Wednesday without its shift is out of step with the day before and with the Wednesday a week earlier.
    assert with_week[busy(16)].max() > 10
    # Days that keep to the week read alike either way.
    np.testing.assert_allclose(with_week[busy(9)], without[busy(9)])
    assert SeasonalRecord(after=100, fit=0.2, cycles=3, week=2).lags == (2, 3)
    assert SeasonalRecord(span=32, after=100, fit=0.0, cycles=2, week=7).size == 100  # nothing scheduled: no lags
    with pytest.raises(ValueError, match="seasonal_week must be >= 0"):
        DetectorConfig(seasonal_week=-1)


def _week_from_saturday(weeks: int = 5) -> np.ndarray:
    """``_working_weeks`` from its first Saturday on (so its first 100 readings hold a weekend), with the Wednesday
    without its shift moved to the last week (day 32, readings 768–791)."""
    x = _working_weeks(weeks + 1)[5 * PERIOD :][: weeks * 7 * PERIOD]
    x[11 * PERIOD : 12 * PERIOD] = x[4 * PERIOD : 5 * PERIOD]  # the old one runs the first Wednesday's shift
    x[32 * PERIOD : 33 * PERIOD] = np.random.default_rng(8).normal(0.0, 0.3, PERIOD)
    return x


def test_a_working_week_first_seen_over_a_weekend_is_scheduled_once_the_record_holds_a_week():
    x = _week_from_saturday()
    again, once = (SeasonalRecord(channels=1, span=32, after=100, fit=0.2, cycles=2, week=7, week_fit=w, n_streams=1)
                   for w in (0.2, 0.0))  # fmt: skip
    assert again.size == 7 * 49 + 32
    levels = _levels(again, x[: again.size - 1])
    assert again.period_[0, 0] == PERIOD and not again.scheduled_[0, 0]  # its first 100 readings hold a weekend
    assert cycle_fit(x[:100], PERIOD) > 0.2 > cycle_fit(x[: again.size], 7 * PERIOD)
    levels = np.concatenate([levels, _levels(again, x[again.size - 1 :])])
    before = _levels(once, x)
    assert again.scheduled_[0, 0] and not once.scheduled_[0, 0]
    assert again.typical_[0, 0] == pytest.approx(cycle_fit(x[: again.size], 7 * PERIOD) * np.std(x[: again.size]),
                                                 rel=1e-3)  # fmt: skip

    def busy(day: int) -> np.ndarray:
        return np.arange(day * PERIOD + PERIOD // 4, day * PERIOD + 3 * PERIOD // 4)

    # Days 21 and 23 are a Saturday and a Monday after the record held a week: ordinary against a week earlier, far
    # out against the day before, as a channel that is never scheduled reads them.
    for day in (21, 23):
        assert levels[busy(day)].max() < 4 < 10 < before[busy(day)].max()
    # The Wednesday without its shift is out of step with the day before and the Wednesday a week earlier.
    assert levels[busy(32)].max() > 10


def test_a_cycle_found_a_reading_short_is_set_right_against_a_week_earlier():
    x = _week_from_saturday()
    record = SeasonalRecord(channels=1, span=32, after=100, fit=0.2, cycles=2, week=7, week_fit=0.2, n_streams=1)
    _levels(record, x[:100])
    record.period_[0, 0] = PERIOD - 1  # as a day of 288 readings was found as 285 in 750
    _levels(record, x[100 : record.size])
    assert record.period_[0, 0] == PERIOD and record.scheduled_[0, 0]
    # Only a cycle within REFINE (and at least 2 readings) of the one found is looked for.
    far = SeasonalRecord(channels=1, span=32, after=100, fit=0.2, cycles=2, week=7, week_fit=0.2, n_streams=1)
    _levels(far, x[:100])
    far.period_[0, 0] = PERIOD - 5
    _levels(far, x[100 : far.size])
    assert far.period_[0, 0] == PERIOD - 5 and not far.scheduled_[0, 0]
    with pytest.raises(ValueError, match="seasonal_week_fit must be finite and >= 0"):
        DetectorConfig(seasonal_week_fit=-0.1)
    # Without a week lag, or without scheduled channels, nothing is looked at again.
    assert SeasonalRecord(after=100, fit=0.2, week=0, week_fit=0.3).week_fit == 0
    assert SeasonalRecord(after=100, fit=0.0, week=7, week_fit=0.3).week_fit == 0


def test_a_lane_scheduled_once_the_record_holds_a_week_relearns_its_deviation_statistics_from_all_of_it():
    x = _week_from_saturday()
    config = CONFIG.with_overrides("seasonal_gain=0;seasonal_fit=0.2")  # seasonal_week_fit at its default, 0.3
    detector, one = fresh(config), np.array([0])
    rng = np.random.default_rng(3)
    distance, z, deviation = rng.lognormal(size=len(x)), rng.normal(size=(len(x), 4)), _deviation_parts(x)
    k, size = config.signals.index("deviation"), detector.seasons.size
    for t in range(size):
        detector.step(one, one, one, distance[t : t + 1], z[t : t + 1], deviation[t : t + 1], None, x[t : t + 1, None])
        if t == size - 2:
            learned = detector.stats.count_[0, k]
    # Every 15th reading back from the last (RELEARN_STRIDE times the ring's 375 readings over the first 100), whose
    # window of 32 differences has none missing (from reading 24 + 31 on).
    assert detector.seasons.scheduled_[0, 0] and detector.stats.count_[0, k] == len(range(size - 1, 24 + 31 - 1, -15))
    assert learned != detector.stats.count_[0, k]


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_a_save_and_restore_before_the_second_look_equals_an_uninterrupted_run(round_trip):
    x = _week_from_saturday()
    inputs, config = (x, *_inputs(len(x))[1:3], _deviation_parts(x)), CONFIG.with_overrides("seasonal_fit=0.2")
    expected = _run(fresh(config), *inputs)
    first = fresh(config)
    got = _run(first, *(a[:300] for a in inputs))
    assert not first.seasons.scheduled_[0, 0]
    restored = fresh(config)
    restored.load_state(round_trip(first.state_dict()))
    got += _run(restored, *(a[300:] for a in inputs))
    np.testing.assert_array_equal(np.array(got), np.array(expected))
    assert restored.seasons.scheduled_[0, 0] and restored.seasons.size == 375 < len(x)  # scheduled at the look


def test_a_lane_found_scheduled_relearns_its_deviation_statistics_from_the_seasonal_levels_of_its_readings_so_far():
    x = _shifts(400, seed=2)
    x[222:234] = np.random.default_rng(9).normal(0.0, 0.3, 12)  # 222 % 24 = 6: a shift that does not start
    rng = np.random.default_rng(3)
    distance, z, deviation = rng.lognormal(size=400), rng.normal(size=(400, 4)), _deviation_parts(x)
    config = CONFIG.with_overrides("seasonal_gain=0;seasonal_fit=0.2;seasonal_after=200")
    k, one = config.signals.index("deviation"), np.array([0])

    def run(inflate_at: int) -> tuple[tuple[float, ...], list[int]]:
        detector, alerts = fresh(config), []
        for t in range(400):
            if t == inflate_at:  # statistics as a cycle's edges, far out against the window, leave them
                detector.stats.var_[0, k] = 100.0
            step = detector.step(one, one, one, distance[t : t + 1], z[t : t + 1], deviation[t : t + 1], None,
                                 x[t : t + 1, None])  # fmt: skip
            if t == 199:  # the 200th reading: the cycle is found, the channel scheduled
                stats = (detector.stats.count_[0, k], detector.stats.mean_[0, k], detector.stats.var_[0, k])
            if step.alert[0]:
                alerts.append(t)
        return stats, alerts

    # The statistics are those of the seasonal levels of every 4th reading (RELEARN_STRIDE) back from the 200th,
    # whose windows of 32 differences from a cycle earlier have no gap, learned in order.
    expected = SignalStats(1, config.horizon, 1, None, config.tail_dof, 1)
    differences = x[:200] - np.concatenate([np.full(PERIOD, np.nan), x[: 200 - PERIOD]])
    windows = np.lib.stride_tricks.sliding_window_view(differences, 32)[::-1][::4][::-1]
    windows = windows[np.isfinite(windows).all(axis=1)][:, :, None]
    least = np.full((len(windows), 1), 0.02 * np.std(x[:200].astype(np.float32)))
    for level in window_deviation(windows, least=least)[:, 0, 0]:
        expected.learn(one, np.array([[level]]), np.array([True]))
    stats, alerts = run(inflate_at=199)
    assert stats[0] == expected.count_[0, 0] == len(range(199, 24 + 31 - 1, -4))
    np.testing.assert_allclose(stats[1:], (expected.mean_[0, 0], expected.var_[0, 0]), rtol=1e-4)
    assert 222 in alerts  # the inflated statistics were relearnt ...
    assert run(inflate_at=200)[1] == []  # ... and left in place, the shift that does not start is ordinary


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_a_record_saved_at_another_size_is_laid_into_this_one_and_its_lanes_keep_their_cycles(round_trip):
    # A checkpoint of a detector that compared with one cycle only (a smaller ring) resumes without finding its cycles
    # again: the readings it kept lie where the larger ring reads them.
    inputs = _missing_shift()
    before = fresh(CONFIG.with_overrides("seasonal_fit=0.2;seasonal_cycles=1;seasonal_week=0"))
    _run(before, *(a[:250] for a in inputs))
    after = fresh(CONFIG.with_overrides("seasonal_fit=0.2;seasonal_cycles=2"))  # and a week back: a larger ring
    after.load_state(round_trip(before.state_dict()))
    old, new = before.seasons, after.seasons
    assert (old.size, new.size) == (100, 7 * 49 + 32)
    assert new.seen_[0] == 250 and new.period_[0, 0] == PERIOD and new.scheduled_[0, 0]
    kept = np.arange(150, 250)  # the old ring's readings
    np.testing.assert_array_equal(new.ring_[0, 0, kept % new.size], old.ring_[0, 0, kept % 100])
    assert np.isnan(new.ring_[0, 0, np.arange(150) % new.size]).all()  # readings the old ring no longer held
    # From the next reading on it judges the scheduled channel as a record that never stopped: the missing shift
    # alerts, and the cycle after it does not.
    out = _run(after, *(a[250:] for a in inputs))
    assert all(np.isfinite(d) for _, _, d in out[:10])
    assert any(alert for _, alert, _ in out[318 - 250 : 330 - 250])
    assert not any(alert for _, alert, _ in out[342 - 250 : 354 - 250])


def test_a_stream_scaled_model_has_scheduled_channels_without_the_floor():
    config = DetectorConfig().for_scaling("stream")
    assert config.seasonal_gain == 0 and config.seasonal_fit > 0
    detector = Detector(config, dims=4)
    assert detector.seasonal and detector.seasons.after == config.seasonal_after
    assert not Detector(config.with_overrides("seasonal_fit=0"), dims=4).seasonal  # no record kept for nothing
    with pytest.raises(ValueError, match="seasonal_fit must be finite and >= 0"):
        DetectorConfig(seasonal_fit=-0.1)


def test_a_state_saved_without_a_seasonal_record_resumes_with_scheduled_channels():
    # A general-model daemon's checkpoint from before seasonal_fit keeps no seasonal readings (and no scheduled_);
    # resumed by a detector that keeps the record, each lane's record starts fresh and finds its cycle again.
    before = Detector(CONFIG.with_overrides("seasonal_gain=0"), dims=4)
    before.add(streams=1, lanes=1)
    inputs = _missing_shift()
    _run(before, *(a[:150] for a in inputs))
    state = {k: v for k, v in npz_round_trip(before.state_dict()).items() if k != "seasons/scheduled_"}
    after = Detector(CONFIG.with_overrides("seasonal_gain=0;seasonal_fit=0.2"), dims=4)
    after.add(streams=1, lanes=1)
    after.load_state(state)
    assert after.seasons.ring_.shape == (1, 1, 7 * 49 + 32) and after.seasons.seen_[0] == 0  # a week of cycles of 49
    np.testing.assert_array_equal(after.stats.count_, before.stats.count_)
    _run(after, *(a[150:] for a in inputs))
    assert after.seasons.scheduled_[0, 0]


def _deviation_parts(x: np.ndarray) -> np.ndarray:
    """``window_deviation`` parts of each reading of one channel against its last 32."""
    deviation = np.full((len(x), 2, 1), np.nan)
    for t in range(17, len(x)):
        deviation[t] = window_deviation(x[None, max(0, t - 31) : t + 1, None])[0]
    return deviation


def test_a_missing_reading_of_a_scheduled_channel_raises_nothing_a_cycle_later():
    x = _pulses(600)
    x[[288, 432]] = np.nan  # two pulses lost: a cycle later each pulse is read against the one two cycles earlier
    rng = np.random.default_rng(3)
    inputs = (x, rng.lognormal(size=600), rng.normal(size=(600, 4)), _deviation_parts(x))
    config = CONFIG.with_overrides("seasonal_gain=0;seasonal_fit=0.2;refractory=5")
    out = _run(fresh(config), *inputs)
    assert not any(alert for _, alert, _ in out[250:])
    assert np.isfinite(out[312][2]) and np.isfinite(out[456][2])  # judged, where one cycle gave no level
    out = _run(fresh(config.with_overrides("seasonal_cycles=1;seasonal_week=0")), *inputs)
    assert not any(alert for _, alert, _ in out[250:])
    assert np.isnan(out[312][2]) and np.isnan(out[456][2])  # no level, where the plain one read 25 and more


def test_a_schedule_kept_exactly_reads_a_small_slip_on_a_share_of_its_spread_not_in_thousands():
    t = np.arange(2000)
    x = np.where((t % PERIOD) < PERIOD // 2, 0.0, 10.0)  # on a grid, repeating to the digit
    x[np.random.default_rng(6).choice(np.arange(150, 2000), 8, replace=False)] += 1.0
    rng = np.random.default_rng(3)
    inputs = (x, rng.lognormal(size=2000), rng.normal(size=(2000, 4)), _deviation_parts(x))
    detector = fresh(CONFIG.with_overrides("seasonal_gain=0;seasonal_fit=0.2"))
    out = _run(detector, *inputs)
    assert detector.seasons.scheduled_[0, 0]
    # A slip of 1 on a spread of 5: at most 1 / (0.02 · 5) = 10 scales; a still window's scale read it as 1,000.
    assert 1.0 < np.nanmax([d for _, _, d in out[150:]]) < 10.5


# a gap the windows restart after (Detector.resume)


def _copy(record: SeasonalRecord) -> SeasonalRecord:
    return SeasonalRecord.from_state(record.state_dict())


@pytest.mark.parametrize("week", [0, 3])
def test_skipping_a_gap_is_pushing_its_missing_readings_and_a_gap_over_a_search_starts_the_lane_afresh(week):
    # Lanes 0 and 1 have wrapped their ring (every search done); lane 2 is inside its first ``after`` readings.
    record = SeasonalRecord(channels=1, span=32, after=100, fit=0.2, cycles=2, week=week, week_fit=0.3 * bool(week),
                            n_streams=3)  # fmt: skip
    x = _pulses(2 * record.size + 7)
    for t, value in enumerate(x):
        record.push(np.arange(2) if t >= 50 else np.arange(3), np.full((2 if t >= 50 else 3, 1), value))
    pushed, skipped = _copy(record), _copy(record)
    gaps = np.array([37, record.size + 5])  # a short gap, and one longer than the ring
    for t in range(int(gaps.max())):
        due = np.flatnonzero(gaps > t)
        pushed.push(due, np.full((len(due), 1), np.nan))
    skipped.skip(np.arange(2), gaps)
    np.testing.assert_array_equal(skipped.seen_, pushed.seen_)
    np.testing.assert_array_equal(skipped.ring_, pushed.ring_)  # NaN where the gap is, the rest where it was
    assert record.period_[0, 0] == PERIOD and (skipped.period_[:2] == PERIOD).all()
    # Lane 2's gap covers its 100th reading, where its cycle would have been found: it starts afresh.
    young = _copy(record)
    young.skip(np.array([2]), np.array([60]))
    assert young.seen_[2] == 0 and young.period_[2, 0] == 0 and np.isnan(young.ring_[2]).all()
    short = _copy(record)
    short.skip(np.array([2]), np.array([10]))  # a gap that ends before it: its readings are missing ones
    assert short.seen_[2] == 60 and np.isnan(short.ring_[2, 0, 50:60]).all()
