"""A private Mosquitto broker on a free loopback port, for the demo and the tests (never for production)."""
from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the kernel's ephemeral range when it is known.

    A port the kernel picked for ``bind(0)`` comes from the range it also hands to outgoing connections, so between
    this call and the server's own bind a client socket (an MQTT client, an HTTP probe) could take it; a random port
    below that range is never handed out that way."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    candidates = [random.randrange(10000, low) for _ in range(50)] if low > 10000 else []
    for port in [*candidates, 0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free TCP port on 127.0.0.1")


def wait_port(port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
    """Wait until something accepts TCP connections on the port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout} s")


def start_broker(folder: Path, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """Start an anonymous, loopback-only mosquitto in ``folder``; returns the process and its port."""
    if not Path(MOSQUITTO).exists():
        raise FileNotFoundError("mosquitto is not installed: run scripts/setup.sh or `apt-get install mosquitto`")
    port = port or free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    log = open(folder / "mosquitto.log", "wb")
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    wait_port(port)
    return proc, port
