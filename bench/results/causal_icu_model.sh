#!/usr/bin/env bash
# The causal counterpart of models/icu-vitals.onnx (scripts/make_default_model.sh): the same data, channels,
# forward fill, sizes, iterations and seed; causal convolutions with a receptive field within the 49-hour window
# and the hour-of-day time index a causal model needs (periodic:24). Training runs under the shared lock in chunks
# of at most 14 minutes (resumed from its checkpoint), then the export embeds the step graph.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin
CKPT=runs/icu-vitals-causal.pt
train() {
    flock /tmp/trep-heavy.lock timeout 840 nice -n 5 "$PY/trep-edge" train "$@" || [[ $? == 124 ]]
}
if [[ ! -f $CKPT ]]; then
    train PhysioNet2019_sepsis/training_setB.tar.gz \
      --channels HR,O2Sat,Temp,SBP,MAP,DBP,Resp --forward-fill 8 \
      --max-train-length 64 --repr-dims 64 --hidden-dims 128 --depth 10 \
      --time-embedding time2vec --time-index periodic:24 --causal --max-receptive-field 49 \
      --iterations 1500 --seed 0 --no-progress --checkpoint-every 50 --out "$CKPT"
fi
while [[ $("$PY/python" -c "import torch; s = torch.load('$CKPT', weights_only=True); print(s['step'] < s['total_steps'])") == True ]]; do
    train PhysioNet2019_sepsis/training_setB.tar.gz --channels HR,O2Sat,Temp,SBP,MAP,DBP,Resp --forward-fill 8 \
      --resume "$CKPT" --no-progress --out "$CKPT"
done
flock /tmp/trep-heavy.lock nice -n 5 "$PY/trep-edge" export "$CKPT" --out models/icu-vitals-causal.onnx \
  --name icu-vitals-causal --window 49 --z 21 --beta 4 --delay 7 --calibration-steps 4000 --check \
  --graphs pruned_pair,step --channel-codes models/icu-vitals.codes.json
