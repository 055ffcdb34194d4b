"""Shared test infrastructure for the daemon tests: a real Mosquitto broker, MQTT helpers, the daemon process.

The broker runs on a free loopback port with a generated config (persistence on, so sessions survive a
restart) and can be killed and restarted. Test modules import the fixtures (``from broker import broker``);
every broker, daemon and subscriber a fixture starts is stopped at teardown, whatever the test did to it. The TLS
variant generates a CA, a server certificate for 127.0.0.1 and a client certificate with openssl, and a password
file with ``mosquitto_passwd``.
"""
from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from trep_edge.local_broker import MOSQUITTO, free_port, wait_port

USER, PASSWORD = "monitor", "s3cret-pass"
KEY_PASSPHRASE = "key-pass"


def stop_process(proc: subprocess.Popen | None, sig: int, timeout: float) -> int | None:
    """Send ``sig`` to a child we started and wait for it; SIGKILL if it does not exit in time."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


@dataclass
class TlsFiles:
    """Certificates and keys generated for one test session."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path  # encrypted with KEY_PASSPHRASE
    password_file: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_tls_files(folder: Path) -> TlsFiles:
    """A throwaway CA, server cert (SAN IP 127.0.0.1), passphrase-protected client cert, and a password file."""
    folder.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=trep-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=folder)  # fmt: skip
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (folder / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=trep-edge-monitor")):
        _openssl("req", *ec, "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj", subject, cwd=folder)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{who}.crt", "-days", "2", "-extfile", f"{who}.ext", cwd=folder)  # fmt: skip
    _openssl("pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSPHRASE}", "-out", "client.enc.key",
             cwd=folder)  # fmt: skip
    passwords = folder / "passwords"
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), USER, PASSWORD], check=True,
                   capture_output=True, timeout=30)  # fmt: skip
    os.chmod(passwords, 0o600)
    return TlsFiles(folder / "ca.crt", folder / "server.crt", folder / "server.key", folder / "client.crt",
                    folder / "client.enc.key", passwords)  # fmt: skip


class Broker:
    """One mosquitto process on a fixed free port, with persistence so sessions survive a restart."""

    def __init__(self, folder: Path, tls: TlsFiles | None = None) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls = tls
        self.proc: subprocess.Popen | None = None
        self.log = folder / "mosquitto.log"
        self.conf = folder / "mosquitto.conf"
        self.conf.write_text(self._config())

    def _config(self) -> str:
        lines = [
            f"listener {self.port} 127.0.0.1",
            # Sessions and their queued QoS 1 messages are saved every second and at exit, so a killed broker
            # comes back knowing the daemon's subscriptions.
            # Run as the current user: as root, mosquitto would switch to user "mosquitto", which cannot read the
            # test's private temporary folders (certificates, persistence, log).
            f"user {getpass.getuser()}",
            "persistence true",
            f"persistence_location {self.folder}/",
            "autosave_interval 1",
            "max_queued_messages 100000",
            "max_inflight_messages 0",
            f"log_dest file {self.log}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
        ]
        if self.tls is None:
            lines.append("allow_anonymous true")
        else:
            lines += [
                f"cafile {self.tls.ca}",
                f"certfile {self.tls.server_cert}",
                f"keyfile {self.tls.server_key}",
                "require_certificate true",
                "allow_anonymous false",
                f"password_file {self.tls.password_file}",
            ]
        return "\n".join(lines) + "\n"

    @property
    def url(self) -> str:
        """host:port for messages."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start mosquitto and wait until it accepts connections."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        with open(self.folder / "mosquitto.stderr", "ab") as err:
            self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_port(self.port, timeout)
        except TimeoutError:
            self.stop()
            stderr = (self.folder / "mosquitto.stderr").read_text()
            raise RuntimeError(f"mosquitto did not start: {self.log_text()}{stderr}")

    def stop(self, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        """Stop the process (SIGKILL by default: a crash, not a shutdown) and wait for it."""
        stop_process(self.proc, sig, timeout)
        self.proc = None

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Kill and start again on the same port."""
        self.stop(sig)
        self.start()

    def wait_saved(self, timeout: float = 10.0) -> None:
        """Wait for the next autosave of the in-memory database (sessions, subscriptions, queued messages).

        A broker killed with SIGKILL comes back with its last save only: sessions created after it are lost.
        """
        def saves() -> int:
            return self.log_text().count("Saving in-memory database")

        before, deadline = saves(), time.monotonic() + timeout
        while saves() == before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"mosquitto did not save its database within {timeout} s")
            time.sleep(0.05)

    def log_text(self) -> str:
        """What mosquitto logged so far (for assertions and failure messages)."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def broker(tmp_path):
    """A plain-TCP, anonymous broker on a free loopback port; killed at teardown."""
    b = Broker(tmp_path / "broker")
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory) -> TlsFiles:
    """CA, server and client certificates and a password file, generated once per session."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_broker(tmp_path, tls_files):
    """A TLS-only broker requiring a client certificate and a user from the password file; killed at teardown."""
    b = Broker(tmp_path / "tls-broker", tls=tls_files)
    b.start()
    yield b
    b.stop()


