"""The production broker config (deploy/mosquitto/mosquitto.conf and acl, only paths and port substituted) on a real
Mosquitto with TLS: clients without valid credentials are refused, a bed publisher cannot write another bed's topic
(MQTT 5 QoS 1: PUBACK reason 135 and nothing delivered), the monitor reads telemetry and writes only its outputs
(and Sparkplug rebirth requests), a daemon logged in as the monitor user scores a bed's reading through it, and an
operator's ack reaches that daemon while the same ack from a bed account is refused by the broker."""
from __future__ import annotations

import getpass
import json
import re
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import paho.mqtt.client as mqtt
import pytest
from broker import DaemonProcess, daemon_tables, stop_process, tls_files  # noqa: F401 - fixture
from paho.mqtt.enums import CallbackAPIVersion

from trep_edge.local_broker import MOSQUITTO, free_port, wait_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto"
USERS = {"bed01": "pw-bed01", "bed02": "pw-bed02", "trep-edge": "pw-monitor", "dashboard": "pw-dashboard",
         "operator": "pw-operator", "his": "pw-his"}
NOT_AUTHORIZED = 135


def production_config(folder: Path, port: int, tls) -> Path:
    """deploy/mosquitto/mosquitto.conf with this machine's paths, a loopback port and a log file."""
    text = (DEPLOY / "mosquitto.conf").read_text()
    swaps = {r"^listener 8883$": f"listener {port} 127.0.0.1", r"^cafile .*": f"cafile {tls.ca}",
             r"^certfile .*": f"certfile {tls.server_cert}", r"^keyfile .*": f"keyfile {tls.server_key}",
             r"^password_file .*": f"password_file {folder / 'passwd'}", r"^acl_file .*": f"acl_file {DEPLOY / 'acl'}",
             r"^persistence_location .*": f"persistence_location {folder}/",
             r"^log_dest syslog$": f"log_dest file {folder / 'mosquitto.log'}"}  # fmt: skip
    for pattern, line in swaps.items():
        text, n = re.subn(pattern, line, text, flags=re.M)
        assert n == 1, f"deploy/mosquitto/mosquitto.conf has no line matching {pattern}"
    # As root, mosquitto would switch to user "mosquitto", which cannot read the test's private folder.
    conf = folder / "mosquitto.conf"
    conf.write_text(f"user {getpass.getuser()}\n" + text)
    return conf


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory, tls_files):
    folder = tmp_path_factory.mktemp("acl-broker")
    for k, (user, password) in enumerate(USERS.items()):  # the documented way to make the password file
        create = ["-c"] if k == 0 else []
        subprocess.run(["mosquitto_passwd", "-b", *create, str(folder / "passwd"), user, password], check=True,
                       capture_output=True, timeout=30)  # fmt: skip
    port = free_port()
    proc = subprocess.Popen([MOSQUITTO, "-c", str(production_config(folder, port, tls_files))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        wait_port(port)
    except TimeoutError:
        proc.kill()
        raise AssertionError(proc.communicate()[1].decode())
    yield port, tls_files
    stop_process(proc, 9, 10)


class Client:
    """An MQTT 5 client over TLS that records its CONNACK, PUBACK reason codes and received messages."""

    def __init__(self, port: int, tls, user: str | None, password: str | None = None, subscribe: str = "") -> None:
        self.connack = None
        self.pubacks: dict[int, int] = {}
        self.messages: list[tuple[str, bytes]] = []
        self._event = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.client.tls_set(ca_certs=str(tls.ca))
        if user is not None:
            self.client.username_pw_set(user, password)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *a: self._event.set()
        self.client.on_publish = lambda c, u, mid, rc, p: self.pubacks.__setitem__(mid, rc.value)
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, m.payload))
        self._subscribe = subscribe
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        deadline = time.monotonic() + 10
        while self.connack is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if subscribe and self.connack == 0:
            assert self._event.wait(10), "no SUBACK"

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self.connack = reason_code.value
        if self._subscribe and not reason_code.is_failure:
            client.subscribe(self._subscribe, qos=1)

    def publish(self, topic: str, payload: str) -> int:
        """Publish with QoS 1 and return the PUBACK reason code (0 = accepted)."""
        info = self.client.publish(topic, payload, qos=1)
        deadline = time.monotonic() + 10
        while info.mid not in self.pubacks and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.pubacks[info.mid]

    def settled_messages(self, timeout: float = 5.0, quiet: float = 0.3) -> list[tuple[str, bytes]]:
        """The messages received once the first has arrived and ``quiet`` more seconds passed (time for any other,
        such as a forged one, to arrive too)."""
        deadline = time.monotonic() + timeout
        while not self.messages and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(quiet)
        return list(self.messages)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def login(acl_broker):
    """Factory of clients logged in as a user of USERS (or with the given password); closed at teardown."""
    port, tls = acl_broker
    made: list[Client] = []

    def make(user: str | None, subscribe: str = "", password: str | None = None) -> Client:
        made.append(Client(port, tls, user, password or USERS.get(user or ""), subscribe))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_clients_without_valid_credentials_are_refused(login):
    for user, password in ((None, None), ("bed01", "wrong"), ("nobody", "x")):
        client = login(user, password=password)
        assert client.connack in (134, 135), f"{user!r} connected: CONNACK {client.connack}"


