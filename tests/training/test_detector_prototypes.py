"""bench/detector_prototypes.py: prototypes change only what they name, and only while they replay."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from trep_edge.runtime.core.detector import (
    MODEL_SIGNALS, SIGNALS, AlertGate, DetectorConfig, RangeRecord, SignalPrior, SignalStats,
)
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.seasonal import SeasonalRecord
from trep_edge.training.evaluation.detection_corpus import Stream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the script imports its sibling detector_replay, as when it runs
import detector_prototypes as prototypes  # noqa: E402

replay = prototypes.dr.replay


def _stream() -> Stream:
    rng = np.random.default_rng(5)
    t = np.arange(900)
    values = (np.sin(2 * np.pi * t / 60) + rng.normal(0, 0.1, len(t)))[:, None]
    values[700:760, 0] += 0.25 * np.sin(np.linspace(0, np.pi, 60))  # a cycle a little out of shape
    return Stream("one", "synthetic", ["c0"], values, [(700, 759)])


@pytest.mark.parametrize("spec", ["nope:x=1", "brown:rho", "brown:rho=high", "window-gap:span=3", "context:where=3"])
def test_a_bad_prototype_is_refused_by_name(spec):
    with pytest.raises(ValueError, match="prototype"):
        prototypes.parse(spec)


def test_window_gap_zero_rebuilds_the_captured_deviation(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = _stream()
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    rebuilt = prototypes.parse("window-gap:gap=0").rewrite(stream, tape)
    captured = [c[6][:, 0] for c in tape if c[0] == "step" and c[6] is not None]
    again = [c[6][:, 0] for c in rebuilt if c[0] == "step" and c[6] is not None]
    assert len(captured) == len(again) > 800
    # the monitor windows float32 readings; the level matches the float64 values up to that rounding
    np.testing.assert_allclose(np.concatenate(again), np.concatenate(captured), rtol=1e-4, atol=1e-6)
    moved = prototypes.parse("window-gap:gap=16").rewrite(stream, tape)
    assert not np.allclose(np.concatenate([c[6][:, 0] for c in moved if c[0] == "step" and c[6] is not None]),
                           np.concatenate(captured), equal_nan=True)  # fmt: skip


def test_quiet_record_adds_alerts_only_while_patched(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = _stream()
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    config = DetectorConfig().with_overrides("threshold=50;quiet=0")  # the committed gate never alerts
    decide = AlertGate.decide
    with prototypes.parse("quiet-record:low=0.5;margin=0;after=100").patches():
        (_, quiet), = replay([tape], config, engine.card.detector_prior, [len(stream.values)])
    (_, plain), = replay([tape], config, engine.card.detector_prior, [len(stream.values)])
    assert AlertGate.decide is decide
    assert quiet.sum() >= 1 and plain.sum() == 0
    gaps = np.diff(np.flatnonzero(quiet))
    assert (gaps > config.refractory).all()  # the refractory period holds for the second path too


def test_surprise_scores_gives_each_alert_its_own_surprise_only_while_patched(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    values = _stream().values.copy()
    values[600, 0] = 5.0  # far past the cycle's range: alerts by the range path, whatever its score
    stream = Stream("spike", "synthetic", ["c0"], values, [(600, 600)])
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    config = DetectorConfig().with_overrides("threshold=50")  # every alert comes from a path below the threshold
    args = ([tape], config, engine.card.detector_prior, [len(values)])
    (score, alerts), = replay(*args)
    with prototypes.parse("surprise-scores").patches():
        (own, same), = replay(*args)
    assert alerts[600] and np.array_equal(same, alerts)
    assert (score[alerts] == 50).all() and (own[alerts] < 50).all()  # committed: raised to the threshold
    assert np.array_equal(own[~alerts], score[~alerts], equal_nan=True)  # the other readings are as committed
    assert np.array_equal(replay(*args)[0][0], score, equal_nan=True)  # unpatched again


def test_mean_range_finds_a_shift_of_the_mean_inside_the_readings_range_only_while_patched():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.0, 1.0, 1500)
    x[1000:] += 0.18  # every reading stays within 0.1 of the range [-1, 1] it had: the plain range never leaves it

    def left() -> np.ndarray:
        record = RangeRecord(channels=1, tol=0.1, least=100, n_streams=1)
        return np.array([bool(record.beyond(np.array([0]), np.array([[v]]))[0]) for v in x])

    beyond = RangeRecord.beyond
    with prototypes.parse("mean-range:k=64;after=100").patches():
        shifted = left()
    assert RangeRecord.beyond is beyond
    assert not left().any() and shifted[1000:1100].any()
    # Its weakness, measured on the corpus as false alarms: a young record of means is narrow, and with the lag the
    # means just before a reading cannot widen it, so stationary noise leaves it in runs too.
    assert shifted[:1000].any()


def test_range_free_leaves_the_budget_unspent_by_a_range_alert_only_while_patched():
    def spent(ranged: bool) -> float:
        gate = AlertGate(threshold=4.0, min_count=1, refractory=0, protect=10, n_streams=1)
        gate.decide(np.array([0]), np.array([1.0]), None, np.array([ranged]))
        return float(gate.spent_[0])

    with prototypes.parse("range-free").patches():
        assert spent(True) == 0.0 and spent(False) == 0.0  # a range alert, and no alert
    assert spent(True) == 1.0  # committed: the range alert spends one


def test_range_in_budget_stops_range_alerts_only_over_the_budget_and_only_while_patched():
    def alerts(spent: float) -> bool:
        gate = AlertGate(threshold=4.0, min_count=1, refractory=0, protect=10, budget=2.0, budget_span=1000,
                         budget_cost=1.0, n_streams=1)  # fmt: skip
        gate.spent_[0] = spent
        return bool(gate.decide(np.array([0]), np.array([1.0]), None, np.array([True]))[0][0])

    with prototypes.parse("range-in-budget").patches():
        assert alerts(1.0) and not alerts(3.0)  # within the budget it alerts; past it, not
    with prototypes.parse("range-in-budget:slack=2").patches():
        assert alerts(3.0) and not alerts(5.0)
    assert alerts(3.0) and alerts(5.0)  # committed: the range path alerts whatever the budget


def test_range_calm_lets_only_a_calm_channels_exit_alert_and_only_while_patched():
    rng = np.random.default_rng(3)
    calm = rng.normal(0, 1, 1200)
    calm[1000] = 12.0  # far beyond a stationary channel's range, long after its range last grew much
    growing = rng.normal(0, 1, 1200)
    growing[[700, 900, 1100]] = [6.0, 9.0, 13.5]  # bursts that keep setting new extremes, 200 readings apart

    def exits(x: np.ndarray) -> list[int]:
        record = RangeRecord(1, 0.1, 300, n_streams=1)
        return [t for t, v in enumerate(x) if record.beyond(np.array([0]), np.array([[v]]))[0]]

    with prototypes.parse("range-calm:gap=500").patches():
        assert exits(calm) == [1000] and exits(growing) == [700]  # the second and third bursts are not news
    assert exits(calm) == [1000] and exits(growing) == [700, 900, 1100]  # committed: every exit counts


def test_range_young_asks_a_young_range_for_more_only_while_patched():
    x = np.zeros(1200)
    x[:300] = np.linspace(0.0, 1.0, 300)  # a range of 1 after 300 readings, then flat
    x[400], x[1100] = 1.2, 1.4  # 0.2 past the range at 400 readings: too little there; 0.2 again at 1,100: enough

    def exits() -> list[int]:
        record = RangeRecord(1, 0.1, 300, n_streams=1)
        return [t for t, v in enumerate(x) if record.beyond(np.array([0]), np.array([[v]]))[0]]

    with prototypes.parse("range-young:age=1000").patches():  # at 400 readings it asks 0.25 of the range
        assert exits() == [1100]
    assert exits() == [400, 1100]


def test_phase_range_finds_a_peak_at_a_troughs_moment_inside_the_range_only_while_patched():
    rng = np.random.default_rng(2)
    x = np.sin(2 * np.pi * np.arange(1600) / 24) + rng.normal(0, 0.05, 1600)
    x[1530] = 1.0  # a trough's moment (1530 = 63.75 cycles) at the peak's level: inside the range, not the moment's

    def left() -> np.ndarray:
        seasons, record = SeasonalRecord(1, 128, 750, n_streams=1), RangeRecord(1, 0.1, 300, n_streams=1)
        record._seasons = seasons  # as the prototype's step gives it, the reading pushed before the range's check
        out = []
        for v in x:
            seasons.push(np.array([0]), np.array([[v]]))
            out.append(bool(record.beyond(np.array([0]), np.array([[v]]))[0]))
        return np.array(out)

    with prototypes.parse("phase-range").patches():
        moments = left()
    assert _found_period(x) == 24
    assert not left().any() and np.flatnonzero(moments).tolist() == [1530]


def _found_period(x: np.ndarray) -> int:
    """The cycle ``SeasonalRecord`` finds in the first 750 readings of ``x``."""
    seasons = SeasonalRecord(1, 128, 750, n_streams=1)
    for v in x[:750]:
        seasons.push(np.array([0]), np.array([[v]]))
    return int(seasons.period_[0, 0])


def _levels(stream: Stream, tape: list, spec: str) -> np.ndarray:
    """The ``deviation`` level each row of ``stream`` gets from ``spec``'s rewrite of its tape (NaN: none)."""
    steps = [c[6][0, 0, 0] if c[6] is not None else np.nan for c in prototypes.parse(spec).rewrite(stream, tape)
             if c[0] == "step"]  # fmt: skip
    out = np.full(len(stream.values), np.nan)
    for row, level in zip(prototypes.dr.step_rows(tape), steps, strict=True):
        if row >= 0:
            out[row] = level
    return out


