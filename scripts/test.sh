#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite.
# Two pytest-xdist workers (TREP_EDGE_TEST_WORKERS, default 2; 0 runs in this process): most of the suite's time is
# torch export and daemons that wait on the clock, and two workers keep a 2-core machine busy. worksteal, because a
# few tests take a minute and would otherwise leave one worker idle at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -n "${TREP_EDGE_TEST_WORKERS:-2}" --dist worksteal "$@"
