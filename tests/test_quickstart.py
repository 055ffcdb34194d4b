"""docs/quickstart-sensor.md runs as written: every ``trep-edge`` command of its bash blocks, on a 3,000-row slice.

The slice replaces the data file and shrinks the row ranges and iterations; export embeds no extra graphs and
calibrates on fewer steps (its full form is timed in the doc). ``run`` gets a private broker's port and an HTTP
port, ``replay`` that broker. About a minute.
"""
from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from trep_edge.datasets.paths import data_root
from trep_edge.local_broker import free_port, start_broker

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "quickstart-sensor.md"
SMALL = {"--rows 0:34560": "--rows 0:2000", "--iterations 200": "--iterations 2", "--start 34560": "--start 2000",
         "--limit 2000": "--limit 300", "--window 97": "--window 97 --graphs none --calibration-steps 300"}  # fmt: skip

pytestmark = pytest.mark.timeout(600)


def doc_commands() -> list[str]:
    """The trep-edge command lines of the doc's bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.startswith("trep-edge ")]


def _readings(http: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
    found = re.search(r"^trep_edge_readings_total(?:\{[^}]*\})? (\S+)", text, re.M)
    return float(found.group(1)) if found else 0.0


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_quickstart_commands_run_on_a_small_slice(tmp_path):
    try:
        source = data_root() / "ETT" / "ETTm1.csv"
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    sample = tmp_path / "sensor.csv"
    sample.write_text("".join(source.read_text().splitlines(keepends=True)[:3001]))
    commands = doc_commands()
    assert [c.split()[1] for c in commands] == ["train", "export", "score", "init", "run", "replay"]
    broker, port = start_broker(tmp_path)
    http = free_port()
    daemon = None
    try:
        for line in commands:
            for big, small in SMALL.items():
                line = line.replace(big, small)
            argv = [sys.executable, "-m", "trep_edge.cli", *shlex.split(line.replace("ETT/ETTm1.csv", str(sample)))[1:]]
            if argv[3] == "run":
                argv += ["--mqtt-port", str(port), "--http-port", str(http), "--state-path", str(tmp_path / "s.npz")]
                daemon = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                _wait(lambda: urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=2).status == 200,
                      60, "the daemon to become ready")  # fmt: skip
                continue
            if argv[3] == "replay":
                argv += ["--broker", f"127.0.0.1:{port}"]
            done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert (tmp_path / "models" / "oil.onnx").is_file() and (tmp_path / "runs" / "score" / "oil.csv").is_file()
        assert (tmp_path / "site" / "monitor.toml").is_file()
        _wait(lambda: _readings(http) >= 300, 60, "the daemon to receive the 300 replayed readings")
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        broker.kill()
        broker.wait(10)
