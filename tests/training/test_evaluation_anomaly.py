"""The streaming anomaly protocol glue: ADF differencing, train statistics, windows with real past, F1 on a spike."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trep_edge.runtime.core.offline import raw_scores
from trep_edge.runtime.core.preprocess import fit_normalisation
from trep_edge.training.encoder import EncoderConfig, TRepEncoder
from trep_edge.training.evaluation import anomaly


def _case(values: np.ndarray, train_end: int, labelled: slice | None = None) -> anomaly.AnomalyCase:
    labels = np.zeros(len(values), dtype=bool)
    if labelled is not None:
        labels[labelled] = True
    return anomaly.AnomalyCase("synthetic", values.astype(np.float32), labels, train_end)


class LastValueEngine:
    """Scores each step by |x_t|: the 'unmasked' representation is the last value, the 'masked' one 0."""

    card = SimpleNamespace(window=8, repr_dims=1, phase_origin=0)

    def last_step_pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        last = np.nan_to_num(windows[:, -1, :])
        return last, np.zeros_like(last)


def test_adf_differences_a_random_walk_once_and_white_noise_never():
    rng = np.random.default_rng(0)
    walk = anomaly.prepare_case(_case(np.cumsum(rng.normal(size=1500)), 1000))
    noise = anomaly.prepare_case(_case(rng.normal(size=1500), 1000))
    assert walk.differencing == 1
    assert noise.differencing == 0


def test_prepared_train_part_has_zero_mean_unit_std_and_test_part_uses_train_statistics():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(5, 2, 1000), rng.normal(50, 2, 500)])
    p = anomaly.prepare_case(_case(values, 1000))
    train, test = p.values[:1000, 0], p.values[1000:, 0]
    assert abs(train.mean()) < 1e-4 and abs(train.std() - 1) < 1e-3
    assert test.mean() > 15  # a shift the test statistics would have hidden


def test_scored_region_is_the_whole_test_part_or_a_window_around_the_labels():
    case = _case(np.zeros(10_000), 2000, slice(7000, 7100))
    assert anomaly.scored_region(case, None) == (2000, 10_000)
    lo, hi = anomaly.scored_region(case, 1000)
    assert hi - lo == 1000 and lo <= 7000 and hi >= 7100 and lo >= 2000
    late = _case(np.zeros(10_000), 2000, slice(9950, 10_000))
    assert anomaly.scored_region(late, 1000) == (9000, 10_000)


def test_scores_of_a_slice_equal_those_of_the_whole_stream():
    torch.manual_seed(0)
    encoder = TRepEncoder(EncoderConfig(input_dims=1, repr_dims=8, hidden_dims=8, depth=2, time_embedding_dims=4))
    rng = np.random.default_rng(2)
    p = anomaly.prepare_case(_case(rng.normal(size=400), 200))
    engine = anomaly.engine_for(encoder, {"time_index": "relative"}, p, window=16, z=5)
    whole = raw_scores(engine, p.values)
    part, first = anomaly.raw_scores_between(engine, p.values, 300, 360, history=5)
    assert first == 295
    np.testing.assert_allclose(part, whole[295:360], rtol=1e-5, atol=1e-6)


def test_a_spike_is_detected_with_f1_one_and_nothing_else_alerts():
    rng = np.random.default_rng(3)
    values = (1 + 0.01 * rng.normal(size=3000)).astype(np.float32)
    values[2500:2505] = 10
    case = _case(values, 2000, slice(2500, 2505))
    prepared = anomaly.PreparedCase(case, values.reshape(-1, 1), 0, fit_normalisation(values[:2000, None]))
    result = anomaly.evaluate_case(LastValueEngine(), prepared, beta=4.0, z=21)
    for delay in (3, 7):
        assert result[f"delay{delay}"]["f1"] == pytest.approx(1.0)
        assert result[f"delay{delay}"]["tp"] == 5 and result[f"delay{delay}"]["fp"] == 0
    assert anomaly.summarise([result, result])["delay7"]["tp"] == 10
    assert result["max_adjusted_in_labels"] > result["threshold"] > result["max_adjusted_elsewhere"]


def test_training_array_stacks_only_the_train_parts():
    rng = np.random.default_rng(4)
    a = anomaly.prepare_case(_case(rng.normal(size=300), 200))
    b = anomaly.prepare_case(_case(rng.normal(size=100), 50))
    x = anomaly.training_array([a, b])
    assert x.shape == (2, 200, 1)
    assert np.isnan(x[1, 50:]).all() and not np.isnan(x[1, :50]).any()


def test_yahoo_cases_train_on_the_first_half_of_each_series(tmp_path):
    folder = tmp_path / "A1Benchmark"
    folder.mkdir()
    rows = "\n".join(f"{t},{float(t % 7)},{int(t == 15)}" for t in range(1, 21))
    (folder / "real_1.csv").write_text("timestamp,value,is_anomaly\n" + rows + "\n")
    (case,) = anomaly.yahoo_cases(tmp_path)
    assert case.name == "A1Benchmark/real_1" and case.train_end == 10
    assert case.labels.sum() == 1 and case.labels[14]
