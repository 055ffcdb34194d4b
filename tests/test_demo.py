"""The README's main job, small: private broker, daemon with the shipped model, three PhysioNet beds."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trep_edge.datasets.paths import data_root
from trep_edge.demo import judge_alerts

REPO = Path(__file__).resolve().parents[1]


def test_demo_scores_every_replayed_reading_with_the_shipped_model(tmp_path):
    try:
        data_root()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    proc = subprocess.run(
        [sys.executable, "-m", "trep_edge.cli", "demo", "--beds", "3", "--rate", "40", "--every", "1",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = re.search(r"replayed (\d+) readings; the daemon accepted (\d+)", proc.stdout)
    assert sent and int(sent.group(1)) > 50 and sent.group(1) == sent.group(2), proc.stdout
    final = re.search(r"final: readings (\d+)\s+scored (\d+)", proc.stdout)
    assert final and final.group(1) == final.group(2) == sent.group(1), proc.stdout
    assert (tmp_path / "daemon.log").is_file()


def test_plant_demo_scores_every_machine_with_the_general_model_and_judges_the_injected_faults(tmp_path):
    try:
        data_root()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    proc = subprocess.run(
        [sys.executable, "-m", "trep_edge.cli", "demo", "--scenario", "plant", "--machines", "3", "--rate", "400",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "model general.onnx" in proc.stdout
    assert re.search(r"machine01: 1 channel\(s\) \w+, level [-0-9.e+]+, injected fault spike3", proc.stdout), proc.stdout
    sent = re.search(r"replayed (\d+) readings; the daemon accepted (\d+)", proc.stdout)
    assert sent and int(sent.group(1)) == 3 * 2500 and sent.group(1) == sent.group(2), proc.stdout
    verdict = re.search(r"faults: 3 injected; found (\d+), missed (\d+)", proc.stdout)
    assert verdict and int(verdict.group(1)) + int(verdict.group(2)) == 3, proc.stdout
    assert re.search(r"false alarms: \d+", proc.stdout)


def test_demo_without_data_exits_2_before_starting_anything(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "trep_edge.cli", "demo", "--data-root", str(tmp_path / "absent"), "--out",
         str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "--data-root" in proc.stderr
    assert "broker" not in proc.stdout and not (tmp_path / "out").exists()


def test_alerts_are_judged_against_the_sepsis_labels():
    septic = np.zeros(40, bool)
    septic[30:] = True  # SepsisLabel from hour 30
    labels = {"bed001": septic, "bed002": septic.copy(), "bed003": np.zeros(40, bool)}
    # bed001: an alert at 10 (too early: false alarm) and at 25 (within the 6 h lead: found); bed002: none; bed003:
    # no sepsis, one alert
    verdict = judge_alerts(labels, {"bed001": [10, 25], "bed003": [5]})
    assert verdict.septic == ["bed001", "bed002"]
    assert verdict.found == ["bed001"] and verdict.missed == ["bed002"]
    assert verdict.false_alarms == {"bed001": 1, "bed003": 1}
    assert judge_alerts(labels, {"bed001": [23]}).found == []
    fault = np.zeros(40, bool)
    fault[10:20] = True  # a fault's label ends: an alert after it is a false alarm, not a find
    late = judge_alerts({"m1": fault}, {"m1": [25]}, lead=0)
    assert late.found == [] and late.missed == ["m1"] and late.false_alarms == {"m1": 1}