def test_a_bed_publisher_writes_its_own_topic_only(login):
    monitor, bed = login("trep-edge", subscribe="icu/+/vitals"), login("bed01")
    assert bed.connack == 0 and monitor.connack == 0
    assert bed.publish("icu/bed02/vitals", "forged") == NOT_AUTHORIZED
    assert bed.publish("trep-edge/alerts/bed01", "forged") == NOT_AUTHORIZED
    assert bed.publish("icu/bed01/vitals", "mine") == 0
    assert monitor.settled_messages() == [("icu/bed01/vitals", b"mine")]


def test_the_monitor_reads_telemetry_and_writes_only_its_outputs(login):
    dashboard, monitor = login("dashboard", subscribe="trep-edge/#"), login("trep-edge")
    assert monitor.publish("icu/bed01/vitals", "not the monitor's to write") == NOT_AUTHORIZED
    assert dashboard.publish("trep-edge/alerts/bed01", "not the dashboard's to write") == NOT_AUTHORIZED
    assert monitor.publish("trep-edge/alerts/bed01", "alert") == 0
    assert dashboard.settled_messages() == [("trep-edge/alerts/bed01", b"alert")]
    # Sparkplug B: the monitor reads spBv1.0/# and writes a rebirth request to an edge node, nothing else there.
    sparkplug = login("trep-edge", subscribe="spBv1.0/#")
    for topic in ("spBv1.0/plant/DCMD/edge1/press3", "spBv1.0/plant/NDATA/edge1", "spBv1.0/STATE/scada"):
        assert monitor.publish(topic, "not the monitor's to write") == NOT_AUTHORIZED, topic
    assert monitor.publish("spBv1.0/plant/NCMD/edge1", "rebirth") == 0
    assert sparkplug.settled_messages() == [("spBv1.0/plant/NCMD/edge1", b"rebirth")]


