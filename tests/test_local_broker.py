"""The test broker's port picker stays out of the range the kernel hands to outgoing connections."""
from __future__ import annotations

import socket

from trep_edge import local_broker


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        return True


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_bound(tmp_path, monkeypatch):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(local_broker, "EPHEMERAL_RANGE", ranges)
    ports = [local_broker.free_port() for _ in range(20)]
    assert all(10000 <= p < 32768 and _bindable(p) for p in ports)
    assert len(set(ports)) > 1  # random picks, not one fixed port every test would share


def test_without_the_kernel_range_the_kernel_picks(tmp_path, monkeypatch):
    monkeypatch.setattr(local_broker, "EPHEMERAL_RANGE", tmp_path / "missing")
    assert _bindable(local_broker.free_port())
