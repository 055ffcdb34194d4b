"""scripts/setup.sh's torch choice, against local package indexes served on loopback with dummy wheels.

The "default" index holds a CUDA-style torch (requiring nvidia-* and triton) and the "CPU" index a torch+cpu
without them, as PyPI and download.pytorch.org/whl/cpu do. Each case runs the real script in a fresh venv up to
its torch step (TREP_EDGE_SETUP_ONLY=torch), with pip's own configuration and cache switched off.
"""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERSION = "2.13.0"  # constraints/cpu.txt


def _wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal installable wheel of `name` in the index's project folder."""
    dist = name.replace("-", "_")
    folder = index / name
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files = {
        f"{dist}/__init__.py": "",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


@pytest.fixture
def indexes(tmp_path):
    """Serve tmp_path/www on a loopback port; returns (www folder, base URL)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(5)


def _cuda_default_index(www: Path) -> None:
    _wheel(www / "pypi", "torch", VERSION, ("nvidia-cublas-cu12", "triton"))
    _wheel(www / "pypi", "nvidia-cublas-cu12", "12.0")
    _wheel(www / "pypi", "triton", "3.0")


def _setup(tmp_path: Path, default_index: str, torch_index: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run setup.sh's torch step into a fresh venv; return the run and the venv's installed distributions."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", PIP_INDEX_URL=default_index,
               PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHON=sys.executable, TREP_EDGE_VENV=str(tmp_path / "venv"),
               TREP_EDGE_TORCH_INDEX=torch_index, TREP_EDGE_SETUP_ONLY="torch")  # fmt: skip
    run = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    listing = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                             env=env, capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    return run, listing.lower().split()


def _no_cuda(installed: list[str]) -> None:
    assert not [d for d in installed if d.startswith(("nvidia", "triton"))], installed


@pytest.mark.parametrize(
    "reachable, says, version",
    [
        (True, "torch (CPU-only build) from PyTorch's CPU index", f"{VERSION}+cpu"),
        # the default index holds a CPU torch, like this machine's local wheel or PyPI's macOS/aarch64 wheels
        (False, "is unreachable; falling back to the default package index for torch", VERSION),
    ],
    ids=["cpu-index-reachable", "cpu-index-unreachable"],
)
def test_torch_comes_without_cuda_from_the_cpu_index_or_the_fallback(tmp_path, indexes, reachable, says, version):
    www, url = indexes
    if reachable:
        _cuda_default_index(www)
        _wheel(www / "cpu", "torch", f"{VERSION}+cpu")
    else:
        _wheel(www / "pypi", "torch", VERSION)
    run, installed = _setup(tmp_path, f"{url}/pypi/", f"{url}/cpu/" if reachable else f"{url}/nowhere/")
    assert run.returncode == 0, run.stdout + run.stderr
    assert says in run.stdout
    assert f"torch=={version}" in installed
    _no_cuda(installed)


def test_unreachable_cpu_index_refuses_the_cuda_build(tmp_path, indexes):
    www, url = indexes
    _cuda_default_index(www)
    run, installed = _setup(tmp_path, f"{url}/pypi/", f"{url}/nowhere/")
    assert run.returncode == 1
    assert "falling back" in run.stdout and "offers only the CUDA build" in run.stderr
    assert "TREP_EDGE_ALLOW_CUDA_TORCH=1" in run.stderr
    assert not [d for d in installed if d.startswith("torch")]
    _no_cuda(installed)