def test_a_daemon_logged_in_as_the_monitor_scores_a_beds_reading(acl_broker, login, tmp_path, univariate_model):
    port, tls = acl_broker
    tables = daemon_tables(SimpleNamespace(port=port), univariate_model, tmp_path, mqtt={
        "topics": ["icu/{bed}/vitals"], "tls": True, "ca_file": str(tls.ca), "username": "trep-edge"})  # fmt: skip
    daemon = DaemonProcess(tmp_path, tables, env={"TREP_EDGE_MQTT_PASSWORD": USERS["trep-edge"]})
    dashboard, bed = login("dashboard", subscribe="trep-edge/#"), login("bed01")
    try:
        daemon.start()
        daemon.wait_http("/readyz")
        ts = float(int(time.time()))
        assert bed.publish("icu/bed01/vitals", json.dumps({"ts": ts, "values": {"value": 63.0}})) == 0
        deadline = time.monotonic() + 15
        while not any(t == "trep-edge/scores/bed01" for t, _ in dashboard.messages) and time.monotonic() < deadline:
            time.sleep(0.05)
        topics = {t for t, _ in dashboard.messages}
        assert "trep-edge/scores/bed01" in topics, (topics, daemon.log_text())
        status = [json.loads(p) for t, p in dashboard.messages if t.startswith("trep-edge/status/")]
        assert status and status[-1]["state"] == "online" and status[-1]["shard"] == "0/1"
    finally:
        daemon.stop()


def test_an_operators_ack_reaches_the_monitor_and_a_beds_is_refused_by_the_broker(acl_broker, login, tmp_path,
                                                                                    univariate_model, ucr_series):
    from test_daemon_lifecycle import SPIKE, _series

    port, tls = acl_broker
    tables = daemon_tables(SimpleNamespace(port=port), univariate_model, tmp_path, mqtt={
        "topics": ["icu/{bed}/vitals"], "tls": True, "ca_file": str(tls.ca), "username": "trep-edge"},
        alerts={"clear_after": 100_000}, monitor={"tick_interval": 0.1})  # fmt: skip
    daemon = DaemonProcess(tmp_path, tables, env={"TREP_EDGE_MQTT_PASSWORD": USERS["trep-edge"]})
    operator, bed, his = login("operator", subscribe="trep-edge/#"), login("bed01"), login("his")
    try:
        daemon.start()
        daemon.wait_http("/readyz")
        t0 = float(int(time.time())) - 1000
        for k, value in enumerate(_series(ucr_series)[: SPIKE + 5]):
            assert bed.publish("icu/bed01/vitals", json.dumps({"ts": t0 + k, "values": {"value": float(value)}})) == 0

        def received(topic: str) -> list[dict]:
            return [json.loads(p) for t, p in list(operator.messages) if t.startswith(topic)]

        deadline = time.monotonic() + 20
        while not received("trep-edge/alerts/bed01") and time.monotonic() < deadline:
            time.sleep(0.05)
        [raised] = received("trep-edge/alerts/bed01")
        ack = {"command": "ack", "alert_id": raised["alert_id"], "by": "nurse.k"}
        assert bed.publish("trep-edge/commands", json.dumps({**ack, "by": "bed01"})) == NOT_AUTHORIZED
        assert bed.publish("trep-edge/beds", json.dumps({"event": "discharge", "stream": "bed01"})) == NOT_AUTHORIZED
        assert his.publish("trep-edge/commands", json.dumps(ack)) == NOT_AUTHORIZED  # bed events only
        assert operator.publish("trep-edge/commands", json.dumps(ack)) == 0
        deadline = time.monotonic() + 10
        while not received("trep-edge/replies/") and time.monotonic() < deadline:
            time.sleep(0.05)
        [reply] = received("trep-edge/replies/")  # the forged ones never reached the daemon: no reply of theirs
        assert (reply["result"], reply["by"], reply["alert_id"]) == ("accepted", "nurse.k", raised["alert_id"])
        assert daemon.metrics()['trep_edge_control_requests_total{request="ack",result="accepted"}'] == 1

        assert his.publish("trep-edge/beds", json.dumps({"event": "discharge", "stream": "bed01"})) == 0
        deadline = time.monotonic() + 10
        while len(received("trep-edge/alerts/bed01")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        cleared = received("trep-edge/alerts/bed01")[-1]  # the episode's next message says who acknowledged it
        assert (cleared["state"], cleared["acknowledged"], cleared["acknowledged_by"]) == ("cleared", True, "nurse.k")
    finally:
        daemon.stop()
