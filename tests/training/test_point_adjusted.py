import numpy as np
import pytest

from trep_edge.training.evaluation.point_adjusted import aggregate_f1, point_adjust_f1

#                  0  1  2  3  4  5  6  7  8  9 10
LABELS = np.array([0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0], dtype=bool)  # segments [2, 6) and [8, 10)


def alerts_at(*positions, n=LABELS.size):
    alerts = np.zeros(n, dtype=bool)
    alerts[list(positions)] = True
    return alerts


def test_alert_at_the_delay_th_point_of_a_segment_detects_all_of_it():
    # delay=1: the first delay+1 = 2 points of [2, 6) are 2 and 3.
    r = point_adjust_f1(alerts_at(3), LABELS, delay=1)
    assert (r["tp"], r["fp"], r["fn"]) == (4, 0, 2)
    assert r["precision"] == 1.0 and r["recall"] == pytest.approx(4 / 6)


def test_alert_one_point_later_misses_the_segment_and_is_not_a_false_positive():
    r = point_adjust_f1(alerts_at(4, 5), LABELS, delay=1)
    assert r == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "tp": 0, "fp": 0, "fn": 6}


def test_delay_zero_counts_only_the_first_point():
    assert point_adjust_f1(alerts_at(2), LABELS, delay=0)["tp"] == 4
    assert point_adjust_f1(alerts_at(3), LABELS, delay=0)["tp"] == 0


def test_false_positives_count_alerted_unlabelled_points():
    r = point_adjust_f1(alerts_at(0, 1, 8, 10), LABELS, delay=7)
    assert (r["tp"], r["fp"], r["fn"]) == (2, 3, 4)
    assert r["precision"] == pytest.approx(2 / 5)
    assert r["recall"] == pytest.approx(2 / 6)
    assert r["f1"] == pytest.approx(2 * (2 / 5) * (2 / 6) / (2 / 5 + 2 / 6))


def test_segments_touching_the_series_ends():
    labels = np.array([1, 1, 0, 0, 1, 1, 1], dtype=bool)
    r = point_adjust_f1(np.array([0, 1, 0, 0, 0, 0, 1], dtype=bool), labels, delay=1)
    assert (r["tp"], r["fp"], r["fn"]) == (2, 0, 3)
    r = point_adjust_f1(np.array([0, 0, 0, 0, 0, 1, 0], dtype=bool), labels, delay=1)
    assert (r["tp"], r["fp"], r["fn"]) == (3, 0, 2)


def test_no_labels_and_no_alerts_gives_zeros_not_nan():
    r = point_adjust_f1(np.zeros(5, dtype=bool), np.zeros(5, dtype=bool), delay=7)
    assert r == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "tp": 0, "fp": 0, "fn": 0}


def test_aggregate_sums_counts_before_the_ratios():
    a = point_adjust_f1(alerts_at(3), LABELS, delay=1)  # tp 4, fn 2
    b = point_adjust_f1(alerts_at(0, 8), LABELS, delay=1)  # tp 2, fp 1, fn 4
    r = aggregate_f1([a, b])
    assert (r["tp"], r["fp"], r["fn"]) == (6, 1, 6)
    assert r["precision"] == pytest.approx(6 / 7) and r["recall"] == pytest.approx(6 / 12)
    assert r["f1"] == pytest.approx(12 / 19)
    assert r["f1"] != pytest.approx((a["f1"] + b["f1"]) / 2)


def test_point_adjust_matches_a_plain_loop_on_random_series():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        labels = rng.random(n) < rng.random()
        alerts = rng.random(n) < 0.2
        delay = int(rng.integers(0, 5))
        tp = fp = fn = 0
        t = 0
        while t < n:
            if not labels[t]:
                fp += int(alerts[t])
                t += 1
                continue
            end = t
            while end < n and labels[end]:
                end += 1
            hit = alerts[t : min(t + delay + 1, end)].any()
            tp, fn = tp + (end - t) * hit, fn + (end - t) * (not hit)
            t = end
        r = point_adjust_f1(alerts, labels, delay)
        assert (r["tp"], r["fp"], r["fn"]) == (tp, fp, fn)


def test_rejects_mismatched_lengths_and_negative_delay():
    with pytest.raises(ValueError, match="same length"):
        point_adjust_f1(np.zeros(3, dtype=bool), np.zeros(4, dtype=bool), delay=1)
    with pytest.raises(ValueError, match="delay"):
        point_adjust_f1(np.zeros(3, dtype=bool), np.zeros(3, dtype=bool), delay=-1)
