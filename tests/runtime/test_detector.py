"""The streaming detector: surprise, novelty memory, signal statistics, alert gate, lanes, and its state."""
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from trep_edge.datasets.ett import load_csv
from trep_edge.datasets.paths import data_root
from trep_edge.runtime.core.detector import (
    AlertGate,
    Detector,
    REDUNDANCY_MIN_VALUES,
    SCHEDULE_MEMORY,
    DetectorConfig,
    RangeRecord,
    RepresentationMemory,
    SignalStats,
    StepRecord,
    TAIL_MIN_VALUES,
    StuckRecord,
    combine_surprise,
    count_channels,
    fold_step,
    log_upper_gamma,
    on_schedule,
    student_upper_tail_surprise,
    upper_tail_surprise,
    window_deviation,
    window_repeats,
)
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.reading import Reading
from round_trips import json_round_trip, npz_round_trip

T0 = 1_700_000_000
ETT_CHANNELS = ["HUFL", "MUFL", "OT"]


def rows(*values):
    return np.asarray(values, dtype=np.int64)


# upper_tail_surprise


def test_surprise_of_known_tail_probabilities():
    got = upper_tail_surprise(np.array([0.0, 3.0, -3.0]))
    np.testing.assert_allclose(got, [math.log10(2), -math.log10(0.0013499), -math.log10(1 - 0.0013499)], rtol=1e-4)


def test_surprise_of_large_z_is_finite_monotone_and_continuous_at_the_asymptotic_switch():
    z = np.array([5.0, 7.9, 8.0, 8.0001, 9.0, 20.0, 40.0, 1e3])
    got = upper_tail_surprise(z)
    assert np.isfinite(got).all() and (np.diff(got) > 0).all()
    assert got[3] == pytest.approx(got[2], rel=0.015)  # the Mills-ratio branch starts within its stated 1.5 %
    assert got[-3] == pytest.approx(-math.log10(0.5 * math.erfc(20 / math.sqrt(2))), rel=0.01)
    assert np.isnan(upper_tail_surprise(np.array([np.nan]))).all() and upper_tail_surprise(np.inf) == np.inf


# student_upper_tail_surprise


def test_student_tail_of_known_probabilities():
    z = np.array([-3.0, 0.0, 0.5, 2.0, 10.0])
    # Two degrees of freedom have a closed form: P(T > z) = (1 - z / sqrt(2 + z²)) / 2.
    np.testing.assert_allclose(student_upper_tail_surprise(z, 2), -np.log10(0.5 * (1 - z / np.sqrt(2 + z * z))),
                               rtol=1e-12)  # fmt: skip
    # Eight: the two-sided 1 % and 0.1 % points of the t table.
    got = student_upper_tail_surprise(np.array([3.355, 5.041]), 8)
    np.testing.assert_allclose(got, [-math.log10(0.005), -math.log10(0.0005)], atol=2e-3)
    assert student_upper_tail_surprise(np.array([0.0]), 8)[0] == pytest.approx(math.log10(2))


def test_student_tail_far_out_is_finite_monotone_continuous_and_grows_like_dof_log_z():
    dof = 8
    edge = math.sqrt(dof)  # where the tail series takes over from the central sum (x = 1/2)
    z = np.array([-1e300, -5.0, 1.0, edge - 1e-9, edge + 1e-9, 6.0, 1e3, 1e6, 1e200])
    got = student_upper_tail_surprise(z, dof)
    assert np.isfinite(got).all() and (np.diff(got) > 0).all()
    assert got[4] == pytest.approx(got[3], abs=1e-7)
    # P(T > z) ~ C z^-dof: one decade of z adds dof decades of surprise, with no underflow at 1e200.
    assert got[-2] - got[-3] == pytest.approx(dof * 3, abs=1e-3)
    assert got[-1] - got[-2] == pytest.approx(dof * 194, rel=1e-9)
    assert student_upper_tail_surprise(np.array([np.inf]), dof)[0] == np.inf
    assert np.isnan(student_upper_tail_surprise(np.array([np.nan]), dof)).all()
    with pytest.raises(ValueError, match="even"):
        student_upper_tail_surprise(z, 3)
    with pytest.raises(ValueError, match="tail_dof"):
        DetectorConfig(tail_dof=5)


def test_a_stream_scores_the_same_to_the_last_bit_whatever_streams_share_its_tick():
    # The daemon steps every stream of a tick in one call; `trep-edge score` steps one. A BLAS product in the t tail
    # summed a row by its place in the batch, so a stream's scores moved in their last bits with its neighbours.
    rng = np.random.default_rng(7)
    streams, ticks = 257, 120
    distance = rng.lognormal(0.0, 1.0, (ticks, streams))
    z = rng.normal(size=(ticks, streams, 4))
    deviation = np.abs(rng.standard_t(2, size=(ticks, streams, 2, 1)))
    reading = rng.normal(size=(ticks, streams, 1))
    config = DetectorConfig(min_count=10, prior_weight=0)
    together, alone = Detector(config, dims=4), Detector(config, dims=4)
    together.add(streams=streams, lanes=streams)
    alone.add(streams=1, lanes=1)
    every, one = np.arange(streams), rows(0)
    got, want = [], []
    for t in range(ticks):
        got.append(together.step(every, every, every, distance[t], z[t], deviation[t], None, reading[t]).score[0])
        want.append(alone.step(one, one, one, distance[t, :1], z[t, :1], deviation[t, :1], None, reading[t, :1]).score[0])
    assert np.isfinite(want).sum() > 50
    np.testing.assert_array_equal(got, want)


def test_the_chi_square_tail_of_a_value_is_the_same_to_the_last_bit_in_any_batch():
    # Brown's method (signals that overlap) reads the χ² tail by a continued fraction; run on until the slowest
    # value of a batch converged, every other value took more factors of about 1 and changed in its last bits.
    rng = np.random.default_rng(0)
    a, z = rng.uniform(0.5, 4.0, 500), rng.uniform(0.0, 60.0, 500)
    alone = np.concatenate([log_upper_gamma(a[i : i + 1], z[i : i + 1]) for i in range(len(a))])
    np.testing.assert_array_equal(log_upper_gamma(a, z), alone)


def test_student_tail_raises_fewer_alerts_on_a_heavy_tailed_stream_than_the_gaussian_one():
    # The signals are heavy-tailed; a Gaussian tail turns their ordinary outliers into p = 1e-10 events.
    rng = np.random.default_rng(3)
    values = np.abs(rng.standard_t(3, size=4000)) + 0.1
    counts = {}
    for dof in (0, 8):
        config = DetectorConfig(signals=("distance",), tail_dof=dof, threshold=4.0, record_decay=0, peaks=0,
                                refractory=0, prior_weight=0)  # fmt: skip
        detector = Detector(config, dims=2)
        detector.add(streams=1, lanes=1)
        counts[dof] = sum(bool(detector.step(rows(0), rows(0), rows(0), np.array([v]), np.zeros((1, 2))).alert[0])
                          for v in values)  # fmt: skip
    assert counts[8] < counts[0] / 3, counts


# RepresentationMemory


def test_novelty_is_nan_until_an_entry_older_than_the_exclusion_exists():
    memory = RepresentationMemory(dims=2, memory=8, stride=1, exclusion=2, n_streams=1)
    one = rows(0)
    for k in range(2):
        memory.remember(one, np.array([[k, 0.0]]))
        assert np.isnan(memory.novelty(one, np.zeros((1, 2))))[0]  # entries 0 and 1 readings old: excluded
    memory.remember(one, np.array([[2.0, 0.0]]))
    # [0, 0] is now 2 readings old: the only eligible entry. The query [3, 4] is 5 away from it.
    assert memory.novelty(one, np.array([[3.0, 4.0]]))[0] == 5.0


def test_novelty_is_the_nearest_eligible_distance_and_ignores_the_newest_entries():
    memory = RepresentationMemory(dims=2, memory=8, stride=1, exclusion=2, n_streams=2)
    for z in ([0.0, 0.0], [6.0, 8.0], [1.0, 1.0], [2.0, 2.0]):
        memory.remember(rows(0), np.array([z]))
    memory.remember(rows(1), np.array([[100.0, 100.0]]))
    # Lane 0: [1, 1] and [2, 2] are within the exclusion; [0, 0] and [6, 8] are eligible.
    query = np.array([[2.0, 2.0], [6.0, 8.0]])
    np.testing.assert_allclose(memory.novelty(rows(0, 0), query), [math.sqrt(8), 0.0])
    assert np.isnan(memory.novelty(rows(1), query[:1]))[0]  # lanes are separate: lane 1 has 1 entry, excluded


def test_memory_writes_every_stride_th_representation_and_forgets_the_oldest():
    memory = RepresentationMemory(dims=1, memory=3, stride=2, exclusion=0, n_streams=1)
    for k in range(10):  # written: readings 0, 2, 4, 6, 8; kept: the last 3 (4, 6, 8)
        memory.remember(rows(0), np.array([[float(k)]]))
    assert memory.written_[0] == 5 and sorted(memory.ring_[0, :, 0].tolist()) == [4.0, 6.0, 8.0]
    assert memory.novelty(rows(0), np.array([[0.0]]))[0] == 4.0


def test_a_representation_beyond_float16_is_remembered_finite_and_keeps_novelty_comparable():
    # A model fed far outside its training range (a near-flat training slice, then real moves) emits huge values.
    memory = RepresentationMemory(dims=1, memory=4, stride=1, exclusion=0, n_streams=1)
    memory.remember(rows(0), np.array([[1e9]]))
    assert np.isfinite(memory.ring_[0, 0, 0]) and memory.ring_[0, 0, 0] == np.finfo(np.float16).max
    assert np.isfinite(memory.novelty(rows(0), np.array([[0.0]]))[0])


# SignalStats


def test_statistics_are_numpys_mean_and_variance_for_horizon_values_then_exponential():
    x = np.array([1.0, 4.0, -2.0, 0.5, 3.0, 10.0, -5.0])
    stats = SignalStats(k=1, horizon=5, short=1, n_streams=1)
    for i, v in enumerate(x):
        stats.learn(rows(0), np.array([[v]]), np.array([True]))
        if i < 5:
            assert stats.mean_[0, 0] == pytest.approx(x[: i + 1].mean()) and stats.count_[0, 0] == i + 1
            assert stats.var_[0, 0] == pytest.approx(x[: i + 1].var())
    mean, var = x[:5].mean(), x[:5].var()
    for v in x[5:]:  # weight 1/horizon from the 6th value on
        delta = v - mean
        mean, var = mean + delta / 5, (1 - 1 / 5) * (var + delta**2 / 5)
    assert (stats.count_[0, 0], stats.mean_[0, 0], stats.var_[0, 0]) == (5, pytest.approx(mean), pytest.approx(var))


def test_nan_and_protected_values_are_not_learned_but_the_short_ring_advances():
    stats = SignalStats(k=2, horizon=100, short=3, n_streams=1)
    stats.learn(rows(0), np.array([[1.0, np.nan]]), np.array([True]))
    stats.learn(rows(0), np.array([[9.0, 9.0]]), np.array([False]))
    assert stats.count_[0].tolist() == [1, 0] and stats.mean_[0, 0] == 1.0
    assert stats.pos_[0] == 2 and 9.0 in stats.recent_[0, 0]


def test_surprise_is_the_gaussian_tail_of_the_value_or_of_the_short_mean_whichever_is_larger():
    stats = SignalStats(k=1, horizon=100, short=2, n_streams=1)
    assert np.isnan(stats.surprise(rows(0), np.array([[1.0]])))[0, 0]  # no history
    for v in (0.0, 2.0, 0.0, 2.0):  # mean 1, std 1; the short ring ends with [0, 2]
        stats.learn(rows(0), np.array([[v]]), np.array([True]))
    expected = upper_tail_surprise(np.array([3.0 - 1.0]))[0]
    assert stats.surprise(rows(0), np.array([[3.0]]))[0, 0] == pytest.approx(expected)
    # A low reading after a high one: the short mean (2 + -1) / 2 = 0.5 is less low than the value -1.
    expected = upper_tail_surprise(np.array([0.5 - 1.0]))[0]
    assert stats.surprise(rows(0), np.array([[-1.0]]))[0, 0] == pytest.approx(expected)


