"""``trep-edge doctor``: versions, providers and a model-vs-card check, loud about provider fallbacks."""
from __future__ import annotations

import subprocess
import sys

import pytest


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trep_edge.cli", "doctor", *args], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_doctor_checks_a_good_model(univariate_model):
    done = _doctor("--model", str(univariate_model), "--providers", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "onnxruntime providers available:" in done.stdout and "CPUExecutionProvider" in done.stdout
    assert "graph matches the card" in done.stdout and "runtime imports torch: no" in done.stdout
    assert done.stdout.rstrip().endswith("OK")


def test_doctor_is_loud_about_a_provider_fallback(univariate_model):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("nothing falls back on a machine with CUDA")
    done = _doctor("--model", str(univariate_model), "--providers", "cuda,cpu")
    assert done.returncode == 1
    assert "!!! PROVIDER FALLBACK !!!" in done.stderr and "PROBLEMS: provider fallback" in done.stdout


def test_doctor_reports_a_broken_model(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    done = _doctor("--model", str(bad))
    assert done.returncode == 1 and "MODEL PROBLEM" in done.stdout and "not a loadable ONNX model" in done.stdout
