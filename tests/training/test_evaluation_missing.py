"""Missing-data protocol: the removed fraction is exact per series and nothing else changes."""
from __future__ import annotations

import numpy as np
import pytest

from trep_edge.training.evaluation.classification import ClassificationData
from trep_edge.training.evaluation.missing import FRACTIONS, remove_timesteps, with_missing


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_exactly_the_requested_fraction_of_timesteps_is_removed(fraction):
    x = np.random.default_rng(0).normal(size=(5, 40, 3)).astype(np.float32)
    out = remove_timesteps(x, fraction, np.random.default_rng(1))
    removed = np.isnan(out).all(axis=-1)
    assert (removed.sum(axis=1) == round(fraction * 40)).all()
    assert (np.isnan(out).any(axis=-1) == removed).all()  # whole timesteps, every channel
    np.testing.assert_array_equal(out[~removed], x[~removed])
    assert not np.isnan(x).any()  # the input is untouched


def test_padding_of_unequal_length_series_is_not_counted():
    x = np.ones((1, 20, 1), dtype=np.float32)
    x[0, 10:] = np.nan
    out = remove_timesteps(x, 0.5, np.random.default_rng(0))
    assert np.isnan(out[0, :10]).sum() == 5


def test_both_splits_lose_timesteps_and_labels_are_kept():
    data = ClassificationData("toy", np.ones((4, 10, 2)), np.arange(4), np.ones((3, 10, 2)), np.arange(3))
    holed = with_missing(data, 0.3, seed=0)
    assert np.isnan(holed.x_train).all(axis=-1).sum() == 12 and np.isnan(holed.x_test).all(axis=-1).sum() == 9
    assert holed.y_train.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="fraction"):
        remove_timesteps(data.x_train, 1.0, np.random.default_rng(0))
