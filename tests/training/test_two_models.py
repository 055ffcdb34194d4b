"""bench/two_models.py: the gate sees the combined score, and each combination is the one it names."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from unittest import mock

import numpy as np

from trep_edge.runtime.core.detector import AlertGate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the script imports its sibling detector_replay, as when it runs
import two_models  # noqa: E402


def test_each_mode_combines_as_named_and_keeps_a_lone_score():
    fisher, mean, least = (two_models.MODES[m] for m in ("fisher", "mean", "min"))
    assert math.isclose(fisher(3.0, math.nan), 3.0)
    # two surprises of 3: chi-square with 4 degrees of freedom at X = 2 ln(10) * 6
    x_half = 6 * math.log(10)
    assert math.isclose(fisher(3.0, 3.0), (x_half - math.log(1 + x_half)) / math.log(10))
    assert mean(4.0, 2.0) == 3.0 and mean(4.0, math.nan) == 4.0
    assert least(5.0, 2.0) == 2.0 and least(5.0, math.nan) == 5.0


def test_the_gate_decides_on_the_fed_score():
    gate = AlertGate(threshold=4.0, min_count=1, refractory=200, protect=200, n_streams=1)
    with mock.patch.object(AlertGate, "decide", two_models.gated(lambda score: score + 5.0)):
        alert = gate.decide(np.array([0]), np.array([0.5]))[0]
    assert alert[0]
    assert not AlertGate(threshold=4.0, min_count=1, refractory=200, protect=200, n_streams=1).decide(
        np.array([0]), np.array([0.5]))[0][0]  # fmt: skip
