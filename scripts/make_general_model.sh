#!/usr/bin/env bash
# Rebuilds models/general.onnx (+ card): the general-purpose, channel-independent model with per-stream scaling.
# Corpus about 1 minute, training 637 s (1,500 iterations) on 2 CPU cores (docs/training.md, "General-purpose model").
# Data folder: $TREP_EDGE_DATA or ../shared/data. The corpus goes to a cache folder, never the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin
CORPUS=${TREP_EDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trep-edge}/general_corpus.npy
$PY/python -m trep_edge.training.general_corpus --out "$CORPUS" --length 2048 --seed 0
$PY/trep-edge train "$CORPUS" \
  --hidden-dims 48 --depth 8 --repr-dims 64 --max-train-length 128 --batch-size 16 \
  --time-index relative --iterations 1500 --checkpoint-every 100 --threads 2 --seed 0 --no-progress --out runs/general.pt
$PY/trep-edge export runs/general.pt --out models/general.onnx --name general --general \
  --window 128 --calibration-steps 4000 --check
