"""The retraining tests drive a real daemon and broker with the runtime tests' helpers (tests/runtime/broker.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
