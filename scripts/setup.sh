#!/usr/bin/env bash
# Installs everything trep-edge needs on a fresh Debian/Ubuntu machine with Python >= 3.11:
# the mosquitto broker and clients (for the demo and the tests), openssl, and a virtual environment in .venv with a
# CPU-only torch (no CUDA stack).
#
# Torch: PyTorch publishes CPU-only wheels on its own index ($TREP_EDGE_TORCH_INDEX, default
# https://download.pytorch.org/whl/cpu). When it is reachable torch comes from there and every other package from
# your usual index; when not, torch comes from your usual index, and the set-up stops rather than install the CUDA
# build (nvidia-* and triton, several GB) unless TREP_EDGE_ALLOW_CUDA_TORCH=1. The script says which happened.
#
# Settings (environment): PYTHON (interpreter, default python3), TREP_EDGE_VENV (default .venv),
# TREP_EDGE_TORCH_INDEX, TREP_EDGE_ALLOW_CUDA_TORCH, TREP_EDGE_SETUP_ONLY=torch (stop after torch: used by the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests also need openssl (they generate TLS certificates for the broker).
if { ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; } \
    || ! command -v mosquitto_pub >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq mosquitto mosquitto-clients openssl >/dev/null
fi

PY=${PYTHON:-python3}
VENV=${TREP_EDGE_VENV:-.venv}
TORCH_INDEX=${TREP_EDGE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip >/dev/null 2>&1 \
  || echo "setup: could not upgrade pip; using $("${pip[@]}" --version)"

# torch==X from the constraints: dev and CI run the version the tests were written against.
torch_req=$(grep -E '^torch==' constraints/cpu.txt)
probe="import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip('/') + '/torch/', timeout=15)"
if "$VENV/bin/python" -c "$probe" "$TORCH_INDEX" >/dev/null 2>&1; then
  # An extra index, so the other packages keep coming from the usual one; the CPU wheel's local version (+cpu) sorts
  # above the plain release, so pip picks it.
  echo "setup: torch (CPU-only build) from PyTorch's CPU index $TORCH_INDEX"
  "${pip[@]}" install -q --extra-index-url "$TORCH_INDEX" "$torch_req"
else
  echo "setup: PyTorch's CPU index $TORCH_INDEX is unreachable; falling back to the default package index for torch"
  plan=$("${pip[@]}" install -q --dry-run --ignore-installed --report - "$torch_req")
  if grep -qE '"name": *"(nvidia-[^"]*|triton)"' <<<"$plan" && [ "${TREP_EDGE_ALLOW_CUDA_TORCH:-0}" != 1 ]; then
    echo "setup: the default index offers only the CUDA build of $torch_req (nvidia-* and triton, several GB)." >&2
    echo "setup: make a CPU index reachable (TREP_EDGE_TORCH_INDEX=<mirror of download.pytorch.org/whl/cpu>) or" \
         "accept the CUDA build with TREP_EDGE_ALLOW_CUDA_TORCH=1" >&2
    exit 1
  fi
  "${pip[@]}" install -q "$torch_req"
fi
echo "setup: installed $("$VENV/bin/python" -c 'import importlib.metadata as m; print("torch", m.version("torch"))')"
if [ "${TREP_EDGE_SETUP_ONLY:-}" = torch ]; then
  exit 0
fi

"${pip[@]}" install -q -c constraints/cpu.txt -e ".[cpu,train,sparkplug,dev]"
