#!/usr/bin/env bash
# Causal vs standard T-Rep encoder (docs/causal.md): same data, budget and seed, the daemon's streaming score,
# point-adjusted F1. Each step holds the shared heavy-work lock so timings of other jobs are not disturbed.
# Resumable: finished rows of $RESULTS are skipped. Usage: bash bench/results/causal_eval.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
RESULTS=${RESULTS:-bench/results/causal_eval.json}
LOG=${LOG:-bench/results/causal_eval.log}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# The reduced budget of docs/results.md: 200 iterations, width 64, depth 10 (+ final block), batch 16, seed 0.
COMMON=(--results "$RESULTS" --seed 0 --iterations 200 --hidden-dims 64 --depth 10 --batch-size 16 --threads 1)

step() {
    echo "$(date -u +%FT%TZ) START $*" | tee -a "$LOG"
    local t0=$SECONDS
    flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/trep-edge eval "$1" "${COMMON[@]}" "${@:2}" >>"$LOG" 2>&1
    echo "$(date -u +%FT%TZ) END rc=$? $((SECONDS - t0))s $*" | tee -a "$LOG"
}

# PhysioNet 2019 set B vitals, hourly, window 49 (the shipped icu-vitals model's), sepsis hours as anomalies.
# A causal model needs a periodic time index: periodic:24 (hour of day) for both models; the standard model is
# also run with the relative index the shipped model uses.
step sepsis-stream --patients 800 --variants trep,trep-causal --time-index periodic:24
step sepsis-stream --patients 800 --variants trep --time-index relative
# The 3 UCR-anomaly series with the protocol of docs/results.md (window 201, sections of 400 steps, μ, σ from the
# last 2,000 train steps, at most 6,000 test steps per series); periodic:400 for both models.
step anomaly --max-train-length 400 --calibration-steps 2000 --max-test-steps 6000 --variants trep,trep-causal \
    --time-index periodic:400
# Seed repeat of the PhysioNet comparison (both models at seed 1).
step sepsis-stream --patients 800 --variants trep,trep-causal --time-index periodic:24 --seed 1
