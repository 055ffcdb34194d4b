"""A series' cycle from its autocorrelation, and ``trep-edge train --time-index auto``."""
import json

import numpy as np
from trep_edge.cli import main
from trep_edge.training.period import auto_time_index, find_period
from trep_edge.training.trainer import read_checkpoint

TINY = ["--iterations", "2", "--depth", "2", "--hidden-dims", "8", "--repr-dims", "4", "--no-progress"]


def _cycle(period: int, n: int = 600, noise: float = 0.2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sin(2 * np.pi * np.arange(n) / period) + noise * rng.normal(size=n)


def test_a_noisy_cycle_is_found_at_its_length_and_noise_has_none():
    assert find_period([_cycle(24)]) == 24
    assert find_period([_cycle(96, n=750)]) == 96
    assert find_period([np.random.default_rng(1).normal(size=600)]) == 0


def test_a_cycle_longer_than_pmax_or_half_the_series_is_not_looked_for():
    assert find_period([_cycle(96, n=750)], pmax=90) == 0
    assert find_period([_cycle(96, n=150)]) == 0  # 96 > 150 // 2


def test_missing_readings_are_dropped_and_too_few_or_constant_readings_give_none():
    x = _cycle(24)
    x[::50] = np.nan
    assert find_period([x]) in (23, 24)  # closing up 12 gaps shortens some cycles by a reading
    assert find_period([_cycle(24, n=40)]) == 0
    assert find_period([np.ones(600)]) == 0
    assert find_period([]) == 0


def test_channels_vote_by_their_mean_autocorrelation():
    noise = np.random.default_rng(2).normal(size=600)
    assert find_period([_cycle(24), _cycle(24, seed=3)]) == 24
    # One cycling channel of four: its peak (about 0.9) averages to about 0.23, under the bar of 0.3.
    assert find_period([_cycle(24), noise, noise[::-1], np.roll(noise, 7)]) == 0


def test_auto_time_index_names_the_convention():
    x = np.stack([_cycle(24), _cycle(24, seed=4)], axis=1)[None]
    assert auto_time_index(x) == "periodic:24"
    assert auto_time_index(np.random.default_rng(5).normal(size=(2, 300, 1))) == "relative"


def test_train_with_auto_time_index_stores_the_found_period(tmp_path, capsys):
    data = tmp_path / "daily.npy"
    np.save(data, _cycle(24, n=400).astype(np.float32)[:, None])
    ckpt = tmp_path / "daily.pt"
    assert main(["train", str(data), "--time-index", "auto", "--out", str(ckpt), *TINY]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 2
    assert read_checkpoint(ckpt)["config"]["time_index"] == "periodic:24"


def test_auto_time_index_is_refused_with_a_streamed_corpus(tmp_path, capsys):
    data = tmp_path / "x.npy"
    np.save(data, _cycle(24, n=200).astype(np.float32)[:, None])
    assert main(["train", str(data), "--stream", "--time-index", "auto"]) == 2
    assert "--stream needs an explicit --time-index" in capsys.readouterr().err