def _plain_and(tmp_path, values: np.ndarray, events: list[tuple[int, int]], spec: str) -> tuple[np.ndarray, np.ndarray]:
    """The plain ``deviation`` level and ``spec``'s of a univariate stream under the general model."""
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = Stream(spec, "synthetic", ["c0"], values, events)
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    return _levels(stream, tape, "window-gap:gap=0"), _levels(stream, tape, spec)


def _raised_levels(tmp_path, values: np.ndarray, event: tuple[int, int], spec: str) -> tuple[np.ndarray, np.ndarray]:
    """``_plain_and`` for one event, checking that ``spec`` never lowers the level."""
    plain, raised = _plain_and(tmp_path, values, [event], spec)
    seen = np.isfinite(plain)
    assert (raised[seen] >= plain[seen]).all()
    return plain, raised


@pytest.mark.parametrize("spec", ["shift:k=8", "mean-shift:k=8"])
def test_shift_raises_the_level_where_a_noisy_channel_moves_and_never_lowers_it(tmp_path, spec):
    rng = np.random.default_rng(7)
    values = rng.normal(0, 1, (900, 1))
    values[600:, 0] += 1.5  # a sustained shift smaller than the noise's own spread of single readings
    plain, shifted = _raised_levels(tmp_path, values, (600, 899), spec)
    # eight readings into the shift the mean of the last eight stands out far more than any one reading does
    assert np.nanmedian(shifted[610:640]) > 2 * np.nanmedian(plain[610:640])


def test_drift_raises_the_level_where_a_slow_drift_leaves_the_longer_stretch_and_never_lowers_it(tmp_path):
    rng = np.random.default_rng(3)
    values = rng.normal(0, 1, (1600, 1))
    values[1300:1500, 0] += np.linspace(0, 6, 200)  # six spreads over 200 readings: the 128-reading window follows it
    values[1500:, 0] += 6
    plain, drifted = _raised_levels(tmp_path, values, (1300, 1500), "drift:k=32;span=1024")
    # late in the drift each reading stands little out of its recent window, but the last 32 readings' mean
    # stands far out of the means before it
    assert np.nanmedian(plain[1450:1500]) < 3 < np.nanmedian(drifted[1450:1500])


def test_rhythm_raises_the_level_where_a_smooth_cycle_speeds_up_and_never_lowers_it(tmp_path):
    t = np.arange(900, dtype=np.float64)
    values = np.sin(2 * np.pi * t / 60)[:, None]
    values[600:700, 0] = np.sin(2 * np.pi * t[600:700] / 20)  # three times as fast, inside the same range
    plain, rhythm = _raised_levels(tmp_path, values, (600, 699), "rhythm:k=16")
    # no reading leaves the cycle's range, but sixteen steps into the faster stretch its steps stand far out
    assert np.nanmedian(plain[616:640]) < 3 < np.nanmedian(rhythm[616:640])


