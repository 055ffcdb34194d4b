"""A series' cycle from its autocorrelation, ``trep-edge train --time-index auto``, and a periodic model's phase."""
import json
from dataclasses import replace

import numpy as np
import pytest
from trep_edge.cli import main
from trep_edge.runtime.core.model_card import ModelCardError
from trep_edge.runtime.core.time_index import parse_time_index, time_index
from trep_edge.runtime.core.seasonal import find_period
from trep_edge.training.period import auto_time_index
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


def test_train_with_auto_time_index_stores_and_reports_the_found_period(tmp_path, capsys):
    data = tmp_path / "daily.npy"
    np.save(data, _cycle(24, n=400).astype(np.float32)[:, None])
    ckpt = tmp_path / "daily.pt"
    assert main(["train", str(data), "--time-index", "auto", "--out", str(ckpt), *TINY]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 2 and summary["time_index"] == "periodic:24"
    assert read_checkpoint(ckpt)["config"]["time_index"] == "periodic:24"
    assert main(["train", str(data), "--out", str(ckpt), *TINY]) == 0  # the default stays relative
    assert json.loads(capsys.readouterr().out)["time_index"] == "relative"


def test_auto_time_index_is_refused_with_a_streamed_corpus(tmp_path, capsys):
    data = tmp_path / "x.npy"
    np.save(data, _cycle(24, n=200).astype(np.float32)[:, None])
    assert main(["train", str(data), "--stream", "--time-index", "auto"]) == 2
    assert "--stream needs an explicit --time-index" in capsys.readouterr().err


def test_a_phase_origin_shifts_the_cycle_and_must_lie_inside_it(univariate_engine):
    conv = parse_time_index("periodic:24", 5)
    assert time_index(conv, np.array([5, 490_901]), 3).tolist() == [[0, 1, 2], [0, 1, 2]]
    for spec, origin in (("periodic:24", 24), ("periodic:24", -1), ("relative", 3)):
        with pytest.raises(ValueError, match="phase origin"):
            parse_time_index(spec, origin)
    card = univariate_engine.card  # a relative model: no phase to keep
    with pytest.raises(ModelCardError, match="needs a periodic time index"):
        replace(card, phase_origin=3).validate()
    with pytest.raises(ModelCardError, match="outside 0..23"):
        replace(card, time_index="periodic:24", phase_origin=30).validate()


def test_a_periodic_model_trained_mid_cycle_keeps_its_phases_when_scored_by_time(tmp_path, capsys):
    """Training counts rows from the file's first row; the daemon (and ``score --by-time``) counts Unix-epoch steps.
    A file that starts at 05:00 must give the model the same phases both ways, and another phase must not."""
    from trep_edge.runtime.core.engine import load_engine
    from trep_edge.runtime.core.windows import WindowConfig
    from trep_edge.runtime.service.replay import RecordedSeries
    from trep_edge.runtime.service.score_file import score_recording

    hours = np.arange(400)
    seconds = 1_767_243_600.0 + 3600.0 * hours  # 2026-01-01 05:00 UTC, hourly: epoch step 490,901 ≡ 5 (mod 24)
    values = _cycle(24, len(hours), seed=3) + 0.1 * (hours % 24 == 0)
    stamps = (np.datetime64("1970-01-01T00:00:00") + seconds.astype("timedelta64[s]")).astype(str)
    data = tmp_path / "hourly.csv"
    data.write_text("time,value\n" + "".join(f"{t},{v:.6f}\n" for t, v in zip(stamps, values)))
    ckpt, model = tmp_path / "hourly.pt", tmp_path / "hourly.onnx"
    assert main(["train", str(data), "--time-index", "periodic:24", "--out", str(ckpt), *TINY]) == 0
    assert read_checkpoint(ckpt)["meta"]["timing"] == {"first_step": 490_901, "step_seconds": 3600.0}
    assert main(["export", str(ckpt), "--out", str(model), "--window", "32", "--graphs", "none",
                 "--calibration-steps", "200"]) == 0  # fmt: skip
    engine = load_engine(model, "cpu")
    assert (engine.card.phase_origin, engine.card.period) == (5, 3600.0)

    def raw(start: float) -> np.ndarray:
        series = RecordedSeries("s", ["value"], values.reshape(-1, 1), timestamps=start + 3600.0 * hours)
        return score_recording(engine, series, windows=WindowConfig(period=3600.0)).raw

    plain = RecordedSeries("s", ["value"], values.reshape(-1, 1))
    by_row = score_recording(engine, plain).raw
    # What training saw: row r at phase r mod 24, as a model whose cycle starts at step 0 sees a file scored by row.
    trained = score_recording(replace(engine, card=replace(engine.card, phase_origin=0)), plain).raw
    np.testing.assert_allclose(by_row, trained, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(raw(seconds[0]), trained, rtol=1e-5, atol=1e-6)
    assert not np.allclose(raw(seconds[0] + 5 * 3600.0), trained, rtol=1e-5, atol=1e-6, equal_nan=True)
    # The phase is counted in steps of the rows' own spacing, so another declared period is refused.
    capsys.readouterr()
    assert main(["export", str(ckpt), "--out", str(tmp_path / "m.onnx"), "--period", "60", "--no-calibration"]) == 2
    assert "readings are 3600 s apart" in capsys.readouterr().err
