"""Forecasting protocol glue: ridge recovers a linear series, samples stay in their split, encoding is causal."""
from __future__ import annotations

import numpy as np
import torch

from trep_edge.training.encoder import EncoderConfig, TRepEncoder
from trep_edge.training.evaluation import forecasting


def test_ett_splits_are_twelve_four_four_months():
    h = forecasting.ett_splits("ETTh1")
    assert (h.train_end, h.valid_end, h.test_end) == (8640, 11520, 14400)
    m = forecasting.ett_splits("ETTm2")
    assert (m.train_end, m.valid_end, m.test_end) == (4 * 8640, 4 * 11520, 4 * 14400)


def test_samples_have_their_targets_inside_the_split():
    values = np.arange(100, dtype=np.float32).reshape(-1, 1)
    features = values.astype(np.float64)
    x, y = forecasting.forecast_samples(features, values, 40, 60, horizon=5, drop=3)
    assert x[:, 0].tolist() == list(range(43, 55))
    assert y[0].tolist() == [44, 45, 46, 47, 48]
    assert y.max() == 59  # the last target is the split's last step


def test_ridge_recovers_a_linear_series_with_near_zero_error():
    t = np.arange(600, dtype=np.float64)
    values = (0.01 * t - 3).reshape(-1, 1)
    features = np.column_stack([values[:, 0], np.sin(t)])  # the value itself plus an irrelevant feature
    train = forecasting.forecast_samples(features, values, 0, 400, 24)
    valid = forecasting.forecast_samples(features, values, 400, 500, 24)
    test = forecasting.forecast_samples(features, values, 500, 600, 24)
    path, alpha = forecasting.fit_ridge(train, valid)
    assert alpha == min(forecasting.ALPHAS)
    assert np.mean((path.predict(test[0], alpha) - test[1]) ** 2) < 1e-4


def test_ridge_path_matches_the_closed_form_with_intercept():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 4)), rng.normal(size=(50, 3))
    xc, yc = x - x.mean(0), y - y.mean(0)
    coef = np.linalg.solve(xc.T @ xc + 2.0 * np.eye(4), xc.T @ yc)
    expected = (x - x.mean(0)) @ coef + y.mean(0)
    np.testing.assert_allclose(forecasting.RidgePath(x, y).predict(x, 2.0), expected, atol=1e-10)


def test_a_representation_never_sees_a_value_after_its_step():
    torch.manual_seed(0)
    encoder = TRepEncoder(EncoderConfig(input_dims=2, repr_dims=8, hidden_dims=8, depth=2, time_embedding_dims=4))
    rng = np.random.default_rng(1)
    values = rng.normal(size=(80, 2)).astype(np.float32)
    z = forecasting.causal_representations(encoder, values, window=16)
    changed = values.copy()
    changed[50:] = rng.normal(size=(30, 2)) * 100
    z_changed = forecasting.causal_representations(encoder, changed, window=16)
    np.testing.assert_array_equal(z[:50], z_changed[:50])
    assert not np.allclose(z[50:], z_changed[50:])