def test_cross_reads_a_channel_that_leaves_its_siblings_as_far_out_and_a_joint_move_as_ordinary():
    rng = np.random.default_rng(3)
    process = np.cumsum(rng.normal(0, 1, 1000))  # one wandering process that three coupled sensors measure
    values = np.stack([process, 2 * process, -process], axis=1) + rng.normal(0, 0.1, (1000, 3))
    values[500, 0] += 1.0  # one sensor off by a reading well inside the process's range
    values[700:] += [5.0, 10.0, -5.0]  # the process steps: every sensor moves with it
    span = DetectorConfig().deviation_window
    miss = prototypes.window_deviation(prototypes._cross_residuals(values, 0, span)[:, :, None])[:, 0, 0]
    plain = prototypes._levels(values[:, 0], span)
    assert miss[500] > 5 > plain[500]  # the sensor left its siblings' relation: far out only in the miss
    assert miss[700] < 2 < plain[700]  # a joint step is far out in the sensor's own window, not against its siblings
    first = prototypes._cross_residuals(values, 0, span)[:, -1]
    assert np.isnan(first[:16]).all() and np.isfinite(first[16])  # fitted from 16 earlier readings on
    tape = [("row", 0)]
    assert prototypes.parse("cross:gain=1").rewrite(_stream(), tape) is tape  # one channel: nothing to read it against
    # one lane of the three channels, as a per-stream model's tape holds it: deviation parts [1, 2, 3] a row
    tape = [call for row in range(1000) for call in (
        ("row", row), ("step", *np.zeros((3, 1), dtype=int), np.ones(1), np.zeros((1, 4)), np.zeros((1, 2, 3)), None))]
    stream = Stream("coupled", "synthetic", ["c0", "c1", "c2"], values, [(500, 500)])
    read = {spec: np.array([c[6][0, 0, 0] for c in prototypes.parse(spec).rewrite(stream, tape) if c[0] == "step"])
            for spec in ("cross:gain=1", "cross:over=3;ratio=2")}  # fmt: skip
    assert read["cross:gain=1"][500] == read["cross:over=3;ratio=2"][500] == miss[500]
    ordinary = np.isfinite(plain) & (miss < 3)  # gated: a miss under 3 leaves the reading's own level
    np.testing.assert_array_equal(read["cross:over=3;ratio=2"][ordinary], plain[ordinary])
    assert (read["cross:gain=1"][ordinary] > plain[ordinary]).mean() > 0.3  # ungated: ordinary levels rise too


def test_context_quiets_a_daily_rise_that_only_the_last_few_hours_had_not_seen_and_never_raises_a_level(tmp_path):
    rng = np.random.default_rng(4)
    t = np.arange(1200)
    values = (3.0 * (t % 400 >= 200) + rng.normal(0, 0.05, len(t)))[:, None]  # on for half of each 400-reading "day"
    plain, context = _plain_and(tmp_path, values, [], "context:span=512")
    seen = np.isfinite(plain)
    assert (context[seen] <= plain[seen]).all()
    # the third day's rise leaves the last 128 readings' range (all off), not the last 512's (half of them on)
    assert plain[1000] > 20 and context[1000] < 0.1 * plain[1000]


def test_seasonal_lower_quiets_an_edge_that_recurs_each_period_not_a_spike_and_never_raises_a_level(tmp_path):
    rng = np.random.default_rng(4)
    t = np.arange(1200)
    values = (3.0 * (t % 60 >= 56) + rng.normal(0, 0.05, len(t)))[:, None]  # a 4-reading pulse every 60
    values[1050, 0] += 3.0  # a spike between pulses
    plain, lower = _plain_and(tmp_path, values, [], "seasonal:acf=0.3;lower=1;gain=2")
    seen = np.isfinite(plain)
    assert (lower[seen] <= plain[seen] + 1e-9).all()
    # a pulse's rise is far out against the last 128 readings but like the same moment a period earlier
    assert plain[896] > 20 and lower[896] < 0.1 * plain[896]
    assert lower[1050] > 0.5 * plain[1050] > 10  # nothing a period earlier explains the spike
    _, above = _plain_and(tmp_path, values, [], "seasonal:acf=0.3;lower=1;gain=2;above=5")
    small = seen & (plain <= 5)
    np.testing.assert_array_equal(above[small], plain[small])  # an ordinary level is left as it is
    assert above[896] == lower[896]


def test_seasonal_trust_lowers_a_channel_only_once_the_period_has_foretold_its_loud_readings(tmp_path):
    rng = np.random.default_rng(4)
    t = np.arange(1200)
    values = (3.0 * (t % 60 >= 56) + rng.normal(0, 0.05, len(t)))[:, None]  # a 4-reading pulse every 60
    plain, lower = _plain_and(tmp_path, values, [], "seasonal:acf=0.3;lower=1;gain=2")
    _, trusted = _plain_and(tmp_path, values, [], "seasonal:acf=0.3;lower=1;gain=2;trust=0.5;need=5")
    _, others = _plain_and(tmp_path, values, [], "seasonal:acf=0.3;lower=1;gain=2;trust=0.5;need=5;distrust=1")
    # the first pulse a period earlier can explain: the pulse before it was loud and unforetold, so the channel has
    # not earned the lower level yet; from the third pulse's second reading on (five foretold of nine) it has
    early, late = 116, 896
    assert plain[early] > 20 and lower[early] < 0.1 * plain[early]
    assert trusted[early] == plain[early] and others[early] == lower[early]
    assert trusted[late] == lower[late] < 0.1 * plain[late] and others[late] == plain[late]
    seen = np.isfinite(plain)
    lowered = seen & (lower < plain)
    # every reading takes one of the two levels, and each form lowers where the other does not
    np.testing.assert_array_equal(np.where(trusted[lowered] == lower[lowered], 0, 1) + np.where(
        others[lowered] == lower[lowered], 0, 1), np.ones(lowered.sum(), dtype=int))
    _, fixed = _plain_and(tmp_path, values, [], "seasonal:lag=60;lower=1;gain=2")
    np.testing.assert_array_equal(fixed[seen], lower[seen])  # the period found is the pulse's 60


