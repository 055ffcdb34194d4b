#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite.
# Two pytest-xdist workers (TREP_EDGE_TEST_WORKERS, default 2; 0 runs in this process): most of the suite's time is
# torch export and daemons that wait on the clock, and two workers keep a 2-core machine busy. worksteal, because a
# few tests take a minute and would otherwise leave one worker idle at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
workers=${TREP_EDGE_TEST_WORKERS:-2}
case "$workers" in
  0 | 1) ;;
  # One math thread per worker: two workers each running torch on two threads fight over 2 cores (two tiny exports
  # side by side took 52 s with two threads each, 37 s with one).
  *) export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1} ;;
esac
# --durations: every run names its slowest tests, so a suite nearing its 15-minute line shows what to trim.
exec .venv/bin/python -m pytest -q -n "$workers" --dist worksteal --durations=15 "$@"
