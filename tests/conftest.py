"""Shared fixtures: small exported models that every runtime test can load (trained here, in seconds)."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from trep_edge.datasets.paths import data_root
from trep_edge.runtime.core.engine import Engine, load_engine
from trep_edge.runtime.core.model_card import Scoring

TINY = dict(repr_dims=16, hidden_dims=24, depth=3, time_embedding_dims=8, batch_size=8, max_train_length=256)
UCR_135 = "UCR_Anomaly/135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"


def _export_tiny(
    x: np.ndarray, channels: list[str], out: Path, window: int, iterations: int, graphs: list[str] | None = None,
    **config,
) -> Path:
    from trep_edge.runtime.core.preprocess import count_levels, fit_normalisation
    from trep_edge.training.config import TrainConfig
    from trep_edge.training.export import build_card, export_encoder
    from trep_edge.training.trainer import Trainer

    norm = fit_normalisation(x, count_levels(x))  # as training data is read (training.data)
    prepared = norm.apply(x)
    meta = {"dataset": out.stem, "channels": channels, "normalisation": norm.to_dict(), "differencing": 0}
    trainer = Trainer(TrainConfig(**{**TINY, "seed": 0, **config}), input_dims=len(channels), meta=meta)
    trainer.fit(prepared, iterations=iterations, progress=False)
    encoder = trainer.inference_encoder()
    card = build_card(out.stem, encoder, meta, trainer.cfg.to_dict(), window, Scoring(), trainer.step)
    export_encoder(encoder, card, out, [s for s in prepared], max_calibration_steps=1500, graph_names=graphs)
    return out


def _built_once(tmp_path_factory, name: str, build: Callable[[Path], Path]) -> Path:
    """The model file ``name``, built by ``build(path)`` once per test run.

    Under pytest-xdist (scripts/test.sh) every worker is its own session, and each would train and export the same
    fixture model (20-35 s apiece); the first builds it in the folder the workers share and the others wait on its lock
    and load the same file. Each model gets its own folder, as a test may write beside it.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above the per-worker ones
    path = root / "models" / Path(name).stem / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent) + ".lock"):
        if not path.is_file():
            build(path)
    return path


@pytest.fixture(scope="session")
def built_once(tmp_path_factory) -> Callable[[str, Callable[[Path], Path]], Path]:
    """``built_once(name, build)``: the file ``name`` built by ``build(path)`` once per test run and shared by the
    xdist workers (``_built_once``); for what a module would otherwise build once in each worker."""
    return lambda name, build: _built_once(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def ucr_series():
    """The UCR anomaly series 135 (InternalBleeding16), a small real series with one labelled anomaly."""
    from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly

    path = data_root() / UCR_135
    if not path.is_file():
        pytest.skip(f"real data not found at {path} (set TREP_EDGE_DATA)")
    return load_ucr_anomaly(path)


@pytest.fixture(scope="session")
def univariate_model(tmp_path_factory, ucr_series) -> Path:
    """A tiny univariate model (window 64) trained and calibrated on the normal prefix of UCR series 135."""
    x = ucr_series.values[: ucr_series.train_end].reshape(1, -1, 1)
    return _built_once(tmp_path_factory, "ucr135.onnx",
                       lambda out: _export_tiny(x, ["value"], out, window=64, iterations=40))  # fmt: skip


@pytest.fixture(scope="session")
def vitals_model(tmp_path_factory) -> Path:
    """A tiny 3-channel model (HR, SpO2, RESP; window 32) trained on synthetic 1 Hz vitals with gaps."""
    rng = np.random.default_rng(0)
    t = np.arange(600)
    hr = 75 + 5 * np.sin(t / 30) + rng.normal(0, 1, (8, 600))
    spo2 = 97 + rng.normal(0, 0.5, (8, 600))
    resp = 16 + 2 * np.sin(t / 10) + rng.normal(0, 0.5, (8, 600))
    x = np.stack([hr, spo2, resp], axis=-1).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    return _built_once(tmp_path_factory, "vitals.onnx",
                       lambda out: _export_tiny(x, ["HR", "SpO2", "RESP"], out, window=32, iterations=30))  # fmt: skip


@pytest.fixture(scope="session")
def export_tiny() -> Callable[..., Path]:
    """A test's own tiny model: ``export_tiny(x [N, T, C], channels, out, window, iterations, graphs, **config)``
    trains on ``x`` and exports it calibrated on the same series, with the extra graphs ``graphs`` (default all; ``[]``
    the full graph only, for a test that is not about them: half the export's time)."""
    return _export_tiny


@pytest.fixture(scope="session")
def univariate_engine(univariate_model) -> Engine:
    """The univariate model loaded on CPU."""
    return load_engine(univariate_model, "cpu")


def _causal_tiny(tmp_path_factory, ucr_series, seed: int, iterations: int) -> Path:
    x = ucr_series.values[: ucr_series.train_end].reshape(1, -1, 1)
    return _built_once(tmp_path_factory, f"ucr135-causal-{seed}.onnx",
                       lambda out: _export_tiny(x, ["value"], out, window=64, iterations=iterations, causal=True,
                                                time_index="periodic:100", max_receptive_field=64, seed=seed))


@pytest.fixture(scope="session")
def causal_model(tmp_path_factory, ucr_series) -> Path:
    """A tiny causal univariate model (window 64, receptive field 61, periodic:100) on UCR series 135's normal part;
    its file carries the incremental ``step`` graph (docs/causal.md)."""
    return _causal_tiny(tmp_path_factory, ucr_series, seed=0, iterations=10)


@pytest.fixture(scope="session")
def causal_model_other(tmp_path_factory, ucr_series) -> Path:
    """Same inputs as ``causal_model``, other weights (untrained, seed 1): a hot swap that keeps the windows."""
    return _causal_tiny(tmp_path_factory, ucr_series, seed=1, iterations=0)
