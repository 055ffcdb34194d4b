"""bench/seed_ensemble.py: two models' tapes of one stream join into the tape of their ensemble."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import load_engine
from trep_edge.training.evaluation.detection_corpus import Stream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the script imports its sibling detector_replay, as when it runs
import seed_ensemble as ensemble  # noqa: E402

replay_bench = ensemble.dr


def _stream() -> Stream:
    rng = np.random.default_rng(5)
    t = np.arange(700)
    values = (np.sin(2 * np.pi * t / 50) + rng.normal(0, 0.1, len(t)))[:, None]
    values[520] += 4.0
    return Stream("one", "synthetic", ["c0"], values, [(520, 520)])


def test_a_model_joined_with_itself_scores_as_the_model_alone(tmp_path):
    """The joint representation of two equal members is the member's twice: its distance is unchanged and its
    novelty √2 times larger, which the detector's log-space statistics see only through the log's small floor. So any
    misalignment of the two tapes, or a wrong width, would show as a different score."""
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = _stream()
    tape, _ = replay_bench.capture(engine, stream, tmp_path)
    joined = ensemble.join_tapes(tape, tape)
    init = next(c for c in joined if c[0] == "init")
    assert init[1] == 2 * next(c for c in tape if c[0] == "init")[1]
    config = DetectorConfig().with_overrides("threshold=2;refractory=50;min_count=40")
    rows = [len(stream.values)]
    (alone, alone_alerts), = replay_bench.replay([tape], config, None, rows)
    (pair, pair_alerts), = replay_bench.replay([joined], config, None, rows)
    assert alone_alerts.sum() >= 1  # the low bar alerts, so the equality below covers alert decisions
    assert np.array_equal(pair_alerts, alone_alerts)
    assert np.allclose(pair, alone, atol=0.01, equal_nan=True)  # 0.002 apart at most here


def test_tapes_of_different_readings_are_refused(tmp_path):
    engine = load_engine(ROOT / "models" / "general.onnx", "cpu")
    stream = _stream()
    tape, _ = replay_bench.capture(engine, stream, tmp_path)
    with pytest.raises(ValueError, match="not the same readings"):
        ensemble.join_tapes(tape, tape[:-1])
    with pytest.raises(ValueError, match="not the same readings"):
        ensemble.join_tapes(tape, [tape[1], tape[0], *tape[2:]])
