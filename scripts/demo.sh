#!/usr/bin/env bash
# The main job: set everything up, then run the ICU bedside monitoring demo on real PhysioNet 2019 patients
# (private Mosquitto, monitor daemon with models/icu-vitals.onnx, patients replayed as beds, alerts, a PNG).
# Extra arguments go to `trep-edge demo` (e.g. --broker HOST:PORT, --beds 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/trep-edge demo "$@"