# -- MQTT clients and the daemon as a subprocess ------------------------------------------------------------------


@dataclass
class Received:
    """One message a Collector got."""

    topic: str
    payload: bytes
    retain: bool
    at: float  # time.time() on arrival

    def json(self):
        return json.loads(self.payload)


class Collector:
    """A QoS 1 subscriber that records every message on some topic filters, for assertions.

    ``persistent=True`` gives it a session the broker keeps (MQTT 5 session expiry), so it misses nothing across
    a broker restart either.
    """

    _count = 0

    def __init__(self, port: int, filters: list[str], tls: TlsFiles | None = None, persistent: bool = False) -> None:
        self.messages: list[Received] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        Collector._count += 1
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"collector-{os.getpid()}-{Collector._count}",
                                  protocol=mqtt.MQTTv5)  # fmt: skip
        if tls is not None:
            self.client.tls_set(ca_certs=str(tls.ca), certfile=str(tls.client_cert), keyfile=str(tls.client_key),
                                keyfile_password=KEY_PASSPHRASE)  # fmt: skip
            self.client.username_pw_set(USER, PASSWORD)
        self.client.reconnect_delay_set(0.1, 0.5)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe([(f_, 1) for f_ in filters])
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.on_message = self._on_message
        props = None
        if persistent:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
        self.client.connect("127.0.0.1", port, clean_start=not persistent, properties=props)
        self.client.loop_start()
        if not self._subscribed.wait(10):
            raise TimeoutError("collector did not subscribe")

    def _on_message(self, client, userdata, msg) -> None:
        with self._lock:
            self.messages.append(Received(msg.topic, msg.payload, msg.retain, time.time()))

    def select(self, topic: str) -> list[Received]:
        """Messages on ``topic``, or on topics starting with it when it ends with ``/``."""
        with self._lock:
            if topic.endswith("/"):
                return [m for m in self.messages if m.topic.startswith(topic)]
            return [m for m in self.messages if m.topic == topic]

    def wait_for(self, predicate, timeout: float = 20.0, what: str = "messages"):
        """Poll ``predicate(self)`` until truthy; return its value or fail with ``what``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate(self)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def wait_count(self, topic: str, n: int, timeout: float = 20.0) -> list[Received]:
        """Wait until at least ``n`` messages arrived on ``topic`` (see ``select``); return them."""
        return self.wait_for(lambda c: len(c.select(topic)) >= n and c.select(topic), timeout,
                             f"{n} messages on {topic}")  # fmt: skip

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def publish(port: int, items: list[tuple[str, bytes | str]], qos: int = 1, tls: TlsFiles | None = None) -> None:
    """Publish messages with a throwaway client and wait for every acknowledgement."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    if tls is not None:
        client.tls_set(ca_certs=str(tls.ca), certfile=str(tls.client_cert), keyfile=str(tls.client_key),
                       keyfile_password=KEY_PASSPHRASE)  # fmt: skip
        client.username_pw_set(USER, PASSWORD)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        infos = [client.publish(topic, payload, qos=qos) for topic, payload in items]
        for info in infos:
            info.wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()


