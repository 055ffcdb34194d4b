#!/usr/bin/env bash
# Installs everything trep-edge needs on a fresh Debian/Ubuntu machine with Python 3.11:
# the mosquitto broker and clients (for the demo and the tests), openssl, and a virtual environment in .venv.
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
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[cpu,train,dev]"
