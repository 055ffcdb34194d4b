#!/usr/bin/env bash
# Rebuilds models/icu-vitals.onnx (+ card, fp16 variant) from PhysioNet 2019 set B. About 15 minutes on 2 CPU cores.
# Data folder: $TREP_EDGE_DATA or ../shared/data.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin
$PY/trep-edge train PhysioNet2019_sepsis/training_setB.tar.gz \
  --channels HR,O2Sat,Temp,SBP,MAP,DBP,Resp --forward-fill 8 \
  --max-train-length 64 --repr-dims 64 --hidden-dims 128 --depth 10 \
  --time-embedding time2vec --time-index relative \
  --iterations 1500 --seed 0 --no-progress --out runs/icu-vitals.pt
$PY/trep-edge export runs/icu-vitals.pt --out models/icu-vitals.onnx --name icu-vitals \
  --window 49 --z 21 --beta 4 --delay 7 --calibration-steps 4000 --check --precision fp16,int8 \
  --range HR=0:350 --range O2Sat=0:100 --range Temp=10:50 --range SBP=0:350 --range MAP=0:350 --range DBP=0:350 \
  --range Resp=0:150 --period 3600 --channel-codes models/icu-vitals.codes.json