# AlertGate


def test_gate_warms_up_on_scored_readings_only_and_never_alerts_while_warming():
    gate = AlertGate(threshold=1.0, min_count=3, refractory=0, protect=10, n_streams=1)
    decisions = [gate.decide(rows(0), np.array([s])) for s in (np.nan, 50.0, 50.0, 0.0, 50.0)]
    assert [bool(w[0]) for _, w, _, _ in decisions] == [True, True, True, False, False]
    assert [bool(a[0]) for a, _, _, _ in decisions] == [False, False, False, False, True]
    assert [bool(learn[0]) for _, _, learn, _ in decisions[:4]] == [True] * 4  # warm-up readings are all learned


def test_refractory_period_suppresses_alerts_after_one():
    gate = AlertGate(threshold=1.0, min_count=1, refractory=2, protect=10, n_streams=1)
    scores = [5.0, 0.0, 5.0, 0.0, 5.0]  # alert; 2 readings later still refractory; 4 readings later free again
    alerts = [bool(gate.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert alerts == [True, False, False, False, True]


def test_a_new_run_far_louder_than_the_last_alert_escalates_through_the_refractory_period():
    def gate(escalate: float) -> AlertGate:
        return AlertGate(threshold=1.0, min_count=1, refractory=8, protect=10, escalate=escalate, n_streams=1)

    # 3 alerts; its own run growing to 7 is the same event; a new run at 5, below twice 3, is held back; a new run at
    # 7 reaches it and alerts inside the refractory period; the next must then reach twice 7 (13 does not, 15 does).
    scores = [3.0, 7.0, 0.0, 5.0, 0.0, 7.0, 0.0, 13.0, 0.0, 15.0]
    plain, escalating = gate(0.0), gate(2.0)
    assert [i for i, s in enumerate(scores) if plain.decide(rows(0), np.array([s]))[0][0]] == [0, 9]
    whole = [bool(escalating.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert [i for i, a in enumerate(whole) if a] == [0, 5, 9]
    first = gate(2.0)
    got = [bool(first.decide(rows(0), np.array([s]))[0][0]) for s in scores[:6]]
    restored = AlertGate.from_state(first.state_dict())
    got += [bool(restored.decide(rows(0), np.array([s]))[0][0]) for s in scores[6:]]
    assert got == whole
    old = {k: v for k, v in first.state_dict().items() if k != "last_"}  # a checkpoint from before escalation
    assert AlertGate.from_state(old).last_.tolist() == [np.inf]  # nothing escalates until its next alert


def test_protected_readings_are_not_learned_for_at_most_protect_in_a_row():
    gate = AlertGate(threshold=1.0, min_count=1, refractory=0, protect=2, n_streams=1)
    learn = [bool(gate.decide(rows(0), np.array([s]))[2][0]) for s in (5.0, 5.0, 5.0, 5.0, 0.0, 5.0)]
    assert learn == [False, False, True, True, True, False]  # a lasting change becomes the baseline


def test_debounce_alerts_once_per_run_of_hot_readings_on_its_debounce_th():
    gate = AlertGate(threshold=1.0, min_count=1, refractory=0, protect=10, debounce=2, n_streams=1)
    scores = [5.0, 0.0, 5.0, 5.0, 5.0, 0.0, 5.0, 5.0]
    alerts = [bool(gate.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert alerts == [False, False, False, True, False, False, False, True]


def test_a_debounced_run_is_not_its_own_record_before_it_alerts():
    # The record must not learn the first reading of a run waiting for its second: at 8.2 it would set the bar at 6
    # (the cap) and the run's later readings of 4.5-5.5 would never be hot.
    gate = AlertGate(threshold=4.0, min_count=1, refractory=5, protect=10, debounce=2, record_decay=0.01,
                     record_cap=6.0, n_streams=1)  # fmt: skip
    scores = [1.0, 1.5, 8.2, 5.0, 5.5, 4.5, 1.0]
    alerts = [bool(gate.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert alerts == [False, False, False, True, False, False, False]
    assert gate.record_[0] == pytest.approx(1.5 - 5 * 0.01)  # 1.5, decayed: the run is the event's, not the normal


def test_the_record_of_surprises_outside_alerts_raises_the_bar_and_decays():
    gate = AlertGate(threshold=1.0, min_count=1, refractory=2, protect=10, record_decay=0.5, n_streams=1)
    # 5 alerts; 6 two readings later is held back by the refractory period and becomes the record; 4.4 three
    # readings later is above the threshold but below the decayed record (4.5) and does not alert; 9 does, and is
    # not a record (it alerted); four readings on, the record has decayed to 1.5 and 3 alerts.
    scores = [5.0, 0.0, 6.0, 0.0, 0.0, 4.4, 0.0, 9.0, 0.0, 0.0, 0.0, 3.0]
    alerts = [bool(gate.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert [i for i, a in enumerate(alerts) if a] == [0, 7, 11]


def test_a_held_back_anomaly_enters_the_record_only_up_to_the_cap():
    gate = AlertGate(threshold=1.0, min_count=1, refractory=2, protect=10, record_decay=0.5, record_cap=3.0,
                     n_streams=1)  # fmt: skip
    # 50 in a new run is held back by the refractory period and enters the record as 3; three readings later the
    # record is 1.5 and 2.9 alerts (an uncapped record would still be 48.5).
    scores = [5.0, 0.0, 50.0, 0.0, 0.0, 2.9]
    alerts = [bool(gate.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert alerts == [True, False, False, False, False, True]


def test_the_record_survives_a_save_and_restore_mid_stream():
    scores = [5.0, 0.0, 6.0, 0.0, 0.0, 4.4, 0.0, 9.0, 0.0, 0.0, 0.0, 3.0]
    whole = AlertGate(threshold=1.0, min_count=1, refractory=2, protect=10, record_decay=0.5, n_streams=1)
    expected = [bool(whole.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    first = AlertGate(threshold=1.0, min_count=1, refractory=2, protect=10, record_decay=0.5, n_streams=1)
    got = [bool(first.decide(rows(0), np.array([s]))[0][0]) for s in scores[:4]]
    restored = AlertGate.from_state(first.state_dict())
    got += [bool(restored.decide(rows(0), np.array([s]))[0][0]) for s in scores[4:]]
    assert got == expected and restored.record_decay == 0.5


def test_a_surprise_level_that_peaks_recent_runs_reached_stops_alerting_and_decays():
    gate = AlertGate(threshold=1.0, min_count=1, refractory=0, protect=10, peaks=2, peak_decay=0.5, n_streams=1)
    # Runs of one reading, each followed by a quiet one. 10 and 12 alert (fewer than 2 peaks remembered); 8 does
    # not: the 2nd largest peak, 10, has decayed to 8.5; 9.6 beats the decayed 7.5 and alerts. Then the peaks are
    # 9.6 and 10, falling by 0.5 per reading: 3 is held back while they stand above it (3.1) and alerts one
    # reading later (2.6).
    scores = [10.0, 0.0, 12.0, 0.0, 8.0, 0.0, 9.6] + [0.0] * 13 + [3.0, 3.0]
    alerts = [bool(gate.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    assert [i for i, a in enumerate(alerts) if a] == [0, 2, 6, 21]


def test_an_alert_budget_lets_a_few_alerts_through_and_then_asks_for_more_surprise():
    def gate(cost: float) -> AlertGate:
        return AlertGate(threshold=1.0, min_count=1, refractory=0, protect=10, budget=2.0, budget_span=1000,
                         budget_cost=cost, n_streams=1)  # fmt: skip

    # Runs of one reading at 5, each alerting without a budget. With budget 2 and cost 3 the first three alert at
    # the plain bar (at most 2 recent alerts before each, decayed by e^(-1/1000) per reading); before the fourth
    # 2.99 recent alerts are 0.99 beyond the budget and it needs 1 + 3 × 0.99 ≈ 4 < 5; the fifth needs about
    # 1 + 3 × 1.98 ≈ 6.9 and does not alert; 9 does.
    scores = [5.0, 0.0] * 5 + [9.0]
    alerts = {name: [i for i, s in enumerate(scores) if g.decide(rows(0), np.array([s]))[0][0]]
              for name, g in (("dear", gate(3.0)), ("free", gate(0.0)))}
    assert alerts["free"] == [0, 2, 4, 6, 8, 10]
    assert alerts["dear"] == [0, 2, 4, 6, 10]
    # Held back, a hot reading still does not teach the statistics (the budget decides alerts, not the hot bar).
    held = gate(100.0)
    decisions = [held.decide(rows(0), np.array([s])) for s in scores]
    assert [i for i, (alert, *_) in enumerate(decisions) if alert[0]] == [0, 2, 4]
    assert not any(decisions[i][2][0] for i in (6, 8))


def test_the_alert_budget_survives_a_save_and_restore_and_an_old_state_starts_it_fresh():
    def gate() -> AlertGate:
        return AlertGate(threshold=1.0, min_count=1, refractory=0, protect=10, budget=1.0, budget_span=1000,
                         budget_cost=3.0, n_streams=1)  # fmt: skip

    scores = [5.0, 0.0, 5.0, 0.0, 5.0, 0.0, 5.0]
    whole = gate()
    expected = [bool(whole.decide(rows(0), np.array([s]))[0][0]) for s in scores]
    first = gate()
    got = [bool(first.decide(rows(0), np.array([s]))[0][0]) for s in scores[:4]]
    restored = AlertGate.from_state(first.state_dict())
    got += [bool(restored.decide(rows(0), np.array([s]))[0][0]) for s in scores[4:]]
    assert got == expected and expected != [True, False] * 3 + [True]
    old = {k: v for k, v in first.state_dict().items() if k != "spent_"}  # a checkpoint from before the budget
    assert AlertGate.from_state(old).spent_.tolist() == [0.0]


def test_a_quiet_streams_highest_score_yet_alerts_below_the_threshold():
    def gate(quiet: float = 3.0) -> AlertGate:
        return AlertGate(threshold=4.0, min_count=2, refractory=5, protect=10, quiet=quiet, quiet_margin=0.25,
                         quiet_after=6, quiet_start=3, n_streams=1)  # fmt: skip

    # Scores that never reach the threshold. 3.2 (reading 2) is the first best (readings 0 and 1 come before
    # quiet_start) and comes before quiet_after; 3.4 (7) is within the margin of it; 3.8 (8) beats the best, now 3.4,
    # by more than 0.25 and alerts; 3.9 (10) is within the refractory period but becomes the best.
    low = [1.0, 1.0, 3.2, 1.0, 1.0, 1.0, 1.0, 3.4, 3.8, 1.0, 3.9]
    g = gate()
    decisions = [g.decide(rows(0), np.array([s])) for s in low]
    assert [i for i, (alert, *_) in enumerate(decisions) if alert[0]] == [8]
    assert not decisions[8][2][0]  # the alerting reading is not learned
    assert g.best_.tolist() == [3.9]
    off = gate(0.0)
    assert not any(off.decide(rows(0), np.array([s]))[0][0] for s in low)
    debounced = AlertGate(threshold=4.0, min_count=2, refractory=5, protect=10, debounce=2, quiet=3.0,
                          quiet_margin=0.25, quiet_after=6, quiet_start=3, n_streams=1)  # fmt: skip
    assert not any(debounced.decide(rows(0), np.array([s]))[0][0] for s in low)  # persistence asked for: off
    # A score at the threshold alerts as before, and a quiet alert is not possible below `quiet` however new.
    g = gate(3.9)
    assert [i for i, s in enumerate(low + [4.2]) if g.decide(rows(0), np.array([s]))[0][0]] == [11]

    # Save and restore mid-stream equals an uninterrupted run; a checkpoint from before the quiet path starts it fresh.
    first = gate()
    got = [bool(first.decide(rows(0), np.array([s]))[0][0]) for s in low[:5]]
    restored = AlertGate.from_state(first.state_dict())
    got += [bool(restored.decide(rows(0), np.array([s]))[0][0]) for s in low[5:]]
    assert [i for i, a in enumerate(got) if a] == [8]
    old = {k: v for k, v in first.state_dict().items() if k != "best_"}
    assert AlertGate.from_state(old).best_.tolist() == [-np.inf]


def test_on_schedule_finds_a_progression_of_earlier_alerts_at_one_spacing():
    times = np.array([1000, 712, 424, -1, -1])  # every 288 readings, newest first as the gate keeps them
    assert on_schedule(times, 1288, after=3, tol=0.01)  # 1000, 712 and 424 lead up to it
    assert on_schedule(times, 1290, after=3, tol=0.01)  # 2 readings late: the least slack
    assert not on_schedule(times, 1292, after=3, tol=0.01)  # 4 late: outside max(2, 1 % of 288)
    assert on_schedule(times, 1292, after=3, tol=0.02)  # 2 % of 288 is 5.8
    assert on_schedule(times[:2], 1288, after=2, tol=0.01) and not on_schedule(times[:2], 1288, after=3, tol=0.01)
    # Other alerts between the progression's do not break it; the spacing may be a multiple of the edge's (a
    # recurrence a fault took); a missing step ends it.
    assert on_schedule(np.array([1424, 1300, 848, 272]), 2000, after=3, tol=0.01)
    assert on_schedule(np.array([1288, 1000, 712, 424]), 1864, after=2, tol=0.01)
    assert not on_schedule(np.array([1000, 424]), 1288, after=2, tol=0.01)
    assert not on_schedule(np.array([-1, -1]), 288, after=1, tol=0.01)  # nothing earlier: nothing to continue
    # A reading within the slack of the last alert does not continue a progression of that alert with itself.
    assert not on_schedule(np.array([21, 5]), 23, after=2, tol=0.01)


def test_an_alert_on_schedule_is_kept_back_and_still_counts_as_one_for_the_gate():
    def gate(schedule: int = 2) -> AlertGate:
        return AlertGate(threshold=4.0, min_count=1, refractory=3, protect=10, budget=2.0, budget_span=1000,
                         budget_cost=3.0, schedule=schedule, schedule_tol=0.01, n_streams=1)  # fmt: skip

    # An edge every 10 readings (surprise 6): it alerts twice, then its recurrences are on schedule. A fault at
    # reading 45, off the schedule, still alerts, at the plain bar: kept-back alerts spent none of the budget.
    scores = [0.0] * 60
    for t in range(0, 60, 10):
        scores[t] = 6.0
    scores[45] = 5.0
    g = gate()
    decisions = [g.decide(rows(0), np.array([s])) for s in scores]
    assert [t for t, (alert, *_) in enumerate(decisions) if alert[0]] == [0, 10, 45]
    assert not decisions[20][2][0]  # a kept-back alert's reading is not learned, as an alerting one is not
    # Reading counts of the alerts raised or kept back; the edge at 50 meets the budget the fault spent, so is none.
    assert sorted(g.times_[0][g.times_[0] >= 0].tolist()) == [1, 11, 21, 31, 41, 46]
    assert 2.8 < g.spent_[0] < 3.0  # the three raised alerts (decayed), not the kept-back ones
    # Off, the edges alert until they have spent the budget (bar 4 + 3 · (spent − 2)), and the fault is missed.
    off = gate(0)
    assert [t for t, s in enumerate(scores) if off.decide(rows(0), np.array([s]))[0][0]] == [0, 10, 20]
    # A kept-back alert pages no one, so it starts no refractory period: a fault 3 readings after it alerts, while
    # one 3 readings after a raised alert waits.
    g = gate()
    late = scores[:23] + [9.0] + [0.0] * 5
    assert [t for t, s in enumerate(late) if g.decide(rows(0), np.array([s]))[0][0]] == [0, 10, 23]
    g = gate()
    early = scores[:13] + [9.0] + [0.0] * 5
    assert [t for t, s in enumerate(early) if g.decide(rows(0), np.array([s]))[0][0]] == [0, 10]

    # Save and restore mid-stream equals an uninterrupted run; a state saved before the schedule starts it empty.
    first = gate()
    got = [bool(first.decide(rows(0), np.array([s]))[0][0]) for s in scores[:25]]
    restored = AlertGate.from_state(first.state_dict())
    got += [bool(restored.decide(rows(0), np.array([s]))[0][0]) for s in scores[25:]]
    assert [t for t, a in enumerate(got) if a] == [0, 10, 45]
    old = {k: v for k, v in first.state_dict().items() if k != "times_"}
    assert AlertGate.from_state(old).times_.tolist() == [[-1] * SCHEDULE_MEMORY]


def test_a_run_the_refractory_period_holds_back_stays_out_of_the_record_unless_record_held():
    # An alert at 0, a louder run at 3 that the refractory period holds back (the event going on), then a fault at
    # 30 of surprise 5.5. Kept out of the record, the held run leaves the bar at the threshold and the fault alerts;
    # in it (capped at 6, falling 0.001 per reading) the held run's 6 hides the fault.
    scores = [0.0] * 40
    scores[0], scores[3], scores[4], scores[30] = 6.0, 9.0, 8.0, 5.5

    def alerts(record_held: bool) -> tuple[list[int], float]:
        g = AlertGate(threshold=4.0, min_count=1, refractory=10, protect=10, record_decay=0.001, record_cap=6.0,
                      record_held=record_held, n_streams=1)  # fmt: skip
        got = [t for t, s in enumerate(scores) if g.decide(rows(0), np.array([s]))[0][0]]
        return got, float(g.record_[0])

    assert alerts(False) == ([0, 30], 0.0)  # the record: the quiet readings after the fault
    held, record = alerts(True)
    assert held == [0] and record == pytest.approx(6.0 - 35 * 0.001)  # capped at its last reading, 4


def test_the_schedule_keeps_time_in_steps_so_unscored_steps_do_not_move_it():
    # An edge every 20 steps; 5 steps before the third one are unscored (a gap the monitor filled, NaN). Counted in
    # scored readings the third edge would come 15 after the second, off the progression; in steps it is on it.
    scores = [0.0] * 70
    for t in range(0, 70, 20):
        scores[t] = 6.0
    scores[33:38] = [math.nan] * 5
    g = AlertGate(threshold=4.0, min_count=1, refractory=3, protect=10, schedule=2, schedule_tol=0.01, n_streams=1)
    decisions = [g.decide(rows(0), np.array([s]))[0][0] for s in scores]
    assert [t for t, alert in enumerate(decisions) if alert] == [0, 20]  # 40 and 60 kept back
    assert sorted(g.times_[0][g.times_[0] >= 0].tolist()) == [1, 21, 41, 61]
    assert g.steps_[0] == 70 and g.scored_[0] == 65
    # A state saved before the step clock continues it from the scored readings its alert times were kept in.
    old = {k: v for k, v in g.state_dict().items() if k != "steps_"}
    assert AlertGate.from_state(old).steps_.tolist() == [65]


def test_run_peaks_count_alerted_runs_once_each_and_survive_a_save_and_restore():
    def gate():
        return AlertGate(threshold=1.0, min_count=1, refractory=0, protect=10, peaks=2, peak_decay=0.0, n_streams=1)

    # A run of three hot readings is one peak (its largest, 7), not three: the next run at 6 still alerts, and
    # only then is 6 the 2nd largest peak, which holds back 5 and lets 6.5 through.
    scores = [7.0, 5.0, 6.0, 0.0, 6.0, 0.0, 5.0, 0.0, 6.5]
    expected = [True, False, False, False, True, False, False, False, True]
    whole = gate()
    assert [bool(whole.decide(rows(0), np.array([s]))[0][0]) for s in scores] == expected
    first = gate()
    got = [bool(first.decide(rows(0), np.array([s]))[0][0]) for s in scores[:5]]
    restored = AlertGate.from_state(first.state_dict())
    got += [bool(restored.decide(rows(0), np.array([s]))[0][0]) for s in scores[5:]]
    assert got == expected and restored.peaks == 2


def test_a_state_saved_before_run_peaks_existed_restores_with_them_fresh():
    config = DetectorConfig(min_count=1, threshold=1.0, refractory=0)
    old = Detector(dataclasses.replace(config, peaks=0), dims=2)
    old.add(streams=1, lanes=1)
    state = {k: v for k, v in old.state_dict().items() if not k.startswith(("gate/peaks_", "gate/run_"))}
    new = Detector(config, dims=2)
    new.load_state(state)
    assert new.gate.peaks == 3 and new.gate.peaks_.shape == (1, 3) and np.isneginf(new.gate.peaks_).all()


def test_streams_are_gated_independently():
    gate = AlertGate(threshold=1.0, min_count=2, refractory=5, protect=2, n_streams=2)
    gate.decide(rows(0, 1), np.array([0.0, np.nan]))
    alert, warming, _, _ = gate.decide(rows(0, 1), np.array([5.0, 5.0]))
    assert alert.tolist() == [True, False] and warming.tolist() == [False, True]


# Detector: lanes, the correction, the reported lane


def test_score_is_the_best_lane_surprise_less_log10_of_lanes_times_signals_and_names_that_lane():
    config = DetectorConfig(signals=("distance",), short=1, min_count=1, prior_weight=0)
    detector = Detector(config, dims=2)
    detector.add(streams=1, lanes=3)
    rng = np.random.default_rng(0)
    history = rng.uniform(1.0, 2.0, size=(20, 3))
    one, lanes, lane_of, z = rows(0), rows(0, 1, 2), rows(0, 0, 0), np.zeros((3, 2))
    logs = np.array([detector.step(one, lanes, lane_of, d, z).signals[:, 0] for d in history])
    np.testing.assert_allclose(logs, np.log(history), atol=1e-5)  # distances are judged in log space
    now = np.array([1.5, 6.0, 3.0])
    step = detector.step(one, lanes, lane_of, now, z)
    surprise = student_upper_tail_surprise((step.signals[:, 0] - logs.mean(axis=0)) / logs.std(axis=0), config.tail_dof)
    np.testing.assert_allclose(step.lane_score, surprise, rtol=1e-9)
    assert step.score[0] == pytest.approx(surprise.max() - math.log10(3)) and step.lane[0] == 1
    # A lane without a value this reading is not a test: 2 lanes left.
    step = detector.step(one, lanes, lane_of, np.array([np.nan, 1.5, 3.0]), z)
    assert step.score[0] == pytest.approx(np.nanmax(step.lane_score) - math.log10(2)) and step.lane[0] == 2


def test_with_max_both_signals_count_as_tests_and_streams_are_scored_separately():
    config = DetectorConfig(signals=("distance", "novelty"), combine="max", memory=8, stride=1, exclusion=1, short=1, min_count=1,
                            prior_weight=0)  # fmt: skip
    detector = Detector(config, dims=2)
    detector.add(streams=2, lanes=3)  # stream 0: lanes 0 and 1; stream 1: lane 2
    streams, lanes, lane_of = rows(0, 1), rows(0, 1, 2), rows(0, 0, 1)
    rng = np.random.default_rng(1)
    for _ in range(30):
        step = detector.step(streams, lanes, lane_of, rng.uniform(1, 2, 3), rng.normal(size=(3, 2)))
    assert np.isfinite(step.signals).all()  # novelty exists once the memory holds old enough entries
    best = [np.nanmax(step.lane_score[:2]), step.lane_score[2]]
    np.testing.assert_allclose(step.score, [best[0] - math.log10(2 * 2), best[1] - math.log10(1 * 2)])
    assert step.lane.tolist() == [int(np.argmax(step.lane_score[:2])), 2]


def test_fisher_combination_of_known_tail_probabilities():
    # p = 0.01 twice: X = -2 ln 1e-4 = 18.42 under chi2(4), tail e^-9.21 (1 + 9.21) = 1.021e-3.
    two = combine_surprise(np.array([[2.0, 2.0, np.nan]]))[0]
    assert two == pytest.approx(-math.log10(1e-4 * (1 + math.log(1e4))), rel=1e-9)
    out = combine_surprise(np.array([[3.0, np.nan, np.nan], [np.nan] * 3, [np.inf, 1.0, 1.0], [6.0, 0.1, 0.1]]))
    assert out[0] == pytest.approx(3.0) and math.isnan(out[1]) and out[2] == math.inf
    assert out[3] < 6.0  # one unusual signal among ordinary ones is weaker evidence than that signal alone
    agreeing = combine_surprise(np.array([[4.0, 4.0, 4.0]]))[0]
    assert agreeing > 9.0  # three signals at p = 1e-4 each: stronger than any one of them


def test_log_upper_gamma_matches_closed_forms_and_stays_finite_far_out():
    z = np.array([1e-4, 0.01, 0.3, 1.0, 2.0, 2.5, 3.9, 4.1, 10.0, 30.0, 100.0, 600.0])
    np.testing.assert_allclose(log_upper_gamma(1.0, z), -z, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(log_upper_gamma(2.0, z), -z + np.log1p(z), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(log_upper_gamma(3.0, z), -z + np.log(1 + z + z**2 / 2), rtol=1e-12, atol=1e-14)
    erfc = np.array([math.erfc(math.sqrt(v)) for v in z])
    np.testing.assert_allclose(log_upper_gamma(0.5, z), np.log(erfc), rtol=1e-10)
    np.testing.assert_allclose(log_upper_gamma(1.5, z), np.log(erfc + 2 * np.sqrt(z / math.pi) * np.exp(-z)),
                               rtol=1e-10)  # fmt: skip
    assert log_upper_gamma(2.0, 2000.0) == pytest.approx(-2000 + math.log(2001), rel=1e-12)  # e^-2000 underflows
    assert log_upper_gamma(1.7, 0.0) == 0.0


def test_brown_counts_overlapping_signals_as_partly_one():
    pair = np.array([[2.0, 2.0, np.nan], [3.0, 3.0, np.nan], [5.0, 1.0, np.nan]])
    fisher = combine_surprise(pair)
    np.testing.assert_array_equal(combine_surprise(pair, np.zeros((3, 3, 3))), fisher)  # independent: Fisher's
    same = combine_surprise(pair, np.ones((3, 3, 3)))
    np.testing.assert_allclose(same[:2], [2.0, 3.0], rtol=1e-9)  # one signal twice: its own surprise back
    half = combine_surprise(pair, np.full((3, 3, 3), 0.5))
    assert (same < half).all() and (half < fisher).all()
    # An overlap with a signal that has no value changes nothing: one value gives itself back.
    lone = np.array([[3.0, np.nan, np.nan]])
    assert combine_surprise(lone, np.ones((1, 3, 3)))[0] == pytest.approx(3.0)
    assert combine_surprise(np.array([[np.inf, 1.0, np.nan]]), np.ones((1, 3, 3)))[0] == math.inf


def test_signal_stats_learn_the_correlations_and_overlap_only_near_duplicates():
    stats = SignalStats(3, horizon=500, short=1, n_streams=1)
    rng = np.random.default_rng(0)
    idx = rows(0)
    for t in range(300):
        a, b = rng.normal(size=2)
        stats.learn(idx, np.array([[a, a + 0.1 * rng.normal(), b]]), np.array([t % 10 != 0]))  # every 10th protected
        if t == REDUNDANCY_MIN_VALUES:  # not yet enough learned readings: nothing overlaps
            assert (stats.overlap(idx, 0.8) == 0).all()
    assert stats.pairs_[0] == 270 - 2  # the learned rows, less the first two (no variance to standardise by)
    overlap = stats.overlap(idx, 0.8)[0]
    assert 0.9 < overlap[0, 1] == overlap[1, 0] <= 1.0  # ρ ≈ 0.995 → (ρ − 0.8) / 0.2
    assert overlap[0, 2] == overlap[1, 2] == 0.0  # independent signals keep Fisher's method


TWO_SIGNALS = DetectorConfig(signals=("distance", "deviation"), short=1, prior_weight=0, quiet=0, stuck=0,
                             budget_cost=0, peaks=0, record_decay=0, refractory=20)  # fmt: skip
"""A plain gate over ``distance`` and ``deviation``, for lanes whose two signals are drawn (``_two_signal_run``)."""


def _one_lane(config):
    detector = Detector(config, dims=2)
    detector.add(streams=1, lanes=1)
    return detector


def _two_signal_run(detector, draws, start=0):
    """One lane's alerts over ``draws [T, 2]``: per reading, the log of its ``distance`` and its ``deviation``
    reading (against a window of one 0)."""
    alerts = []
    for a, g in draws[start:]:
        step = detector.step(rows(0), rows(0), rows(0), np.exp([a]), np.zeros((1, 2)), np.array([[[g], [0.0]]]))
        alerts.append(bool(step.alert[0]))
    return alerts


def test_a_lane_whose_signals_repeat_each_other_alerts_less_and_survives_a_save_and_restore():
    rng = np.random.default_rng(3)
    size = np.abs(rng.standard_t(4, 3000))
    draws = np.stack([size, size], axis=1)  # ``distance`` the exponential of ``deviation``: only the reading's size
    config = TWO_SIGNALS
    fisher = sum(_two_signal_run(_one_lane(dataclasses.replace(config, redundancy=1.0, redundancy_tail=1.0)), draws))
    redundant = _one_lane(config)
    brown = _two_signal_run(redundant, draws)
    assert fisher > 2 * sum(brown) and sum(brown) > 0  # one outlier counted once, not twice
    assert redundant.stats.overlap(rows(0), config.redundancy)[0, 0, 1] > 0.5
    interrupted = _one_lane(config)
    got = _two_signal_run(interrupted, draws[:1500])
    restored = Detector(config, dims=2)
    restored.load_state(npz_round_trip(interrupted.state_dict()))
    assert restored.stats.pairs_[0] > REDUNDANCY_MIN_VALUES
    assert got + _two_signal_run(restored, draws, start=1500) == brown
    assert (redundant.for_model(2, None).stats.pairs_ == 0).all()  # another model's signals: relearned


def test_signal_stats_count_signals_that_stand_out_together_as_partly_one():
    """Two signals of independent noise but for a joint spike of 4 deviations on 5 % of readings, and a third of noise
    alone: their correlation (about 0.4) is under the bar, their joint tail is not."""
    rng = np.random.default_rng(5)
    stats = SignalStats(k=3, horizon=500, short=1, tail_dof=8, n_streams=1)
    lane = rows(0)
    for t in range(600):
        x = rng.normal(size=(1, 3))
        if rng.random() < 0.05:
            x[0, :2] += 4.0
        stats.learn(lane, x, np.array([True]))
        if stats.pairs_[0] == TAIL_MIN_VALUES - 1:  # not yet enough learned readings: the tails count for nothing
            assert stats.overlap(lane, 0.8, 0.4)[0, 0, 1] == 0.0
    plain, tails = stats.overlap(lane, 0.8)[0], stats.overlap(lane, 0.8, 0.4)[0]
    assert plain[0, 1] == plain[0, 2] == plain[1, 2] == 0.0
    assert tails[0, 1] == tails[1, 0] > 0.2
    assert tails[0, 2] == tails[1, 2] == 0.0  # the noise alone stands out apart
    np.testing.assert_array_equal(stats.overlap(lane, 0.8, 1.0)[0], plain)  # 1: the correlation alone


def test_a_lane_whose_signals_stand_out_together_alerts_less_and_survives_a_save_and_restore():
    rng = np.random.default_rng(4)
    spikes = 2.0 * (rng.random(4000) < 0.08)  # ordinary: 8 % of readings, learned
    spikes[[1500, 2500]] = 8.0  # two faults
    draws = np.abs(rng.normal(size=(4000, 2))) + spikes[:, None]  # independent noise but for the shared spikes
    config = TWO_SIGNALS
    correlation = _one_lane(dataclasses.replace(config, redundancy_tail=1.0))
    apart = sum(_two_signal_run(correlation, draws))
    assert correlation.stats.overlap(rows(0), config.redundancy)[0, 0, 1] == 0.0  # under the correlation's bar
    together = _one_lane(config)
    tails = _two_signal_run(together, draws)
    assert sum(tails) < apart / 2  # an ordinary spike counted once, not twice
    assert tails[1500] and tails[2500]  # the faults stand out all the same
    interrupted = _one_lane(config)
    got = _two_signal_run(interrupted, draws[:2000])
    restored = Detector(config, dims=2)
    restored.load_state(npz_round_trip(interrupted.state_dict()))
    assert restored.stats.coexceed_[0, 0, 1] > 0
    assert got + _two_signal_run(restored, draws, start=2000) == tails
    assert (together.for_model(2, None).stats.coexceed_ == 0).all()  # another model's signals: relearned


def test_a_state_saved_before_the_joint_tails_counts_its_signals_apart_until_their_tails_say_otherwise():
    rng = np.random.default_rng(6)
    stats = SignalStats(k=2, horizon=500, short=1, n_streams=1)
    lane = rows(0)
    for _ in range(400):
        stats.learn(lane, rng.normal(size=(1, 2)), np.array([True]))
    old = {name: value for name, value in stats.state_dict().items() if name != "coexceed_"}
    restored = SignalStats.from_state(npz_round_trip(old))
    assert restored.pairs_[0] >= TAIL_MIN_VALUES
    restored.learn(lane, np.array([[9.0, 9.0]]), np.array([True]))  # one reading out in both at once
    # From empty rates that one reading would be λ = 1: the signals one signal. From independent rates it is not.
    assert restored.overlap(lane, 0.8, 0.4)[0, 0, 1] == 0.0
    for _ in range(400):
        spike = 4.0 * (rng.random() < 0.1)
        restored.learn(lane, rng.normal(size=(1, 2)) + spike, np.array([True]))
    assert restored.overlap(lane, 0.8, 0.4)[0, 0, 1] > 0.2  # their own tails, learned since


def test_joint_tails_are_for_card_normalised_models_unless_redundancy_tail_scaled():
    config = DetectorConfig()
    assert config.redundancy_tail < 1 and config.for_scaling(None) is config
    assert config.for_scaling("stream") == config.with_overrides("seasonal_gain=0;redundancy_tail=1")
    scaled = config.with_overrides("redundancy_tail_scaled=1;seasonal_scaled=1")
    assert scaled.for_scaling("stream") is scaled
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="redundancy_tail"):
            DetectorConfig(redundancy_tail=bad)


def test_with_fisher_each_lane_is_one_test_of_its_combined_signals():
    config = DetectorConfig(signals=("distance", "novelty"), memory=8, stride=1, exclusion=1, short=1, min_count=1,
                            prior_weight=0)  # fmt: skip
    assert config.combine == "fisher"
    detector = Detector(config, dims=2)
    detector.add(streams=1, lanes=2)
    rng = np.random.default_rng(2)
    for _ in range(30):
        step = detector.step(rows(0), rows(0, 1), rows(0, 0), rng.uniform(1, 2, 2), rng.normal(size=(2, 2)))
    assert np.isfinite(step.lane_score).all()
    assert step.score[0] == pytest.approx(step.lane_score.max() - math.log10(2))


@pytest.mark.parametrize("memory_alerts", [True, False])
def test_a_pattern_the_stream_alerted_on_is_remembered_and_not_new_when_it_recurs(memory_alerts):
    """The memory remembers alerting readings (the statistics do not): the pattern's second visit is not novel."""
    config = DetectorConfig(signals=("novelty",), memory=64, stride=1, exclusion=1, short=1, min_count=20,
                            refractory=0, prior_weight=0, memory_alerts=memory_alerts)  # fmt: skip
    detector = Detector(config, dims=2)
    detector.add(streams=1, lanes=1)
    rng = np.random.default_rng(0)
    pattern = np.array([[8.0, -8.0]])
    steps = []
    for t in range(80):
        z = pattern if t in (50, 70) else rng.normal(0, 0.1, (1, 2))
        steps.append(detector.step(rows(0), rows(0), rows(0), np.ones(1), z))
    first, again = steps[50], steps[70]
    assert first.alert[0] and first.signals[0, 0] > math.log(8)  # new: about its distance from the normal cloud
    if memory_alerts:
        assert again.signals[0, 0] < math.log(0.05) and not again.alert[0]  # the stored pattern: distance 0
    else:
        assert again.signals[0, 0] > math.log(8) and again.alert[0]  # never stored, new every time
    # 78 readings with a novelty (the first two have no old enough neighbour); the statistics skip every alerting
    # visit: the first always, the second unless the memory made it ordinary.
    assert detector.stats.count_[0, 0] == (77 if memory_alerts else 76)


def test_combine_is_validated_and_overridable():
    with pytest.raises(ValueError, match="combine"):
        DetectorConfig(combine="mean")
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="redundancy"):
            DetectorConfig(redundancy=bad)
    assert DetectorConfig().with_overrides("redundancy=1").redundancy == 1.0
    assert DetectorConfig().with_overrides("combine=max").combine == "max"
    assert DetectorConfig().with_overrides("memory_alerts=0").memory_alerts is False
    with pytest.raises(ValueError, match="memory_alerts"):
        DetectorConfig().with_overrides("memory_alerts=maybe")
    named = DetectorConfig.variants(["previous:memory_alerts=0;threshold=5", "slow:peak_decay=0.001"])
    assert named == {"previous": DetectorConfig(memory_alerts=False, threshold=5.0),
                     "slow": DetectorConfig(peak_decay=0.001)}  # fmt: skip
    with pytest.raises(ValueError, match="NAME:key=value"):
        DetectorConfig.variants(["threshold=5"])



def test_settings_that_would_switch_a_part_off_silently_are_refused():
    with pytest.raises(ValueError, match="horizon must be >= 2"):
        DetectorConfig(horizon=1)
    with pytest.raises(ValueError, match="schedule must be <= 8"):
        DetectorConfig(schedule=9)
    with pytest.raises(ValueError, match="memory x stride = 64 readings hold none"):
        DetectorConfig(memory=16, stride=4, exclusion=64)
    # Without novelty the memory is not read; at the edge one remembered reading is old enough.
    assert DetectorConfig(memory=16, stride=4, exclusion=64, signals=("distance",)).exclusion == 64
    assert DetectorConfig(memory=16, stride=4, exclusion=60, schedule=8, horizon=2).memory == 16


# deviation: the level, the step and the step record


def _cycle(n, jump_at=None, jump=0.0, seed=0):
    """A sine of amplitude 10 with noise 2, 32 readings a cycle, and a jump of ``jump`` from ``jump_at`` on."""
    t = np.arange(n)
    x = 40 + 10 * np.sin(2 * np.pi * t / 32) + np.random.default_rng(seed).normal(0, 2, n)
    if jump_at is not None:
        x[jump_at:] += jump
    return x


def test_a_jump_inside_a_cycles_range_is_small_by_level_and_large_by_step():
    trough = 24 + 32 * 4  # the cycle's lowest point, with a full 128-reading window ending there
    x = _cycle(trough + 1, jump_at=trough, jump=25.0)
    level, step = window_deviation(x[-128:, None][None])[0, :, 0]
    assert level < 3  # inside the range of the window: the cycle's spread hides it
    assert step > 5 > 2 * level  # 25 against changes of about 3 from reading to reading
    plain = window_deviation(_cycle(trough + 1)[-128:, None][None])[0, :, 0]
    assert plain[1] < 3


def test_a_quantised_window_does_not_turn_a_digit_flip_into_a_huge_step():
    x = np.round(np.random.default_rng(1).normal(100, 3, 128))
    x[:120] = 100.0  # a near-flat window: its changes are mostly 0
    x[60:64] = 101.0
    x[-1] = 101.0
    level, step = window_deviation(x[:, None][None])[0, :, 0]
    assert step <= 1 / 0.1 * 1.01  # the changes' scale is floored at a tenth of the level scale
    gap = window_deviation(np.r_[x[:-2], np.nan, x[-1]][:, None][None])[0, :, 0]
    assert np.isfinite(gap[0]) and np.isnan(gap[1])  # no previous value: no step
    young = window_deviation(np.r_[np.full(118, np.nan), x[-10:]][:, None][None])
    assert np.isnan(young).all()  # a stream's first readings: too few earlier values for either


def test_a_count_channel_judges_its_tied_windows_on_one_scale_and_other_channels_as_before():
    rng = np.random.default_rng(2)
    # An intermittent count, zero three times in four: its upper quartile straddles the zeros and the smallest count.
    counts = rng.permutation(np.concatenate([np.zeros(95), np.arange(1.0, 33.0)]))
    windows = np.stack([np.r_[counts, 30.0], rng.normal(0, 1, 128)], axis=1)[None]  # a count and a level channel
    plain = window_deviation(windows)[0]
    tied = window_deviation(windows, tied=count_channels(np.array([3.0, 0.0]), 2))[0]
    assert plain[0, 0] > 80 and tied[0, 0] < 12  # an ordinary count of 30, not 80 slivers of quartiles
    np.testing.assert_array_equal(tied[:, 1], plain[:, 1])
    assert count_channels(None, 2) is None and count_channels(np.array([3.0]), 2) is None  # none, or other lanes


def test_the_deviation_window_judges_a_reading_against_the_recent_readings_only():
    x = np.random.default_rng(2).normal(0, 1, 201)
    x[:176] += 20.0  # the level the stream left 25 readings ago, still most of a 201-reading window
    whole = window_deviation(x[:, None][None])[0, :, 0]
    recent = window_deviation(x[:, None][None], span=24)[0, :, 0]
    np.testing.assert_array_equal(recent, window_deviation(x[-24:, None][None])[0, :, 0])
    np.testing.assert_array_equal(window_deviation(x[:, None][None], span=400)[0, :, 0], whole)  # a short model window
    assert whole[0] > 5 > 3 > recent[0]  # an ordinary reading of the new level, a fault by the whole window
    with pytest.raises(ValueError, match="deviation_window"):
        DetectorConfig(deviation_window=16)  # too few earlier values ever to judge
    assert DetectorConfig(deviation_window=17).deviation_window == 17


def test_fold_step_counts_a_step_only_at_its_bar():
    parts = np.array([[[2.0, 2.0, 9.0], [8.0, 8.0, np.nan]]])  # [1, 2, C]: levels, steps
    got = fold_step(parts, np.array([[8.0, np.inf, 1.0]]))
    np.testing.assert_allclose(got, [[4.0, 2.0, 9.0]])  # √(2·8); no bar reached; no step


def test_a_recurring_step_stops_counting_and_a_record_one_counts_until_the_span_forgets_it():
    record = StepRecord(channels=1, span=16, ratio=1.5, n_streams=1)
    lane = rows(0)

    def fold(level, step):
        return record.fold(lane, np.array([[[level], [step]]]))[0][0, 0]

    assert fold(1.0, 9.0) == 1.0  # a lane's first step has nothing to beat
    for _ in range(15):
        fold(1.0, 1.0)
    assert fold(1.0, 9.0) == 1.0  # 9 is no record: the first reading is still within the span
    assert fold(1.0, 1.0) == 1.0
    for _ in range(16):
        fold(1.0, 1.0)
    assert fold(1.0, 9.0) == 3.0  # the span forgot the earlier 9s: √(1·9)
    assert fold(1.0, 9.0) == 1.0  # and the next one recurs


def test_the_general_model_finds_a_jump_inside_a_daily_cycles_range_by_its_step_alone():
    # Five-minute readings of a daily cycle (amplitude 10, noise 2) and a +25 shift for 100 readings from a trough:
    # the level of the jump stays inside the window's range, so only its step gives it away.
    day, n = 288, 3250  # the jump, and 54 readings after it
    rng = np.random.default_rng(1)
    x = 40 + 10 * np.sin(2 * np.pi * np.arange(n) / day) + rng.normal(0, 2, n)
    at = int(day * 10.75)
    x[at : at + 100] += 25
    engine = load_engine(Path(__file__).resolve().parents[2] / "models" / "general.onnx", "cpu")
    alerts = np.flatnonzero(detect_recording(engine, x[:, None]).alerts)
    assert len(alerts) == 1 and at <= alerts[0] < at + 100
    # The level alone misses the jump (with the quiet path off: its alert here, 100 readings after the shift ended,
    # is not the jump's; and the range off: 55 is just past the highest the cycle and its noise reached).
    assert not detect_recording(engine, x[:, None], DetectorConfig(step_record=0, quiet=0, range_tol=0)).alerts.any()
    # With the range on it alerts again, and the episode names the range as its cause (its score is below the bar).
    ranged = detect_recording(engine, x[:, None], DetectorConfig(step_record=0, quiet=0)).events
    raised = [(t, cause) for t, state, _, _, cause in ranged if state == "raised"]
    assert len(raised) == 1 and at <= raised[0][0] < at + 100 and raised[0][1] == "range"


def test_a_state_saved_before_the_step_record_loads_with_a_fresh_one():
    detector = Detector(DetectorConfig(), dims=2)
    detector.add(streams=1, lanes=2)
    state = {k: v for k, v in detector.state_dict().items() if not k.startswith("steps/")}
    restored = Detector(DetectorConfig(), dims=2)
    restored.load_state(state)
    assert restored.steps.n_streams == 2 and (restored.steps.seen_ == 0).all()


# StuckRecord: a frozen sensor


def _stuck(values, history=20):
    """Each reading's fresh stuck surprise of one single-channel lane fed ``values`` in order."""
    record = StuckRecord(channels=1, history=history, n_streams=1)
    x = np.asarray(values, dtype=float)
    return np.array([record.surprise(rows(0), window_repeats(x[t - 1 : t + 1, None][None]))[1][0]
                     for t in range(1, len(x))]), record  # fmt: skip


def test_window_repeats_says_equal_different_or_unknown():
    windows = np.array([[1.0, 2.0, 2.0], [3.0, 2.0, 1.0], [1.0, np.nan, 1.0]])[:, :, None]
    np.testing.assert_array_equal(window_repeats(windows)[:, 0], [1.0, 0.0, np.nan])


def test_a_channel_that_never_repeats_is_stuck_on_its_third_identical_reading():
    x = np.r_[np.arange(200.0), np.full(4, 199.0)]
    fresh, _ = _stuck(x)
    assert np.isnan(fresh[:200]).all()  # the second identical reading is not yet surprising
    # Third reading of the run: 2 repeats beyond the longest earlier run (1) at the repeat rate 1 / (199 + 2).
    assert fresh[200] == pytest.approx(2 * math.log10(201)) and fresh[201] == pytest.approx(3 * math.log10(201))


def test_a_quantised_channel_must_hold_its_value_longer_than_it_ever_has():
    holds = np.repeat(np.arange(60.0) % 7, np.tile([1, 2, 3, 4], 15))  # runs of up to 4 identical readings
    fresh, record = _stuck(np.r_[holds, np.full(30, 9.0)])
    assert record.longest_[0, 0] == 4
    rate = (record.repeats_[0, 0] + 1) / (record.pairs_[0, 0] + 2)
    judged = np.flatnonzero(np.isfinite(fresh))
    assert judged[0] == len(holds) + 3  # the run's 5th reading: one more than the longest
    assert fresh[judged[0]] == pytest.approx(-math.log10(rate))
    assert (np.diff(fresh[judged]) > 0).all()  # more surprising the longer it holds


def test_too_short_a_history_or_a_missing_reading_judges_no_run():
    fresh, _ = _stuck(np.r_[np.arange(10.0), np.full(10, 9.0)])
    assert np.isnan(fresh).all()  # 10 pairs of history, 20 needed
    fresh, record = _stuck(np.r_[np.arange(50.0), 49.0, np.nan, 49.0, 49.0])
    assert np.isnan(fresh[-3:]).all() and record.run_[0, 0] == 2  # the gap ended the run


def test_a_stuck_run_alerts_once_names_its_lane_and_the_next_run_must_outlast_it():
    config = DetectorConfig(min_count=1, min_warmup=1, stuck_history=50, refractory=5)
    detector = Detector(config, dims=2)
    detector.add(streams=1, lanes=2)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(340, 2))
    x[100:140, 1] = x[99, 1]  # lane 1 frozen for 41 readings
    x[200:230, 1] = x[199, 1]  # then for 31: shorter than before, not stuck
    x[250:320, 1] = x[249, 1]  # then for 71: longer than any before
    distance = rng.lognormal(size=(340, 2))
    stuck, lane, surprise = [], [], []
    for t in range(1, len(x)):
        out = detector.step(rows(0), rows(0, 1), rows(0, 0), distance[t], np.zeros((2, 2)), None,
                            window_repeats(x[t - 1 : t + 1, :, None].transpose(1, 0, 2)))  # fmt: skip
        stuck.append(bool(out.stuck[0]))
        lane.append(int(out.lane[0]))
        surprise.append(float(out.surprise[0]))
    alerts = [t + 1 for t, s in enumerate(stuck) if s]
    # The third identical reading (101) is 2 repeats at a rate of 1 in about 100, less log10 of the 2 lanes: 3.7;
    # the fourth alerts. The third run must beat 41 by enough repeats at the rate the channel has shown since.
    assert alerts[0] == 102 and len(alerts) == 2 and 290 < alerts[1] < 320
    assert lane[alerts[0] - 1] == lane[alerts[1] - 1] == 1
    # The run's surprise keeps its episode open while it lasts (it grows), and ends with the run.
    assert surprise[110] > surprise[101] >= config.threshold and surprise[141] < config.threshold
    off = Detector(dataclasses.replace(config, stuck=0), dims=2)
    off.add(streams=1, lanes=2)
    assert not any(off.step(rows(0), rows(0, 1), rows(0, 0), distance[t], np.zeros((2, 2)), None,
                            window_repeats(x[t - 1 : t + 1, :, None].transpose(1, 0, 2))).stuck[0]
                   for t in range(1, len(x)))  # fmt: skip


def test_the_general_model_alerts_a_frozen_sensor_a_few_readings_into_the_freeze():
    rng = np.random.default_rng(4)
    n, at = 2300, 2000  # a stuck alert needs 1,000 pairs of readings of the channel's history first
    x = 20 + 5 * np.sin(2 * np.pi * np.arange(n) / 96) + rng.normal(0, 0.5, n)
    x[at:] = x[at - 1]  # the sensor holds its last value for its last 300 readings
    engine = load_engine(Path(__file__).resolve().parents[2] / "models" / "general.onnx", "cpu")
    out = detect_recording(engine, x[:, None])
    alerts = np.flatnonzero(out.alerts)
    assert alerts.size and at <= alerts[0] <= at + 3
    assert [(t, cause) for t, state, _, _, cause in out.events if state == "raised"][0] == (alerts[0], "stuck")
    late = np.flatnonzero(detect_recording(engine, x[:, None], DetectorConfig(stuck=0)).alerts)
    assert not ((late >= at) & (late <= at + 3)).any()
    # A level far beyond what the stream scale has learnt is clipped for the model, not frozen: no stuck alert.
    y = 50 + rng.normal(0, 0.2, 1300)
    y[1100:] += 40  # 200 learnt scales: past the scaler's clip of 100 (after the 1,000 pairs a stuck alert needs)
    np.testing.assert_array_equal(detect_recording(engine, y[:, None]).alerts,
                                  detect_recording(engine, y[:, None], DetectorConfig(stuck=0)).alerts)


def _paused(x, stop=10):
    """Each reading's ``StuckRecord.paused`` for one lane fed the rows of ``x [T, C]`` in order."""
    record = StuckRecord(channels=x.shape[1], history=1000, stop=stop, n_streams=1)
    out = []
    for t in range(1, len(x)):
        repeat = window_repeats(x[None, t - 1 : t + 1])
        out.append(bool(record.paused(rows(0), repeat)[0]))
        record.surprise(rows(0), repeat)
    return np.flatnonzero(out) + 1


def test_a_lane_stopped_for_stop_readings_pauses_until_its_windows_are_free_of_the_stop():
    x = np.random.default_rng(0).normal(size=(120, 2))
    x[40:70] = x[39]  # both channels hold one value from reading 39 to 69, and move at 70
    # Paused from the stop's 10th reading (48) while it lasts, then for 10 readings after it moves (70-79); a lane
    # still from its start (its first 10 readings, for example) has not shown that it moves, and is not stopped.
    np.testing.assert_array_equal(_paused(x), np.arange(48, 80))
    dropped = x.copy()
    dropped[70] = np.nan  # the restart's first reading is lost: the wake still runs its 10 readings from there
    np.testing.assert_array_equal(_paused(dropped), np.arange(48, 80))
    one = x.copy()
    one[40:70, 1] = np.arange(30.0)  # one channel keeps moving: no stop
    assert _paused(one).size == 0
    valve = np.zeros((300, 1))
    valve[::25] = 1.0  # at rest by nature: most readings repeat, and a still stretch is its normal
    assert _paused(valve).size == 0
    shifts = np.random.default_rng(1).normal(size=(360, 1))
    for start in range(30, 360, 90):
        shifts[start : start + 60] = shifts[start - 1]  # stopped two thirds of the time: each stop is still one
    paused = _paused(shifts)
    # Each from its 10th held reading (the one before the block included) through 10 readings of wake; the last has
    # no wake before the end.
    assert [int(((paused >= s) & (paused < s + 90)).sum()) for s in range(30, 360, 90)] == [62, 62, 62, 52]


def test_a_stop_of_a_young_channel_alerts_as_stuck_at_its_stop_th_reading():
    x = np.r_[np.arange(200.0), np.full(60, 199.0)]  # 200 pairs of history, far fewer than stuck_history
    record = StuckRecord(channels=1, history=1000, stop=50, n_streams=1)
    fresh = np.array([record.surprise(rows(0), window_repeats(x[t - 1 : t + 1, None][None]))[1][0]
                      for t in range(1, len(x))])  # fmt: skip
    judged = np.flatnonzero(np.isfinite(fresh)) + 1
    assert judged[0] == 199 + 49  # the run's 50th reading: 49 readings beyond the longest run (1), at 1 in 201
    assert fresh[judged[0] - 1] == pytest.approx(49 * math.log10(201))
    assert np.isnan(_stuck(x, history=1000)[0]).all()  # without a stop the history must come first
    # Two channels: one holding while its sibling moves is not a stop, and waits for its history; both holding are.
    for sibling, first in ((np.arange(260.0), None), (x, 199 + 49)):
        pair = StuckRecord(channels=2, history=1000, stop=50, n_streams=1)
        xy = np.stack([x, sibling], axis=1)
        fresh = np.array([pair.surprise(rows(0), window_repeats(xy[None, t - 1 : t + 1]))[1][0]
                          for t in range(1, len(x))])  # fmt: skip
        judged = np.flatnonzero(np.isfinite(fresh)) + 1
        assert (judged[0] if len(judged) else None) == first


def test_a_paused_lane_learns_nothing_and_survives_a_save_and_restore_mid_wake():
    config = DetectorConfig(min_count=1, min_warmup=1, stop=20, stuck_history=1000)
    rng = np.random.default_rng(3)
    x = rng.normal(size=300)
    x[100:160] = x[99]  # a stop of 61 readings, then 20 readings of waking (160-179)
    distance = rng.lognormal(size=300)
    parts = np.ones((300, 2, 1))
    parts[160, 1] = 1000.0  # the restart's step out of the still window

    def run(config=config, restore_at=None):
        detector = Detector(config, dims=2)
        detector.add(streams=1, lanes=1)
        counts, scores = [], []
        for t in range(1, len(x)):
            if t == restore_at:
                saved, detector = detector.state_dict(), Detector(config, dims=2)
                detector.load_state(npz_round_trip(saved))
            out = detector.step(rows(0), rows(0), rows(0), distance[t : t + 1], np.zeros((1, 2)), parts[t : t + 1],
                                window_repeats(x[None, t - 1 : t + 1, None]))  # fmt: skip
            counts.append(int(detector.stats.count_[0, 0]))
            scores.append(float(out.lane_score[0]))  # the anomaly signals' (the stop's stuck run has its own)
        return np.array(counts), np.array(scores), detector

    counts, scores, detector = run()
    # Nothing is learned or judged from the stop's 20th reading (119) to the end of the wake (179).
    assert counts[118 - 1] == counts[179 - 1] < counts[180 - 1]
    assert np.isnan(scores[119 - 1 : 179]).all() and np.isfinite(scores[180 - 1])
    assert np.nanmax(detector.steps.peak_[np.isfinite(detector.steps.peak_)]) == 1.0  # nor is the restart's step
    restored = run(restore_at=170)
    np.testing.assert_array_equal(restored[0], counts)
    np.testing.assert_array_equal(restored[1], scores)
    # The stop is read from the runs the stuck record keeps, whether or not a stuck run may alert.
    np.testing.assert_array_equal(run(dataclasses.replace(config, stuck=0))[0], counts)
    with pytest.raises(ValueError, match="stop must be 0"):
        DetectorConfig(stop=2)


def test_a_paused_lane_counts_nothing_for_or_against_its_cycle():
    t = np.arange(400)
    x = np.sin(2 * np.pi * t / 20) + 0.01 * np.random.default_rng(4).normal(size=400)
    x[200:280] = x[199]  # a stop after the cycle is found (reading 100), then the restart at 280
    parts = np.ones((400, 2, 1))
    parts[280] = 1000.0  # the restart reads loud out of the still window

    def loud(stop):
        config = DetectorConfig(min_count=1, min_warmup=1, stop=stop, stuck_history=1000, seasonal_after=100,
                                seasonal_fit=0)  # the floor's count: the clean sine would be scheduled
        detector = Detector(config, dims=2)
        detector.add(streams=1, lanes=1)
        for i in range(1, 300):
            detector.step(rows(0), rows(0), rows(0), np.ones(1), np.zeros((1, 2)), parts[i : i + 1],
                          window_repeats(x[None, i - 1 : i + 1, None]), x[i : i + 1, None])  # fmt: skip
        assert detector.seasons.period_[0, 0] == 20
        return int(detector.seasons.loud_[0, 0])

    assert (loud(0), loud(20)) == (1, 0)


def test_the_general_model_alerts_a_machine_stop_once_and_judges_the_readings_after_it():
    rng = np.random.default_rng(7)
    x = 20 + 5 * np.sin(2 * np.pi * np.arange(2000) / 96) + rng.normal(0, 0.5, 2000)
    x[600:1000] = x[599]  # the machine stops for 400 readings, before its channel has a stuck history
    x[1150:1153] += 10  # a fault 150 readings after the restart
    engine = load_engine(Path(__file__).resolve().parents[2] / "models" / "general.onnx", "cpu")
    raised = [(t, cause) for t, state, _, _, cause in detect_recording(engine, x[:, None]).events if state == "raised"]
    assert raised == [(599 + 127, "stuck"), (1150, "anomaly")]  # the stop at its 128th reading, then the fault
    # Judged, the restart read as thousands of scales and alerted, and its refractory period hid the fault.
    before = detect_recording(engine, x[:, None], DetectorConfig(stop=0)).events
    assert [(t, cause) for t, state, _, _, cause in before if state == "raised"] == [(1000, "anomaly")]


def test_the_general_model_alerts_a_burst_that_comes_right_after_an_ordinary_alert():
    rng = np.random.default_rng(2)
    n = 1000
    x = rng.poisson(20 * np.exp(rng.normal(0, 0.5, n))).astype(float)  # bursty counts: they alert now and then
    engine = load_engine(Path(__file__).resolve().parents[2] / "models" / "general.onnx", "cpu")
    plain = DetectorConfig(escalate=0)
    ordinary = np.flatnonzero(detect_recording(engine, x[:, None], plain).alerts)
    at = int(ordinary[ordinary >= 300][0]) + 27
    x[at : at + 20] += 300  # 15 times the usual level, inside that alert's refractory period

    def in_burst(config: DetectorConfig) -> bool:
        alerts = np.flatnonzero(detect_recording(engine, x[:, None], config).alerts)
        return bool(((alerts >= at) & (alerts < at + 20)).any())

    assert not in_burst(plain) and in_burst(DetectorConfig(escalate=2))


def _run_detector(detector, distances, z, deviation, repeat):
    out = []
    for d, zz, dev, rep in zip(distances, z, deviation, repeat):
        step = detector.step(rows(0, 1), rows(0, 1, 2), rows(0, 0, 1), d, zz, dev, rep)
        out.append((step.score, step.alert, step.warming, step.lane, step.deviation, step.stuck))
    return out


@pytest.mark.parametrize("round_trip", [npz_round_trip, json_round_trip])
def test_detector_state_round_trip_mid_stream_equals_an_uninterrupted_run(round_trip):
    config = DetectorConfig(memory=5, stride=2, exclusion=3, horizon=12, short=3, min_count=4, threshold=1.5,
                            refractory=3, protect=2, prior_weight=10, step_span=16, stuck_history=8)  # fmt: skip
    prior = {"signals": ["distance", "novelty", "deviation"], "mean": [0.3, -0.5, 1.0], "var": [0.2, 0.4, 0.5],
             "n": 500}  # fmt: skip
    rng = np.random.default_rng(2)
    distances = rng.lognormal(size=(80, 3)) * np.where(rng.random((80, 3)) < 0.05, 30, 1)
    distances[rng.random((80, 3)) < 0.05] = np.nan
    z = rng.normal(size=(80, 3, 4))
    deviation = rng.lognormal(size=(80, 3, 2, 2)) * np.where(rng.random((80, 3, 1, 1)) < 0.1, 10, 1)
    repeat = (rng.random((80, 3, 2)) < 0.1).astype(float)
    repeat[36:60, 2, 1] = 1.0  # a channel frozen across the restore

    def fresh():
        detector = Detector(config, dims=4, card_prior=prior, channels=2)
        detector.add(streams=2, lanes=3)
        return detector

    reference, interrupted = fresh(), fresh()
    expected = _run_detector(reference, distances, z, deviation, repeat)
    got = _run_detector(interrupted, distances[:40], z[:40], deviation[:40], repeat[:40])
    restored = Detector(config, dims=4, card_prior=prior, channels=2)
    restored.load_state(round_trip(interrupted.state_dict()))
    got += _run_detector(restored, distances[40:], z[40:], deviation[40:], repeat[40:])
    assert any(a.any() for _, a, *_ in expected[40:])  # alerts, refractory and protection are exercised
    # The frozen channel's run, begun before the restore, alerts once after it (its history of repeats is kept).
    assert [t for t, (*_, stuck) in enumerate(expected) if stuck[1]] == [42]
    # Steps count after the restore, so the record is exercised across it.
    assert any((dev > deviation[40 + t, :, 0]).any() for t, (*_, dev) in enumerate(expected[40:]))
    np.testing.assert_equal(got, expected)


def test_past_its_models_training_rows_a_streams_model_statistics_count_for_in_sample_weight_readings():
    config = DetectorConfig(memory=5, stride=2, exclusion=3, horizon=40, short=3, min_count=4, threshold=2.0,
                            refractory=3, prior_weight=10, in_sample_weight=6)  # fmt: skip
    prior = {"signals": ["distance", "novelty", "deviation"], "mean": [0.3, -0.5, 1.0], "var": [0.2, 0.4, 0.5],
             "n": 500}  # fmt: skip
    rng = np.random.default_rng(4)
    n, rows_trained = 90, 50
    # In-sample readings sit low on the model's signals; the model's first unseen ones higher.
    distances = rng.lognormal(size=(n, 1)) * np.where(np.arange(n)[:, None] < rows_trained, 1.0, 2.5)
    z = rng.normal(size=(n, 1, 4))
    deviation = rng.lognormal(size=(n, 1, 2, 1))

    def run(card_prior, cfg=config, upto=n, detector=None):
        if detector is None:
            detector = Detector(cfg, dims=4, card_prior=card_prior)
            detector.add(streams=1, lanes=1)
        out, counts = [], []
        for t in range(int(detector.gate.steps_[0]), upto):  # a restored detector goes on from its clock
            step = detector.step(rows(0), rows(0), rows(0), distances[t], z[t], deviation[t])
            out.append((step.score, step.alert))
            counts.append(detector.stats.count_[0].copy())
        return detector, out, np.array(counts)

    _, plain, plain_counts = run(prior)
    trained = dict(prior, rows=rows_trained)
    _, discounted, counts = run(trained)
    # Identical on the training rows; at the first reading past them the model signals (distance, novelty) count
    # for in_sample_weight values, then grow again by one a reading; deviation keeps its full count.
    np.testing.assert_equal(discounted[:rows_trained], plain[:rows_trained])
    assert (plain_counts[rows_trained - 1, :2] > 6).all()
    np.testing.assert_equal(counts[rows_trained, :2], [7, 7])
    np.testing.assert_equal(counts[rows_trained + 10, :2], [17, 17])
    np.testing.assert_equal(counts[:, 2], plain_counts[:, 2])
    assert any(a[0] != b[0] for a, b in zip(discounted[rows_trained:], plain[rows_trained:]))
    # Off, or no rows on the card: the detector of before.
    _, off, _ = run(trained, dataclasses.replace(config, in_sample_weight=0))
    np.testing.assert_equal(off, plain)
    # Saved before the training rows end and restored, the discount still comes at the same reading.
    detector, first, _ = run(trained, upto=30)
    restored = Detector(config, dims=4, card_prior=trained)
    restored.load_state(npz_round_trip(detector.state_dict()))
    _, rest, _ = run(trained, detector=restored)
    np.testing.assert_equal(first + rest, discounted)


def test_a_model_hand_over_keeps_gate_and_deviation_and_relearns_model_signals_as_replaying_them_would():
    config = DetectorConfig(memory=6, stride=2, exclusion=3, horizon=50, short=3, min_count=5, threshold=1.5,
                            refractory=4, protect=2, prior_weight=0)  # fmt: skip
    rng = np.random.default_rng(4)
    old = Detector(config, dims=4)
    old.add(streams=2, lanes=3)
    for _ in range(30):
        old.step(rows(0, 1), rows(0, 1, 2), rows(0, 0, 1), rng.lognormal(size=3), rng.normal(size=(3, 4)),
                 rng.lognormal(size=(3, 2, 1)))  # fmt: skip
    gate, stats, steps = old.gate.state_dict(), old.stats.state_dict(), old.steps.state_dict()
    assert (gate["scored_"] == 28).all() and np.isfinite(gate["record_"]).all()  # the first 2 have no variance
    # The new model (8 dims) scored lanes 0 and 2's 24 newest readings; lane 1 was not relearnt.
    distance = rng.lognormal(size=(2, 24))
    distance[0, 4] = np.nan  # an unscorable step is skipped
    distance[1, 5:] = np.nan  # lane 2: too few scorable steps to replace the old statistics
    z = rng.normal(size=(2, 24, 8)).astype(np.float32)
    new = old.for_model(8, None)
    new.relearn(rows(0, 2), distance, z)
    for name in ("record_", "scored_", "since_", "hot_", "alerted_"):  # the alert gate carries over
        np.testing.assert_equal(getattr(new.gate, name), gate[name])
    for name in ("peak_", "seen_"):  # and so does the step record
        np.testing.assert_equal(getattr(new.steps, name), steps[name])
    np.testing.assert_equal(new.stats.pos_, stats["pos_"])
    for name in ("count_", "mean_", "var_", "recent_"):  # the stream's own signal and lanes 1, 2: kept as they were
        np.testing.assert_equal(getattr(new.stats, name)[:, config.signals.index("deviation")],
                                stats[name][:, config.signals.index("deviation")])  # fmt: skip
        np.testing.assert_equal(getattr(new.stats, name)[1:], stats[name][1:])
    # Lane 0's model signals: what a fresh detector learns from the same readings (warming: it learns every one).
    replay = Detector(dataclasses.replace(config, min_count=1000), dims=8)
    replay.add(streams=1, lanes=1)
    for t in np.flatnonzero(np.isfinite(distance[0])):
        replay.step(rows(0), rows(0), rows(0), distance[0, [t]], z[0, [t]])
    model = [config.signals.index("distance"), config.signals.index("novelty")]
    assert (replay.stats.count_[0, model] >= 16).all()
    for name in ("count_", "mean_", "var_"):
        np.testing.assert_allclose(getattr(new.stats, name)[0, model], getattr(replay.stats, name)[0, model])
    np.testing.assert_equal(new.memory.ring_[0], replay.memory.ring_[0])
    # The short ring ends with the newest relearnt value where the kept ring writes next.
    newest = (stats["pos_"][0] - 1) % config.short
    assert new.stats.recent_[0, model[0], newest] == pytest.approx(np.log(distance[0, -1] + 1e-6))



def test_a_state_saved_under_a_model_of_other_dims_loads_with_an_empty_memory():
    # A restart with another model of the same inputs but another representation size (a retrained model of
    # another width): everything but the representation memory describes the streams and is kept.
    config = DetectorConfig(memory=6, stride=2, exclusion=3, min_count=5, prior_weight=0)
    rng = np.random.default_rng(5)
    old = Detector(config, dims=4)
    old.add(streams=1, lanes=1)
    for _ in range(20):
        old.step(rows(0), rows(0), rows(0), rng.lognormal(size=1), rng.normal(size=(1, 4)))
    new = Detector(config, dims=8)
    new.load_state(old.state_dict())
    assert new.memory.ring_.shape == (1, 6, 8) and new.memory.written_.tolist() == [0]
    np.testing.assert_equal(new.gate.state_dict()["scored_"], old.gate.scored_)
    np.testing.assert_equal(new.stats.mean_, old.stats.mean_)


# The monitor's lanes on a real multichannel series


@pytest.fixture(scope="module")
def ett():
    """The first 1,200 hours of ETTh1, three channels of different scales."""
    path = data_root() / "ETT" / "ETTh1.csv"
    if not path.is_file():
        pytest.skip(f"real data not found at {path} (set TREP_EDGE_DATA)")
    series = load_csv(path)
    return series.values[:1200, [series.channels.index(c) for c in ETT_CHANNELS]].astype(np.float64)


@pytest.fixture(scope="module")
def independent_engine(univariate_engine):
    """The univariate fixture model run channel by channel, each channel scaled by its own statistics."""
    card = dataclasses.replace(univariate_engine.card, scaling="stream", channel_mode="independent")
    return dataclasses.replace(univariate_engine, card=card)


def _stream(monitor, values, tick_every):
    scored, alerts = [], []
    for t, row in enumerate(values):
        monitor.ingest(Reading("ett", float(T0 + t), dict(zip(ETT_CHANNELS, row.tolist()))))
        if (t + 1) % tick_every == 0 or t == len(values) - 1:
            result = monitor.tick(T0 + t)
            scored += result.scored
            alerts += result.alerts
    return scored, alerts


def test_streaming_equals_offline_for_a_stream_scaled_channel_independent_model(ett, independent_engine):
    detector = DetectorConfig(threshold=3.0, refractory=20)  # some alerts fire
    expected = detect_recording(independent_engine, ett, detector)
    assert expected.alerts.sum() >= 3
    scored, _ = _stream(Monitor(independent_engine, detector=detector), ett, tick_every=37)
    assert [s.step for s in scored] == list(range(T0, T0 + len(ett)))
    np.testing.assert_array_equal([s.raw for s in scored], expected.raw)
    np.testing.assert_array_equal([s.score for s in scored], expected.score)
    np.testing.assert_array_equal([s.alert for s in scored], expected.alerts)
    np.testing.assert_array_equal([s.warming for s in scored], expected.warming)
    assert [s.channel for s in scored] == [ETT_CHANNELS[k] if k >= 0 else "" for k in expected.lane]


def test_a_fault_in_one_channel_alerts_and_names_that_channel(ett, independent_engine):
    values = ett[:820].astype(np.float32)  # the monitor keeps readings as float32: so does the expected alert
    values[800:803, 1] += 30 * values[:, 1].std()  # a 3-hour spike in MUFL only
    detector = DetectorConfig(min_count=50, scale_warmup=50, prior_weight=0)
    scored, alerts = _stream(Monitor(independent_engine, detector=detector), values, tick_every=50)
    # Real ETT has its own surprises before the fault (the benchmark counts those); the fault's alert is the point.
    assert [(s.step - T0, s.channel) for s in scored if s.alert][-1] == (800, "MUFL")
    raised = next(a for a in alerts if a.state == "raised" and a.window_end == T0 + 800)
    assert (raised.state, raised.channel, raised.window_end) == ("raised", "MUFL", T0 + 800)
    assert raised.values == dict(zip(ETT_CHANNELS, values[800].tolist()))


# RestRecord: a channel at rest by nature


def _still_levels(config, x, restore_at=None):
    """The judged deviation of each reading of one single-channel lane fed ``x`` (128-reading windows), the
    detector's state saved and restored into a new one before reading ``restore_at``."""
    detector = Detector(config, dims=4)
    detector.add(streams=1, lanes=1)
    one, rng = rows(0), np.random.default_rng(0)
    out = np.full(len(x), np.nan)
    for t in range(127, len(x)):
        if t == restore_at:
            saved, detector = detector.state_dict(), Detector(config, dims=4)
            detector.load_state(npz_round_trip(saved))
        w = x[None, t - 127 : t + 1, None]
        step = detector.step(one, one, one, rng.lognormal(size=1), rng.normal(size=(1, 4)), window_deviation(w),
                             window_repeats(w), w[:, -1])  # fmt: skip
        out[t] = step.deviation[0, 0]
    return out


REST = DetectorConfig(signals=("deviation",), seasonal_gain=0, seasonal_fit=0, rest_ratio=1.5)
"""The rest record alone: blips exactly every 300 readings would make a scheduled channel (``seasonal_fit``)."""


def test_a_channel_at_rest_reads_a_blip_like_its_last_ones_as_ordinary_and_a_larger_one_plainly():
    x = np.zeros(4000)
    blips = np.arange(300, 4000, 300)
    x[blips] = 4.0
    x[blips[-1]] = 12.0  # three times any blip before
    rest, plain = _still_levels(REST, x), _still_levels(REST.with_overrides("rest_ratio=0"), x)
    assert np.all(plain[blips] >= 4000)  # a still window's scale is 1e-3 at 0: every blip reads thousands
    # At rest once 1,000 pairs of readings are history (the fifth blip): the first then sets the record, the next
    # read as ordinary (the same size), the last, a record, plainly.
    at_rest = blips[blips > 1300][:-1]
    assert plain[at_rest[0]] == rest[at_rest[0]]
    np.testing.assert_allclose(rest[at_rest[1:]], 1.0)
    assert rest[blips[-1]] == plain[blips[-1]] >= 12_000
    # The record and the run survive a save and restore between two blips.
    np.testing.assert_array_equal(_still_levels(REST, x, restore_at=2000), rest)


def test_a_noisy_channel_frozen_then_resuming_is_not_at_rest():
    x = np.random.default_rng(1).normal(0.0, 1.0, 3000)
    x[1500:1800] = x[1499]  # a frozen sensor, then resuming
    rest, plain = _still_levels(REST, x), _still_levels(REST.with_overrides("rest_ratio=0"), x)
    np.testing.assert_array_equal(rest, plain)
    assert plain[1800] > 100  # the first reading after the freeze reads far out of the still window


# RangeRecord: a reading beyond everything its channel has read


def test_a_reading_leaves_its_range_only_by_a_jump_past_the_tolerance():
    record = RangeRecord(channels=2, tol=0.1, n_streams=1)
    lane = rows(0)

    def beyond(a: float, b: float) -> bool:
        return bool(record.beyond(lane, np.array([[a, b]]))[0])

    assert not beyond(0.0, 5.0)  # nothing read yet
    assert not beyond(1.0, 5.0)  # the second channel has not moved: nothing to leave
    assert not any(beyond(1.0 + 0.05 * k, 5.0) for k in range(1, 200))  # a climb, step by step, never leaves
    assert beyond(13.0, 5.0)  # 10.95 at most, 0.1 of 10.95 over it: 12.045
    assert not beyond(11.0, 5.0) and not beyond(np.nan, 5.0)  # inside now; a missing reading leaves nothing
    assert not beyond(5.0, 5.2) and beyond(5.0, 5.3)  # the other channel moves, then leaves: any channel counts
    assert not beyond(-1.0, 5.0)  # 1 below the lowest, within 0.1 of the range of 13
    assert record.lo_.tolist() == [[-1.0, 5.0]] and record.hi_.tolist() == [[13.0, 5.3]]
    young = RangeRecord(channels=1, tol=0.1, least=3, n_streams=1)  # a range of too few readings is not left
    assert [bool(young.beyond(lane, np.array([[v]]))[0]) for v in (0.0, np.nan, 1.0, 5.0, 9.0)] == [False] * 4 + [True]


def _range_run(config, x, restore_at=None):
    """The alerts, surprises, scores and range alerts of one single-channel lane fed readings ``x`` with plain
    distances and representations, the detector's state saved and restored into a new one before reading
    ``restore_at``."""
    detector = Detector(config, dims=2)
    detector.add(streams=1, lanes=1)
    one, rng = rows(0), np.random.default_rng(5)
    alerts, ranged, surprise, score = [], [], np.full(len(x), np.nan), np.full(len(x), np.nan)
    for t in range(len(x)):
        if t == restore_at:
            saved, detector = detector.state_dict(), Detector(config, dims=2)
            detector.load_state(npz_round_trip(saved))
        out = detector.step(one, one, one, rng.lognormal(size=1), rng.normal(size=(1, 2)), None, None,
                            x[None, t : t + 1])  # fmt: skip
        alerts += [t] * bool(out.alert[0])
        ranged += [t] * bool(out.ranged[0])
        surprise[t], score[t] = out.surprise[0], out.score[0]
    return alerts, surprise, score, detector, ranged


def test_a_reading_beyond_its_channels_range_alerts_whatever_its_score_outside_the_refractory_period():
    config = DetectorConfig(signals=("distance", "novelty"), min_count=50, range_tol=0.1)
    x = np.random.default_rng(4).uniform(0.0, 1.0, 900)
    x[20] = 5.0  # during warm-up: it alerts nothing, and widens the range all the same
    x[400] = 5.6  # beyond 5.5
    x[450] = 6.5  # beyond again, inside the refractory period of the last alert
    x[700] = 7.3  # beyond 6.5 + 0.65
    x[800] = 7.9  # within 0.73 of the range it made
    alerts, surprise, score, detector, ranged = _range_run(config, x)
    assert ranged == [400, 700]  # the alerts name their cause
    off = _range_run(config.with_overrides("range_tol=0"), x)[0]
    assert sorted(set(alerts) - set(off)) == [400, 700] and set(off) <= set(alerts)
    assert surprise[400] < config.threshold and surprise[700] < config.threshold  # the signals read them as ordinary
    # The score says what the gate decided: the committed threshold over the scores counts exactly the alerts.
    assert np.flatnonzero(score >= config.threshold).tolist() == alerts
    assert score[400] == config.threshold and score[700] == config.threshold
    assert detector.range.hi_.tolist() == [[7.9]]
    # Save and restore mid-stream equals an uninterrupted run; a checkpoint saved before the range starts it fresh.
    assert _range_run(config, x, restore_at=600)[0] == alerts
    old = {k: v for k, v in detector.state_dict().items() if not k.startswith("range/")}
    fresh = Detector(config, dims=2)
    fresh.load_state(old)
    assert fresh.range.hi_.tolist() == [[-np.inf]]


# a gap the windows restart after (Detector.resume)


def test_a_resumed_gate_runs_on_as_over_missing_steps_and_warms_up_again():
    def gate():
        return AlertGate(threshold=1.0, min_count=3, refractory=50, protect=10, record_decay=0.01, peaks=2,
                         peak_decay=0.005, budget=1.0, budget_span=100, budget_cost=1.0, schedule=2, quiet=0.5,
                         quiet_after=2, n_streams=1)  # fmt: skip

    over, resumed = gate(), gate()
    for score in [0.5, 0.2, 3.0, 0.1, 0.7, 6.0, 6.5]:  # ends inside a run at or above the threshold
        for g in (over, resumed):
            g.decide(rows(0), np.array([score]))
    for _ in range(40):
        over.decide(rows(0), np.array([np.nan]))  # the gap's missing steps, as a filled gap brings them
    resumed.resume(rows(0), rows(40))
    for name in ("record_", "peaks_", "spent_", "since_", "steps_", "times_", "last_", "best_", "run_", "hot_",
                 "alerted_"):
        np.testing.assert_allclose(getattr(resumed, name), getattr(over, name), rtol=1e-12, err_msg=name)
    assert np.isfinite(resumed.peaks_).all()  # the run going on when the gap began ended there and is remembered
    assert over.scored_.tolist() == [7] and resumed.scored_.tolist() == [0]  # only the warm-up starts again
    assert [bool(resumed.decide(rows(0), np.array([0.1]))[1][0]) for _ in range(4)] == [True, True, False, False]


def test_a_resumed_lane_keeps_what_it_learnt_of_the_sensor_and_starts_again_what_it_read_off_the_model():
    config = DetectorConfig(min_count=20, min_warmup=1, prior_weight=0, memory=8, stride=1, exclusion=1)
    rng = np.random.default_rng(5)
    detector = Detector(config, dims=2)
    detector.add(streams=2, lanes=2)
    for t in range(60):
        parts = rng.normal(1.0, 0.2, (2, 2, 1))
        parts[1] = np.nan if t < 50 else parts[1]  # lane 1's window gives a deviation only for its last 10 readings
        detector.step(rows(0, 1), rows(0, 1), rows(0, 1), rng.lognormal(size=2), rng.normal(size=(2, 2)), parts,
                      np.zeros((2, 1)))  # fmt: skip
    deviation = config.signals.index("deviation")
    before = {name: getattr(detector.stats, name).copy() for name in ("count_", "mean_", "var_")}
    assert before["count_"][:, deviation].tolist() == [60, 10] and (detector.memory.written_ > 0).all()
    detector.resume(rows(0, 1), rows(0, 1), rows(0, 1), rows(5, 500))
    for name, value in before.items():  # lane 0's deviation statistics are kept
        np.testing.assert_array_equal(getattr(detector.stats, name)[0, deviation], value[0, deviation])
    model = [k for k, s in enumerate(config.signals) if s != "deviation"]
    assert (detector.stats.count_[0, model] == 0).all()  # the model signals' start again (no prior here)
    assert (detector.stats.count_[1] == 0).all()  # and lane 1's deviation, from 10 values, too
    assert (detector.memory.written_ == 0).all() and (detector.stats.judged_ == 0).all()
    assert np.isnan(detector.stats.recent_).all()
    assert detector.gate.steps_.tolist() == [65, 560] and detector.gate.scored_.tolist() == [0, 0]
