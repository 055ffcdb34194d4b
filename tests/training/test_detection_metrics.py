"""The detection benchmark's metrics on hand-made cases whose answers are known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from trep_edge.training.evaluation import detection_metrics as dm

T = 1000  # probation: 150 rows; one event -> window of 100 rows centred on its onset


def alerts_at(*rows: int, length: int = T) -> np.ndarray:
    out = np.zeros(length, dtype=bool)
    out[list(rows)] = True
    return out


def test_scaled_sigmoid_matches_the_published_curve():
    assert dm.scaled_sigmoid(0.0) == pytest.approx(0.0)
    assert dm.scaled_sigmoid(-1.0) == pytest.approx(2 / (1 + math.exp(-5)) - 1)  # 0.9866
    assert dm.scaled_sigmoid(3.0) == pytest.approx(-1.0, abs=1e-6)


def test_windows_are_centred_on_the_onset_cover_the_segment_and_merge():
    assert dm.nab_windows(T, [(500, 500)]) == [(450, 550)]
    assert dm.nab_windows(T, [(500, 600)]) == [(450, 600)]  # widened to cover the labelled segment
    assert dm.nab_windows(T, [(500, 500), (520, 520)]) == [(475, 545)]  # two 50-row windows overlap: merged


def test_never_alerting_scores_zero_and_perfect_scores_one_hundred():
    events = [[(500, 500)], [(300, 300), (800, 800)]]
    silent = [np.zeros(T, dtype=bool)] * 2
    assert dm.nab_score(silent, events) == pytest.approx(0.0)
    perfect = [alerts_at(450), alerts_at(275, 775)]  # the first row of every window
    assert dm.nab_score(perfect, events) == pytest.approx(100.0)


def test_only_the_first_detection_in_a_window_counts():
    once = dm.nab_stream(alerts_at(460), [(500, 500)])
    many = dm.nab_stream(alerts_at(460, 470, 540), [(500, 500)])
    assert once.raw == many.raw == pytest.approx(float(dm.scaled_sigmoid(-(550 - 460) / 100)))
    assert dm.nab_parts(alerts_at(460, 470, 540), [(500, 500)]).detected == [(0, 460)]  # the window, its first row


def test_a_false_alarm_costs_a_fp_before_any_window_and_less_just_after_one():
    before = dm.nab_stream(alerts_at(300), [(500, 500)])
    assert before.raw == pytest.approx(-0.11 - 1.0)  # the false alarm plus the missed window
    after = dm.nab_stream(alerts_at(560), [(500, 500)])
    assert after.raw == pytest.approx(0.11 * float(dm.scaled_sigmoid(10 / 100)) - 1.0)
    assert -0.11 - 1.0 < after.raw < -1.0  # just after a window the penalty is smaller than A_FP


def test_probation_rows_never_count():
    assert dm.probation(T) == 150 and dm.probation(100_000) == 750
    early = dm.nab_stream(alerts_at(100), [(500, 500)])
    assert early.raw == pytest.approx(-1.0)  # the alert in probation is ignored; the window is missed


def test_profiles_weigh_false_alarms_and_misses_as_published():
    fp_and_miss = alerts_at(300)
    assert dm.nab_stream(fp_and_miss, [(500, 500)], "reward_low_FP").raw == pytest.approx(-0.22 - 1.0)
    assert dm.nab_stream(fp_and_miss, [(500, 500)], "reward_low_FN").raw == pytest.approx(-0.11 - 2.0)


def test_stream_without_events_only_pays_for_false_alarms():
    counts = dm.nab_stream(alerts_at(300, 400), [])
    assert (counts.raw, counts.null, counts.perfect) == (pytest.approx(-0.22), 0.0, 0.0)


def test_tuned_threshold_finds_the_score_that_separates():
    score = np.zeros(T)
    score[460] = 5.0  # inside the window
    score[300] = 3.0  # outside: a good threshold lies between
    value, threshold = dm.tuned_nab([score], [[(500, 500)]])
    assert 3.0 < threshold <= 5.0
    assert value == pytest.approx(dm.nab_score([alerts_at(460)], [[(500, 500)]]))


def test_event_f1_counts_found_missed_false_alarms_and_delay():
    stats = dm.event_f1([alerts_at(510, 300), alerts_at(700)], [[(500, 500)], [(400, 400)]])
    assert (stats["found"], stats["missed"], stats["false_alarms"]) == (1, 1, 2)
    assert stats["precision"] == pytest.approx(1 / 3) and stats["recall"] == pytest.approx(0.5)
    assert stats["mean_delay"] == 10
    assert dm.false_alarms_per_1000([alerts_at(300)], [[(500, 500)]]) == pytest.approx(1000 / 850)


def test_probation_alerts_count_only_the_first_15_percent_per_stream():
    # T = 1000 rows: probation is rows 0..149.
    assert dm.probation_alerts([alerts_at(0, 149, 150, 900), alerts_at(10)]) == pytest.approx(1.5)
    assert dm.probation_alerts([alerts_at(150)]) == 0.0 and dm.probation_alerts([]) == 0.0


def test_ucr_top1_is_the_argmax_of_the_test_part_within_a_hundred_rows():
    score = np.zeros(T)
    score[100] = 9.0  # in the train part: ignored
    score[640] = 5.0
    assert dm.ucr_top1(score, test_start=200, segment=(500, 540))
    assert not dm.ucr_top1(score, test_start=200, segment=(800, 820))
    assert not dm.ucr_top1(np.full(T, np.nan), test_start=200, segment=(500, 540))


def test_nab_interval_bootstraps_the_streams_and_pairs_two_detectors_on_the_same_draws():
    events = [[(500, 500)]] * 8
    found, silent = alerts_at(450), alerts_at()  # a detection at a window's start: 100 on its own; never alerting: 0
    # Every stream alike: every draw gives the corpus's own score.
    assert dm.nab_interval([found] * 8, events) == pytest.approx((100.0, 100.0))
    # Half the streams found: draws range from none found to all found, around the corpus's 50.
    mixed = [found, silent] * 4
    low, high = dm.nab_interval(mixed, events, draws=4000)
    assert dm.nab_score(mixed, events) == pytest.approx(50.0)
    assert 0.0 <= low < 50.0 < high <= 100.0
    # Paired: a detector against itself moves by exactly 0 on every draw; one that finds every window beats the mixed
    # one on every draw that holds a silent stream (all but 1 in 256), and never loses.
    assert dm.nab_interval(mixed, events, baseline=mixed) == (0.0, 0.0)
    low, high = dm.nab_interval([found] * 8, events, baseline=mixed)
    assert 0.0 < low <= high <= 100.0
    # A false alarm on a fault-free stream costs on every draw that holds it, so the interval lies below the score.
    quiet_events = [[(500, 500)], []]
    low, high = dm.nab_interval([found, alerts_at(900)], quiet_events, draws=4000)
    assert low < 100.0 and high == pytest.approx(100.0)
    with pytest.raises(ValueError, match="level"):
        dm.nab_interval(mixed, events, level=1.0)
    with pytest.raises(ValueError, match="baseline has 1 streams"):
        dm.nab_interval(mixed, events, baseline=[found])
