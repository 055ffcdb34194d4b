"""The wheel as users get it: built once, installed into fresh venvs with no extras, [cpu] and [cpu,train].

SLOW (about two minutes on 2 cores, most of it installing torch for [cpu,train]): each venv is created without
pip and filled by this venv's pip (``pip --python``), from the same package sources and constraints as CI.
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / "constraints" / "cpu.txt"
# The default model is about 17 MB uncompressed; the wheel must stay well below a size that hurts edge installs.
MAX_WHEEL_MB = 25

pytestmark = pytest.mark.timeout(900)


def _run(*cmd: str | Path, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from a copy of the tracked files (a build must not write into the work tree)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    files = _run("git", "ls-files", "-z", cwd=REPO).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((REPO / name).read_bytes())
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", root / "dist", src)
    (built,) = (root / "dist").glob("trep_edge-*.whl")
    return built


def _venv(wheel: Path, where: Path, extras: str) -> Path:
    """A fresh venv with the wheel installed with `extras`; returns its bin folder."""
    _run(sys.executable, "-m", "venv", "--without-pip", where)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    # --no-compile: byte-compiling torch's thousands of modules is a good part of the install and tests nothing here.
    _run(sys.executable, "-m", "pip", "--python", where / "bin" / "python", "install", "-q", "--no-compile", "-c",
         CONSTRAINTS, target)  # fmt: skip
    return where / "bin"


def _one_line_hint(proc: subprocess.CompletedProcess, extra: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'trep-edge[{extra}]'" in lines[0], proc.stderr


def _vitals_csv(path: Path) -> Path:
    """120 hourly readings of the default model's channels, epoch-second timestamps."""
    rng = np.random.default_rng(0)
    base = np.array([80, 97, 37, 120, 85, 70, 16], dtype=float)
    rows = base + rng.normal(0, 1, (120, 7)) * base * 0.03
    lines = ["time,HR,O2Sat,Temp,SBP,MAP,DBP,Resp"]
    lines += [f"{1714564800 + 3600 * i}," + ",".join(f"{x:.2f}" for x in row) for i, row in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_wheel_carries_the_default_model_and_example_config(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "trep_edge/models/icu-vitals.onnx" in names and "trep_edge/models/icu-vitals.card.json" in names
    assert "trep_edge/deploy/monitor.toml" in names
    # only the shipped models, not the repository's variants (fp16, causal)
    assert not [n for n in names if n.endswith(".onnx") and Path(n).stem not in ("icu-vitals", "general")]
    assert wheel.stat().st_size < MAX_WHEEL_MB * 1e6


def test_without_extras_help_works_and_commands_name_their_extra(wheel, tmp_path):
    bin_dir = _venv(wheel, tmp_path / "venv", "")
    assert "init" in _run(bin_dir / "trep-edge", "--help").stdout
    _one_line_hint(_run(bin_dir / "trep-edge", "run", "--config", "x.toml", check=False), "cpu")
    _one_line_hint(_run(bin_dir / "trep-edge", "train", "x.csv", check=False), "train")


def test_cpu_install_checks_scores_and_inits_without_torch(wheel, tmp_path):
    bin_dir = _venv(wheel, tmp_path / "venv", "cpu")
    assert _run(bin_dir / "python", "-c", "import torch", check=False).returncode != 0
    assert "CPUExecutionProvider" in _run(bin_dir / "trep-edge", "doctor").stdout
    init = _run(bin_dir / "trep-edge", "init", tmp_path / "site")
    assert "monitor.toml" in init.stdout
    config = (tmp_path / "site" / "monitor.toml").read_text()
    assert "models/icu-vitals.onnx: channels HR" in config and 'path = "models/icu-vitals.onnx"' in config
    model = tmp_path / "site" / "models" / "icu-vitals.onnx"
    doctor = _run(bin_dir / "trep-edge", "doctor", "--model", model)
    assert "runtime imports torch: no" in doctor.stdout and doctor.stdout.rstrip().endswith("OK")
    csv_in, csv_out = _vitals_csv(tmp_path / "vitals.csv"), tmp_path / "out" / "vitals.csv"
    score = _run(bin_dir / "trep-edge", "score", csv_in, "--model", model, "--no-plot", "--out", csv_out)
    assert "120 rows scored with icu-vitals" in score.stdout
    assert len(csv_out.read_text().splitlines()) == 121
    plot = _run(bin_dir / "trep-edge", "score", csv_in, "--model", model, "--out", csv_out, check=False)
    _one_line_hint(plot, "plot")
    assert "--no-plot" in plot.stderr
    _one_line_hint(_run(bin_dir / "trep-edge", "train", csv_in, check=False), "train")


def test_cpu_train_install_trains_with_the_cpu_torch(wheel, tmp_path):
    bin_dir = _venv(wheel, tmp_path / "venv", "cpu,train")
    installed = _run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "list").stdout.lower()
    assert "torch" in installed and "nvidia" not in installed and "triton" not in installed, installed
    csv_in = _vitals_csv(tmp_path / "vitals.csv")
    train = _run(bin_dir / "trep-edge", "train", csv_in, "--iterations", "2", "--hidden-dims", "8", "--depth", "2",
                 "--repr-dims", "8", "--no-progress", "--out", tmp_path / "m.pt", cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "m.pt").is_file(), train.stdout + train.stderr
