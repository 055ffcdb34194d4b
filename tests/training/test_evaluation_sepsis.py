"""Sepsis protocol glue: 6-hour windows labelled by their last hour, normalisation, patient-level splits."""
from __future__ import annotations

import numpy as np

from trep_edge.training.evaluation import sepsis


def _cohort(septic: list[bool], hours: int = 10, channels: int = 2) -> sepsis.SepsisCohort:
    x = np.random.default_rng(0).normal(size=(len(septic), hours, channels)).astype(np.float32)
    labels = np.zeros((len(septic), hours), dtype=bool)
    labels[np.array(septic), -3:] = True
    return sepsis.SepsisCohort(x, labels, np.array([f"p{i}" for i in range(len(septic))]))


def test_windows_take_the_label_of_their_last_hour_and_skip_padding_ends():
    x = np.arange(20, dtype=np.float32).reshape(1, 10, 2)
    x[0, :2] = np.nan  # a short stay: the first two hours are padding
    labels = np.zeros((1, 10), dtype=bool)
    labels[0, 7:] = True
    w, y = sepsis.windows(x, labels, hours=6)
    assert w.shape == (5, 6, 2)  # windows ending at hours 5..9
    assert y.tolist() == [False, False, True, True, True]
    np.testing.assert_array_equal(w[-1], x[0, 4:10])
    late_pad = x.copy()
    late_pad[0, 9] = np.nan
    assert len(sepsis.windows(late_pad, labels, hours=6)[1]) == 4


def test_normalise_fills_unmeasured_values_but_keeps_padding_hours_missing():
    cohort = _cohort([True, False])
    cohort.x[0, 0] = np.nan  # padding hour
    cohort.x[1, 3, 1] = np.nan  # a value never measured so far
    x_train, x_other = sepsis.normalise(cohort, cohort)
    assert np.isnan(x_train[0, 0]).all()
    assert x_train[1, 3, 1] == 0.0
    assert np.isnan(x_train).sum() == 2
    np.testing.assert_array_equal(np.isnan(x_train), np.isnan(x_other))


def test_patient_split_is_disjoint_and_stratified():
    cohort = _cohort([True] * 10 + [False] * 30)
    train, test = sepsis.split_patients(cohort, 0.5, np.random.default_rng(0))
    assert not set(train.ids) & set(test.ids)
    assert len(train.ids) + len(test.ids) == 40
    assert test.septic.sum() == 5 and train.septic.sum() == 5


def test_sample_has_the_requested_septic_share():
    cohort = _cohort([True] * 20 + [False] * 80)
    sample = sepsis.sample_patients(cohort, 40, 0.5, np.random.default_rng(0))
    assert len(sample.ids) == 40 and sample.septic.sum() == 20 and len(set(sample.ids)) == 40


def test_raw_features_flatten_the_window_with_padding_as_zero():
    w = np.ones((3, 6, 2), dtype=np.float32)
    w[0, 0] = np.nan
    f = sepsis.raw_features(w)
    assert f.shape == (3, 12) and f[0, :2].tolist() == [0.0, 0.0]
