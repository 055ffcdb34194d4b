"""The README's main job, small: private broker, daemon with the shipped model, three PhysioNet beds."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trep_edge.datasets.paths import data_root

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