def test_seasonal_judged_apart_learns_the_plain_level_and_judges_the_lowered_one_only_while_patched(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = _stream()  # a cycle of 60 readings
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    # The prototype of the committed seasonal floor, measured against a detector without it.
    config, rows = DetectorConfig(seasonal_gain=0), [len(stream.values)]
    (plain, _), = replay([tape], config, engine.card.detector_prior, rows)
    step = prototypes.detector_module.Detector.step
    prototype = prototypes.parse("seasonal:acf=0.3;lower=1;judge=1")
    unlowered = prototypes._with_channel_levels(tape, [np.full(rows[0], np.inf)], lower=True, apart=True)
    with prototype.patches():
        (same, _), = replay([unlowered], config, engine.card.detector_prior, rows)
        (lowered, _), = replay([prototype.rewrite(stream, tape)], config, engine.card.detector_prior, rows)
    assert prototypes.detector_module.Detector.step is step
    np.testing.assert_array_equal(same, plain)  # the third slot alone decides what is judged
    seen = np.isfinite(plain)
    # the statistics are the plain run's, so a lowered level only ever lowers the score (the gate decides alike: no
    # alert on this stream either way)
    assert (lowered[seen] <= plain[seen] + 1e-12).all() and (lowered[seen] < plain[seen] - 1e-3).mean() > 0.1
    # skip: a lowered reading is not learned, so the statistics move; with nothing lowered nothing is skipped
    skipping = prototypes.parse("seasonal:acf=0.3;lower=1;judge=1;skip=0")
    with skipping.patches():
        (same, _), = replay([unlowered], config, engine.card.detector_prior, rows)
        (skipped, _), = replay([skipping.rewrite(stream, tape)], config, engine.card.detector_prior, rows)
    np.testing.assert_array_equal(same, plain)
    assert not np.allclose(skipped[seen], lowered[seen])


def test_context_at_rest_lowers_only_a_stir_of_a_channel_at_rest_that_its_longer_stretch_has_seen(tmp_path):
    rng = np.random.default_rng(4)
    values = np.zeros((900, 1))
    values[200:300, 0] = 5.0 + rng.normal(0, 1.0, 100)  # a working stretch, then rest
    values[600, 0] = 4.0  # a stir at rest, inside the working stretch's range
    plain, rest = _plain_and(tmp_path, values, [], "context:span=512;where=1")
    before = np.isfinite(plain) & (np.arange(900) < 600)
    # before the stir no level moves: a window not at rest keeps its own, and a 0 at rest stays 0
    np.testing.assert_allclose(rest[before], plain[before], rtol=1e-4, atol=1e-6)
    # the stir: far out on the rest's scale floor, inside the range of the last 512 readings
    assert plain[600] > 20 and rest[600] < 0.1 * plain[600]


def test_readout_residuals_vanish_where_the_reading_is_linear_in_the_earlier_representation():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(600, 6))
    x = np.full(600, np.nan)
    x[8:] = z[:-8] @ np.arange(1.0, 7.0) + 2.0  # x_t read off the representation 8 rows earlier
    miss = prototypes._readout_residuals(z, x, 8, 100, 1e-6)
    assert np.isnan(miss[:300]).all()  # refitted every 100 rows once 200 pairs are seen: from row 300
    assert np.nanmax(np.abs(miss[300:])) < 1e-4
    noise = rng.normal(size=600)  # nothing the representation says: no miss is judged where the readout cannot fit
    assert np.isnan(prototypes._readout_residuals(z, noise, 8, 100, 1.0, fit=0.5)).all()
    assert np.isfinite(prototypes._readout_residuals(z, noise, 8, 100, 1.0)[300:]).all()


def test_readout_raises_the_level_where_a_cycle_jumps_to_the_wrong_phase_and_never_lowers_it(tmp_path):
    t = np.arange(900, dtype=np.float64)
    values = np.sin(2 * np.pi * t / 60)[:, None]
    values[600:690, 0] = np.sin(2 * np.pi * t[600:690] / 60 + np.pi)  # the same cycle, half a period out
    plain, readout = _raised_levels(tmp_path, values, (600, 689), "readout:h=8")
    # inside the cycle's range, so the plain level stays low, but not where the representation said it would be
    assert np.nanmedian(plain[610:640]) < 3 < np.nanmedian(readout[610:640])


def test_prior_spread_widens_only_the_model_signals_prior_and_only_while_patched():
    card = {"signals": list(SIGNALS), "mean": [0.0] * len(SIGNALS), "var": [1.0] * len(SIGNALS), "n": 400}
    with prototypes.parse("prior-spread:k=4;weight=300").patches():
        wide = SignalPrior.from_card(card, SIGNALS, 100)
    plain = SignalPrior.from_card(card, SIGNALS, 100)
    model = [SIGNALS.index(name) for name in MODEL_SIGNALS]
    assert [wide.var[i] for i in model] == [4.0] * len(model) and wide.var[SIGNALS.index("deviation")] == 1.0
    assert wide.count == 300 and plain.count == 100 and plain.var == (1.0,) * len(SIGNALS)


