"""The deployment tests reuse the daemon tests' broker, daemon and MQTT helpers (tests/runtime/broker.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
