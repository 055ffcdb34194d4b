"""Preprocessing shared by training, offline scoring and the daemon."""
import numpy as np
import pytest

from trep_edge.runtime.preprocess import difference, fit_normalisation, forward_fill

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
    with pytest.raises(ValueError, match="no observed value"):
        fit_normalisation(np.array([[1, nan], [2, nan]], dtype=np.float32))