def toml_text(tables: dict[str, dict]) -> str:
    """A TOML document from {table: {key: str | int | float | bool | list[str]}}."""
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        for key, value in values.items():
            lines.append(f"{key} = {json.dumps(value)}")
        lines.append("")
    return "\n".join(lines)


def daemon_tables(broker: Broker, model: Path, folder: Path, **sections: dict) -> dict[str, dict]:
    """A test daemon's config: the given broker and model, fast ticks, scores on, state and HTTP in ``folder``."""
    tables = {
        "mqtt": {"port": broker.port, "client_id": f"monitor-{folder.name}", "topics": ["sensors/{stream}/telemetry"],
                 "reconnect_min": 0.2, "reconnect_max": 2.0},
        "model": {"path": str(model), "providers": "cpu", "watch_interval": 0.5},
        "topics": {"scores": "trep-edge/scores/{stream}", "scores_qos": 1},
        "monitor": {"tick_interval": 0.2},
        "state": {"path": str(folder / "state.npz"), "checkpoint_interval": 1.0},
        "http": {"port": free_port()},
    }  # fmt: skip
    for name, values in sections.items():
        tables.setdefault(name, {}).update(values)
    return tables


def parse_metrics(body: str) -> dict[str, float]:
    """Prometheus text as {full series text (name plus labels): value}."""
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


class DaemonProcess:
    """``python -m trep_edge.cli run --config ...`` as a subprocess, with its log, HTTP probes and signals."""

    def __init__(self, folder: Path, tables: dict[str, dict], env: dict[str, str] | None = None) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.tables = tables
        self.config = folder / "monitor.toml"
        self.config.write_text(toml_text(tables))
        self.http_port = tables["http"]["port"]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.log = folder / "daemon.log"
        self.runs = 0

    def start(self) -> None:
        """Start the daemon (appending to its log)."""
        self.runs += 1
        with open(self.log, "a") as fh:
            fh.write(f"--- run {self.runs}\n")
            self.proc = subprocess.Popen([sys.executable, "-m", "trep_edge.cli", "run", "--config", str(self.config)],
                                         stdout=fh, stderr=subprocess.STDOUT, env=self.env)  # fmt: skip

    def http(self, path: str) -> tuple[int, str]:
        """GET a path of the status server: (status code, body); (0, error) when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_http(self, path: str = "/readyz", code: int = 200, timeout: float = 30.0) -> None:
        """Wait until ``path`` answers ``code``; fail with the daemon's log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log_text()}")
            if self.http(path)[0] == code:
                return
            time.sleep(0.1)
        raise AssertionError(f"{path} did not answer {code} within {timeout} s; log:\n{self.log_text()}")

    def metrics(self) -> dict[str, float]:
        """The Prometheus samples, keyed by their full series text (name plus labels)."""
        code, body = self.http("/metrics")
        assert code == 200, body
        return parse_metrics(body)

    def send(self, sig: int) -> None:
        """Send a signal to the running daemon."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Send ``sig`` and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        code, self.proc = stop_process(self.proc, sig, timeout), None
        return code

    def kill_after_checkpoint(self, timeout: float = 5.0) -> None:
        """SIGKILL the daemon just after its next checkpoint (or after ``timeout``): a crash with a known state."""
        before = self.metrics()["trep_edge_checkpoints_total"]
        deadline = time.monotonic() + timeout
        while self.metrics()["trep_edge_checkpoints_total"] < before + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.stop(signal.SIGKILL)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def daemons():
    """Factory of DaemonProcess objects; every one is stopped (SIGKILL if need be) at teardown."""
    made: list[DaemonProcess] = []

    def make(folder: Path, tables: dict[str, dict], env: dict[str, str] | None = None) -> DaemonProcess:
        d = DaemonProcess(folder, tables, env)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop(signal.SIGKILL)


@pytest.fixture
def collectors():
    """Factory of Collector subscribers, closed at teardown."""
    made: list[Collector] = []

    def make(port: int, filters: list[str], tls: TlsFiles | None = None, persistent: bool = False) -> Collector:
        c = Collector(port, filters, tls, persistent)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