def test_skew_scale_judges_the_long_side_of_a_skewed_window_by_its_own_spread(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    rng = np.random.default_rng(3)
    counts = rng.poisson(20 * np.exp(rng.normal(0, 0.5, 900))).astype(np.float64)[:, None]  # bursts above the median
    stream = Stream("bursty", "synthetic", ["c0"], counts, [])
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    plain, skewed = _levels(stream, tape, "window-gap:gap=0"), _levels(stream, tape, "skew-scale:floor=0.5")
    seen = np.isfinite(plain)
    # the bursts' levels shrink (the upper half spreads wider than the window's IQR says)
    assert np.percentile(skewed[seen], 99) < 0.9 * np.percentile(plain[seen], 99)
    # a reading below the median is judged by the narrower lower half: its level grows
    above = np.flatnonzero(seen & (skewed < plain))
    below = np.flatnonzero(seen & (skewed > plain))
    assert len(above) and len(below)
    assert np.median(counts[below, 0]) < np.median(counts[above, 0])


def test_constant_none_gives_no_level_after_a_window_without_spread_and_the_plain_one_elsewhere(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    values = np.concatenate([np.zeros(60), np.random.default_rng(2).normal(5, 1, 240)])[:, None]  # a frozen opening
    stream = Stream("opening", "synthetic", ["c0"], values, [])
    tape = prototypes.dr.capture(engine, stream, tmp_path)[0]
    plain, none = _levels(stream, tape, "window-gap:gap=0"), _levels(stream, tape, "constant-none")
    assert plain[60] > 1000  # the floor of a window of zeros makes the first real reading thousands of scales out
    assert np.isnan(none[60])
    later = np.isfinite(plain) & (np.arange(len(values)) > 60)
    assert later.any() and np.array_equal(none[later], plain[later])


def test_early_horizon_caps_only_the_model_signals_and_only_while_the_lane_is_young():
    stats = SignalStats(len(SIGNALS), horizon=2000, n_streams=1)
    idx, x, learn = np.array([0]), np.zeros((1, len(SIGNALS))), np.array([True])
    with prototypes.parse("early-horizon:early=50;age=120").patches():
        for _ in range(100):
            stats.learn(idx, x, learn)
        young = stats.count_[0].copy()
        for _ in range(100):
            stats.learn(idx, x, learn)
    model = [SIGNALS.index(name) for name in MODEL_SIGNALS]
    assert (young[model] == 50).all() and young[SIGNALS.index("deviation")] == 100
    # from the lane's 120th reading on, the count grows again from the cap by one per reading: 50 + 80
    assert (stats.count_[0][model] == 50 + 80).all() and stats.count_[0][SIGNALS.index("deviation")] == 200
    stats.learn(idx, x, learn)  # unpatched again: the committed learning
    assert (stats.count_[0][model] == 131).all()


def test_segment_novelty_feeds_the_mean_of_each_lanes_last_representations_and_forgets_them_at_a_reset():
    z = [np.full((2, 3), float(k)) for k in range(4)]  # two lanes; step k's representations are all k

    def step(k: int, distance: np.ndarray) -> tuple:
        return ("step", np.array([0, 1]), np.array([0, 1]), np.array([0, 1]), distance, z[k], None, None)

    tape = [step(0, np.array([1.0, 1.0])), step(1, np.array([1.0, np.nan])), ("reset", np.array([0]), np.array([0])),
            step(2, np.array([1.0, 1.0])), step(3, np.array([1.0, 1.0]))]  # fmt: skip
    out = [c[5][:, 0] for c in prototypes.parse("segment-novelty:k=2").rewrite(_stream(), tape) if c[0] == "step"]
    # lane 0: 0, mean(0, 1), then 2 alone after its reset, mean(2, 3); lane 1 skips its unscorable step 1
    np.testing.assert_allclose(np.stack(out), [[0, 0], [0.5, 1], [2, 1], [2.5, 2.5]])


def test_phase_novelty_reads_a_moment_at_the_wrong_phase_as_novel_and_marks_only_a_periodic_lanes_steps():
    t = np.arange(900)
    phase = 2 * np.pi * t / 60
    values = np.sin(phase)[:, None]
    values[600:610, 0] = np.sin(phase[630:640])  # half a cycle early: values the stream holds, at the wrong moment
    z = np.stack([np.cos(phase), np.sin(phase)], axis=1)  # a stand-in representation that knows the phase
    z[600:610] = z[630:640]
    novel = prototypes._phase_novelty(z, 60, 3)
    assert np.isnan(novel[:60]).all() and novel[60:600].max() < 1e-6
    assert novel[600] > 1.9  # the opposite phase of the cycle, although the nearest moment of any phase is 0 away
    tape = [call for row in range(900) for call in (
        ("row", row), ("step", np.zeros(1, dtype=int), np.zeros(1, dtype=int), np.zeros(1, dtype=int), np.ones(1),
                       np.concatenate([z[row], [0, 0]])[None].astype(np.float32), None, None))]  # fmt: skip
    stream = Stream("cycle", "synthetic", ["c0"], values, [(600, 609)])
    prototype = prototypes.parse("phase-novelty")
    steps = [c for c in prototype.rewrite(stream, tape) if c[0] == "step"]
    assert all(c[5][0, 1] == prototypes.PHASE_MARK for c in steps)
    np.testing.assert_allclose([c[5][0, 0] for c in steps][60:], novel[60:], atol=1e-5)
    noise = Stream("noise", "synthetic", ["c0"], np.random.default_rng(1).normal(size=(900, 1)), [])
    assert prototype.rewrite(noise, tape) is tape  # no period: the committed novelty
    memory = prototypes.detector_module.RepresentationMemory(4, n_streams=1)
    marked, plain = steps[600][5], tape[2 * 600 + 1][5]
    with prototype.patches():
        assert memory.novelty(np.zeros(1, dtype=int), marked)[0] == pytest.approx(novel[600], abs=1e-5)
        assert np.isnan(memory.novelty(np.zeros(1, dtype=int), plain)[0])  # unmarked: the memory's (empty yet)
    assert np.isnan(memory.novelty(np.zeros(1, dtype=int), marked)[0])  # unpatched: the memory's again


def test_discord_feeds_each_lane_its_last_readings_shape_in_place_of_the_representation():
    t = np.arange(300)
    stream = Stream("sine", "synthetic", ["c0"], (5 + 2 * np.sin(2 * np.pi * t / 60))[:, None], [])

    def at(row: int) -> list:
        return [("row", row), ("step", np.array([0]), np.array([0]), np.array([0]), np.array([1.0]), np.ones((1, 8)),
                             np.zeros((1, 2, 1)), None)]  # fmt: skip

    tape = at(200) + at(260) + at(230)
    for spec in ("discord:m=6;znorm=1", "discord:m=6;znorm=0"):
        z = [c[5][0] for c in prototypes.parse(spec).rewrite(stream, tape) if c[0] == "step"]
        assert np.all(z[0][6:] == 0)  # m readings of the model's 8 dimensions; the rest 0
        np.testing.assert_allclose(z[0], z[1], atol=1e-9)  # a period later: the same shape
        np.testing.assert_allclose(z[2], -z[0], atol=1e-9)  # half a period later: the shape upside down
        assert np.abs(z[0]).max() > 0.05
        np.testing.assert_allclose(z[0][:6].mean(), 0, atol=1e-12)  # less its mean


def test_learn_cap_caps_only_deviation_and_only_while_patched():
    stats = SignalStats(len(SIGNALS), horizon=100, n_streams=1)
    idx, learn = np.array([0]), np.array([True])
    x = np.full((1, len(SIGNALS)), 1000.0)
    with prototypes.parse("learn-cap:cap=10").patches():
        stats.learn(idx, x, learn)
    column = SIGNALS.index("deviation")
    assert stats.mean_[0, column] == 10.0
    assert all(stats.mean_[0, k] == 1000.0 for k in range(len(SIGNALS)) if k != column)
    stats.learn(idx, x, learn)  # unpatched again: the whole value is learned
    assert stats.mean_[0, column] == 505.0


def test_winsor_learns_an_outlier_at_clip_deviations_keeps_it_whole_in_the_short_ring_and_only_while_patched():
    stats = SignalStats(len(SIGNALS), horizon=100, short=5, n_streams=1)
    idx, learn = np.array([0]), np.array([True])
    for v in (-1.0, 1.0) * 50:  # every signal: mean 0, standard deviation about 1
        stats.learn(idx, np.full((1, len(SIGNALS)), v), learn)
    std = np.sqrt(stats.var_[0].copy())
    before = stats.mean_[0].copy()
    with prototypes.parse("winsor:clip=3").patches():
        stats.learn(idx, np.full((1, len(SIGNALS)), 50.0), learn)
    # learned as if the value were 3 standard deviations out (the count is capped at the horizon: weight 1/100)
    np.testing.assert_allclose(stats.mean_[0], before + 3 * std / 100)
    assert (stats.recent_[0, :, (stats.pos_[0] - 1) % 5] == 50.0).all()  # the short-term mean sees the reading
    patched = stats.mean_[0].copy()
    stats.learn(idx, np.full((1, len(SIGNALS)), 50.0), learn)  # unpatched again: the whole value is learned
    np.testing.assert_allclose(stats.mean_[0], patched + (50.0 - patched) / 100)


def test_adaptive_tail_judges_a_heavy_tailed_lane_under_a_heavier_tail_and_only_while_patched():
    rng = np.random.default_rng(0)
    stats_of = lambda: SignalStats(2, horizon=2000, tail_dof=8, n_streams=1)  # noqa: E731
    idx, learn = np.array([0]), np.array([True])
    with prototypes.parse("adaptive-tail:cut=2.5").patches():
        stats = stats_of()
        for _ in range(3000):  # column 0 Gaussian, column 1 Student t with 3 degrees of freedom
            stats.learn(idx, np.array([[rng.standard_normal(), rng.standard_t(3)]]), learn)
        z = 4.0 * np.sqrt(stats.var_[0])
        adaptive = stats.surprise(idx, (stats.mean_[0] + z)[None, :])[0]
    committed = stats.surprise(idx, (stats.mean_[0] + z)[None, :])[0]  # the same state, judged under t(8) again
    assert adaptive[0] > committed[0]  # the Gaussian lane is judged under a lighter tail: more surprise at 4 sd
    assert adaptive[1] < adaptive[0]  # the heavy-tailed lane under a heavier one than the Gaussian lane
    assert "exceed_" not in stats_of().fields


def test_signal_tail_judges_each_signal_under_its_own_tail_and_only_while_patched():
    stats = SignalStats(len(SIGNALS), horizon=100, tail_dof=8, n_streams=1)
    idx, learn = np.array([0]), np.array([True])
    for v in (-1.0, 1.0) * 50:  # every signal: mean 0, standard deviation about 1
        stats.learn(idx, np.full((1, len(SIGNALS)), v), learn)
    x = np.full((1, len(SIGNALS)), 5.0)
    committed = stats.surprise(idx, x)[0]
    with prototypes.parse("signal-tail:dofs=8/0/4").patches():
        patched = stats.surprise(idx, x)[0]
    assert patched[0] == committed[0]  # distance: t(8) both ways
    assert patched[1] > committed[1]  # novelty under the Gaussian: more surprise at 5 standard deviations
    assert patched[2] < committed[2]  # deviation under t(4): less
    assert np.array_equal(stats.surprise(idx, x)[0], committed)  # unpatched again
    with pytest.raises(ValueError, match="signal-tail"):
        prototypes.parse("signal-tail:dofs=8/8")


def test_signal_weight_scales_each_signals_surprise_before_the_combination_and_only_while_patched():
    detector = prototypes.detector_module.Detector(DetectorConfig(), dims=4)
    detector.add(1, 1)
    lanes = np.array([0])
    surprise = np.array([[2.0, 1.0, 3.0]])  # distance, novelty, deviation
    committed = detector.combine(lanes, surprise)
    with prototypes.parse("signal-weight:weights=1/1/1").patches():
        assert np.array_equal(detector.combine(lanes, surprise), committed)
    with prototypes.parse("signal-weight:weights=0.5/1/1").patches():
        halved = detector.combine(lanes, surprise)
    with prototypes.parse("signal-weight:weights=1/1/0.5").patches():
        quieter = detector.combine(lanes, surprise)
    assert halved[0] < committed[0] and quieter[0] < halved[0]  # the louder signal halved loses more
    assert np.array_equal(detector.combine(lanes, surprise), committed)  # unpatched again
    for bad in ("signal-weight:weights=1/1", "signal-weight:weights=1/-1/1"):
        with pytest.raises(ValueError, match="signal-weight"):
            prototypes.parse(bad)


def test_relative_distance_divides_distance_by_the_representations_size_and_scales_it_only_for_novelty():
    z = np.array([[2.0, -2.0], [0.0, 0.0]], dtype=np.float32)  # mean sizes 2 and 0 (an unscorable lane)
    tape = [("row", 0), ("step", np.array([0, 1]), np.array([0, 1]), np.array([0, 1]), np.array([4.0, np.nan]), z,
                         None, None)]  # fmt: skip
    plain = prototypes.parse("relative-distance").rewrite(_stream(), tape)[1]
    np.testing.assert_allclose(plain[4], [2.0, np.nan])
    assert plain[5] is z  # the representation as captured
    both = prototypes.parse("relative-distance:novelty=1").rewrite(_stream(), tape)[1]
    np.testing.assert_allclose(both[5], [[1.0, -1.0], [0.0, 0.0]])  # a zero representation stays finite
    only_novelty = prototypes.parse("relative-distance:distance=0;novelty=1").rewrite(_stream(), tape)[1]
    assert only_novelty[4] is tape[1][4]


def gate_after(readings: int) -> AlertGate:
    """A one-stream gate that has aged ``readings`` quiet readings without alerting."""
    gate = AlertGate(threshold=4.0, min_count=1, refractory=0, protect=10, n_streams=1)
    for _ in range(readings):
        gate.decide(np.array([0]), np.array([1.0]))
    return gate


def test_young_gate_holds_back_a_young_streams_marginal_alert_not_an_old_streams_and_only_while_patched():
    idx, marginal = np.array([0]), np.array([4.5])
    with prototypes.parse("young-gate:margin=1;age=1500").patches():
        assert not gate_after(1).decide(idx, marginal)[0][0]  # young: read as about 3.5, under the threshold
        assert gate_after(10_000).decide(idx, marginal)[0][0]  # old: the margin has faded (e^-6.7)
    assert gate_after(1).decide(idx, marginal)[0][0]  # unpatched again: the young stream alerts


def test_calibrated_holds_back_a_stream_whose_scores_overshoot_not_a_calibrated_one_and_only_while_patched():
    idx, marginal = np.array([0]), np.array([4.5])

    def gate_scoring(score: float) -> AlertGate:
        gate = AlertGate(threshold=4.0, min_count=1, refractory=0, protect=10, n_streams=1)
        for k in range(3000):  # one reading in 10 scores 2.5 (nominal: one in 100 at 2 or more) or none does
            gate.decide(idx, np.array([score if k % 10 == 0 else 1.0]))
        return gate

    with prototypes.parse("calibrated:level=2;horizon=2000;prior=200;most=2").patches():
        assert not gate_scoring(2.5).decide(idx, marginal)[0][0]  # about 10 times nominal: read as about 3.5
        assert gate_scoring(1.0).decide(idx, marginal)[0][0]  # no overshoot: judged as committed
    assert gate_scoring(2.5).decide(idx, marginal)[0][0]  # unpatched again: the overshooting stream alerts
    with prototypes.parse("calibrated:most=0;least=1").patches():  # a stream that falls short reads higher
        assert gate_scoring(1.0).decide(idx, np.array([3.5]))[0][0]  # about a sixteenth of nominal: read as 4.5
        assert not gate_scoring(2.5).decide(idx, marginal - 1.0)[0][0]  # overshooting: not lowered (most 0)
    assert not gate_scoring(1.0).decide(idx, np.array([3.5]))[0][0]


def test_late_bar_holds_back_an_old_streams_marginal_alert_not_a_young_streams_and_only_while_patched():
    idx, marginal = np.array([0]), np.array([4.5])
    with prototypes.parse("late-bar:start=5000;rise=1;span=10000").patches():
        assert gate_after(4000).decide(idx, marginal)[0][0]  # younger than start: judged as committed
        assert not gate_after(12_000).decide(idx, marginal)[0][0]  # 7,000 past start: read as 3.8, under the bar
    assert gate_after(12_000).decide(idx, marginal)[0][0]  # unpatched again: the old stream alerts


def test_peak_fade_lets_a_very_loud_runs_peaks_fall_fast_and_with_floor_leaves_ordinary_peaks_as_committed():
    def peaks_after(readings: int, loud: float) -> np.ndarray:
        gate = AlertGate(threshold=4.0, min_count=1, refractory=0, protect=10, peaks=3, peak_decay=0.005, n_streams=1)
        for t in range(3 * 50 + readings):  # three loud runs of one reading, then quiet readings
            gate.decide(np.array([0]), np.array([loud if t < 150 and t % 50 == 0 else 1.0]))
        return gate.peaks_[0]

    committed_loud, committed_ordinary = peaks_after(2000, 80.0), peaks_after(2000, 9.0)
    with prototypes.parse("peak-fade:tau=1000;floor=1").patches():
        assert peaks_after(2000, 80.0).max() < 15 < committed_loud.min()  # 76 above the bar, e^-2 of it left
        np.testing.assert_allclose(peaks_after(2000, 9.0), committed_ordinary)  # 5 above: the linear decay is faster
    with prototypes.parse("peak-fade:tau=1000").patches():
        assert peaks_after(2000, 9.0).min() > committed_ordinary.max()  # without the floor a low peak falls slower
    np.testing.assert_allclose(peaks_after(2000, 80.0), committed_loud)  # unpatched again


def test_run_rate_quiets_spikes_recurring_every_few_hundred_readings_not_a_louder_one_and_only_while_patched():
    def alerts() -> list[int]:
        gate = AlertGate(threshold=4.0, min_count=10, protect=200, refractory=200, peaks=3, peak_decay=0.005,
                         n_streams=1)  # fmt: skip
        out = []
        for t in range(4000):  # a normal spike of surprise 15 every 300 readings, and one of 25 at 3,250
            score = 25.0 if t == 3250 else 15.0 if t % 300 == 0 and t else 1.0
            if gate.decide(np.array([0]), np.array([score]))[0][0]:
                out.append(t)
        return out

    committed = alerts()
    with prototypes.parse("run-rate:k=2;span=1500").patches():
        patched = alerts()
    assert len(committed) == 13 and 3250 in committed  # every spike beats the decayed peaks of the ones before it
    assert patched == [300, 600, 3250]  # two runs of 15 within 1,500 steps make 15 the stream's normal
    assert alerts() == committed  # unpatched again


def test_persist_lets_a_sustained_run_after_a_spikes_alert_alert_not_the_alerted_event_going_on():
    def alerts(scores: np.ndarray) -> list[int]:
        gate = AlertGate(threshold=4.0, min_count=10, refractory=200, protect=200, escalate=2.0, n_streams=1)
        return [t for t, s in enumerate(scores) if gate.decide(np.array([0]), np.array([s]))[0][0]]

    spike_then_shift = np.ones(2000)
    spike_then_shift[1000], spike_then_shift[1100:1150] = 10.0, 8.0  # a shift under twice the spike's score
    shift_that_dips = np.ones(2000)
    shift_that_dips[1000:1040], shift_that_dips[1042:1100] = 8.0, 8.0  # one long event, briefly below the bar
    committed = alerts(spike_then_shift)
    with prototypes.parse("persist:n=10").patches():
        assert alerts(spike_then_shift) == [1000, 1109]  # the shift's tenth reading in a row alerts after all
        assert alerts(shift_that_dips) == [1000]  # the last alerted run was long: the event going on stays held
    assert committed == [1000] and alerts(spike_then_shift) == committed  # unpatched: the refractory period holds


def test_growing_horizon_lets_an_old_lanes_statistics_remember_longer_only_while_patched():
    def counts_after(readings: int) -> int:
        stats = SignalStats(k=1, horizon=100, short=1, n_streams=1)
        for v in np.random.default_rng(0).normal(size=readings):
            stats.learn(np.array([0]), np.array([[v]]), np.array([True]))
        return int(stats.count_[0, 0])

    with prototypes.parse("growing-horizon:share=0.25;most=400").patches():
        assert counts_after(300) == 100  # a quarter of 300 is under the committed horizon: it holds
        assert counts_after(1000) == 249 and counts_after(3000) == 400  # a quarter of the readings, up to most
    assert counts_after(3000) == 100  # unpatched again


def test_slow_floor_keeps_a_quiet_stretch_from_narrowing_the_spread_below_the_slow_one_only_while_patched():
    def scale_after() -> float:
        stats = SignalStats(k=1, horizon=50, short=1, n_streams=1)
        rng = np.random.default_rng(1)
        for v in np.r_[rng.normal(0, 3, 400), rng.normal(0, 0.1, 400)]:  # a lively stretch, then a quiet one
            stats.learn(np.array([0]), np.array([[v]]), np.array([True]))
        return float(stats._scale(np.array([0]))[0, 0])

    committed = scale_after()
    with prototypes.parse("slow-floor:share=0.5;slow=4000").patches():
        floored = scale_after()
    assert committed < 0.2 and floored > 1.2  # the slow spread (about 2) floors it at sqrt(0.5) of itself
    assert scale_after() == committed  # unpatched again


def test_step_full_counts_a_step_far_beyond_its_bar_in_full_and_leaves_the_rest_to_the_root():
    from trep_edge.runtime.core import detector as detector_module

    parts = np.array([[[0.5, 0.5], [7.5, 2.5]]])  # [n, 2, C]: the level and the step of two channels
    bar = np.array([[3.0, 1.5]])
    committed = detector_module.fold_step(parts, bar)
    with prototypes.parse("step-full:m=2").patches():
        patched = detector_module.fold_step(parts, bar)
    # Channel 0: step 7.5 is 2.5 bars (the root read sqrt(0.5 * 7.5) = 1.9); channel 1: step 2.5 is under 2 bars.
    assert committed[0, 0] == pytest.approx(np.sqrt(0.5 * 7.5)) and patched[0, 0] == 7.5
    assert patched[0, 1] == committed[0, 1] == pytest.approx(np.sqrt(0.5 * 2.5))


def test_growing_refractory_holds_an_old_streams_second_alert_longer_not_a_young_streams_and_only_while_patched():
    def alerts(first: int) -> list[int]:
        gate = AlertGate(threshold=4.0, min_count=10, refractory=200, protect=200, n_streams=1)
        scores = np.ones(first + 400)
        scores[first], scores[first + 250] = 10.0, 10.0  # two events 250 readings apart, alike in size
        return [t for t, s in enumerate(scores) if gate.decide(np.array([0]), np.array([s]))[0][0]]

    with prototypes.parse("growing-refractory:share=0.1;most=2000").patches():
        assert alerts(500) == [500, 750]  # young: 10 % of its life is under the committed 200
        assert alerts(3000) == [3000]  # old: the period is 301 readings, the second event falls inside it
    assert alerts(3000) == [3000, 3250]  # unpatched again


def test_spent_peaks_keep_an_over_budget_streams_peaks_longer_not_a_streams_within_budget():
    def peaks_after(alerts: int) -> float:
        gate = AlertGate(threshold=4.0, min_count=1, refractory=0, protect=10, peaks=1, peak_decay=0.005,
                         budget=2, budget_span=40_000, budget_cost=1.0, n_streams=1)  # fmt: skip
        for t in range(alerts * 50 + 1000):  # ``alerts`` runs of surprise 30, 50 readings apart, then quiet
            gate.decide(np.array([0]), np.array([30.0 if t < alerts * 50 and t % 50 == 0 else 1.0]))
        return float(gate.peaks_[0].max())

    committed_over, committed_within = peaks_after(4), peaks_after(2)
    with prototypes.parse("spent-peaks:decay=0.001").patches():
        assert peaks_after(4) > committed_over + 3  # over budget: 1,000 readings cost 1 instead of 5
        assert peaks_after(2) == pytest.approx(committed_within)  # within budget: as committed
    assert peaks_after(4) == pytest.approx(committed_over)  # unpatched again


def test_lone_model_caps_a_lane_whose_deviation_is_ordinary_not_one_whose_deviation_agrees_and_only_while_patched():
    detector = prototypes.detector_module.Detector(DetectorConfig(), dims=4)
    detector.add(1, 2)
    lanes = np.array([0, 1])
    k = SIGNALS.index("deviation")
    surprise = np.full((2, len(SIGNALS)), 6.0)  # both lanes: every model signal far out
    surprise[0, k], surprise[1, k] = 0.5, 3.0  # lane 0's reading ordinary in its window; lane 1's out too
    committed = detector.combine(lanes, surprise)
    assert (committed >= 4.0).all()
    with prototypes.parse("lone-model:floor=2;cap=3.9").patches():
        capped = detector.combine(lanes, surprise)
    assert capped[0] == pytest.approx(3.9) and capped[1] == committed[1]
    assert np.array_equal(detector.combine(lanes, surprise), committed)  # unpatched again


def test_full_novelty_gives_no_novelty_until_a_lane_has_remembered_enough_readings_and_only_while_patched():
    memory = prototypes.detector_module.RepresentationMemory(dims=2, memory=8, stride=1, exclusion=1, n_streams=2)
    lanes = np.array([0, 1])
    for t in range(5):
        memory.remember(np.array([0]), np.array([[float(t), 0.0]], dtype=np.float32))
    memory.remember(np.array([1]), np.array([[0.0, 0.0]], dtype=np.float32))
    memory.remember(np.array([1]), np.array([[1.0, 0.0]], dtype=np.float32))
    z = np.array([[9.0, 0.0], [9.0, 0.0]], dtype=np.float32)
    committed = memory.novelty(lanes, z)
    assert np.isfinite(committed).all()  # both lanes have an eligible memory
    with prototypes.parse("full-novelty:after=4").patches():
        young = memory.novelty(lanes, z)
    assert young[0] == committed[0] and np.isnan(young[1])  # lane 1 has remembered 2 readings, under 4
    np.testing.assert_array_equal(memory.novelty(lanes, z), committed)  # unpatched again


def test_cycle_profile_lowers_a_signal_where_its_cycle_habitually_raises_it_not_elsewhere_and_only_while_patched():
    period, lane = 10, np.array([0])

    def surprises() -> tuple[float, float]:
        """``novelty``'s surprise of a value of 2 at moment 3 of the cycle (where 40 cycles held 2) and at moment 6
        (where they held 0), on a lane scheduled on a cycle of 10 readings."""
        rng = np.random.default_rng(3)
        stats = SignalStats(k=3, horizon=500, short=1, tail_dof=8, n_streams=1)

        def at(t: int) -> None:  # what the patched Detector._seasonal_levels stashes for the step
            stats.__dict__["cycle_"] = (np.array([period]), np.array([t]), [1], 64)

        for t in range(40 * period):
            at(t)
            x = np.array([[0.0, (2.0 if t % period == 3 else 0.0) + rng.normal(0, 0.1), 0.0]])
            stats.surprise(lane, x)
            stats.learn(lane, x, np.array([True]))
        out = []
        for t in (40 * period + 3, 40 * period + 6):
            at(t)
            out.append(float(stats.surprise(lane, np.array([[0.0, 2.0, 0.0]]))[0, 1]))
        return out[0], out[1]

    committed = surprises()
    with prototypes.parse("cycle-profile").patches():
        habitual, elsewhere = surprises()
    assert committed[0] == committed[1] > 1.0  # the committed statistics read 2 alike at every moment
    # The profile makes moment 3's 2 ordinary (2.0 → 0.8), and moment 6's stands out more (2.0 → 5.1).
    assert habitual < 1.0 < committed[0] < 4.0 < elsewhere
    assert surprises() == committed  # unpatched again
