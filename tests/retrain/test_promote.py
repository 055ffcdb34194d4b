"""Promotion's verdict and its atomic install (the full path runs in test_retrain_end_to_end.py)."""
from __future__ import annotations

import os

import pytest

from trep_edge.runtime.model_card import sidecar_path
from trep_edge.training.promote import AlertRate, install, refusals
from trep_edge.training.trainer import resolve_checkpoint


def test_a_candidate_alerting_much_more_than_the_running_model_is_refused():
    running = AlertRate(alerts=10, scored=10_000)  # 0.001 per reading
    assert refusals(True, 1e-6, AlertRate(19, 10_000), running, max_ratio=2, min_rate=0.001) == []
    (reason,) = refusals(True, 1e-6, AlertRate(25, 10_000), running, max_ratio=2, min_rate=0.001)
    assert "alert rate on the last day 0.0025 > 2 x the running model's 0.0010" in reason


def test_a_quiet_running_model_does_not_make_a_few_alerts_fatal_but_bad_parity_is():
    quiet = AlertRate(alerts=0, scored=10_000)
    assert refusals(True, 1e-6, AlertRate(5, 10_000), quiet, max_ratio=2, min_rate=0.001) == []
    assert refusals(True, 1e-6, AlertRate(50, 10_000), quiet, max_ratio=2, min_rate=0.001)
    assert refusals(True, 1e-6, AlertRate(50, 10_000), None, max_ratio=2, min_rate=0.001) == []  # first model
    assert "parity" in refusals(False, 3e-3, AlertRate(0, 1), quiet, 2, 0.001)[0]


def test_install_replaces_card_and_model_atomically_and_readably(tmp_path):
    staged, target = tmp_path / "staged" / "m.onnx", tmp_path / "models" / "m.onnx"
    staged.parent.mkdir()
    target.parent.mkdir()
    staged.write_bytes(b"new model")
    sidecar_path(staged).write_text("new card")
    target.write_bytes(b"old model")
    install(staged, target)
    assert target.read_bytes() == b"new model" and sidecar_path(target).read_text() == "new card"
    assert oct(os.stat(target).st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in target.parent.iterdir()) == ["m.card.json", "m.onnx"]  # no temp file left


def test_an_exported_model_without_its_checkpoint_beside_it_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"its checkpoint .*m\.pt \(same name, \.pt\) is needed"):
        resolve_checkpoint(tmp_path / "m.onnx")
    assert resolve_checkpoint(tmp_path / "run.pt") == tmp_path / "run.pt"  # a checkpoint is taken as given
