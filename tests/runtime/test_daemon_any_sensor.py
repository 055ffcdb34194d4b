"""Any MQTT sensor without training: one daemon with the shipped general model, a real Mosquitto, three streams.

The streams differ in scale by 1e-3, 1 and 1e4 and carry 1, 3 and 7 channels with names the model has never seen
(a channel-independent model scores every channel a stream sends on its own lane, scaled online per lane). Each
gets a level shift of 4 scales in one channel, at its own step; the daemon is restarted from its checkpoint
between the warm-up and the shifts. Each shift must raise an alert in its own stream only, naming the shifted
channel, and the restarted daemon must resume every lane's learned scale instead of warming up again.
"""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from broker import Broker, Collector, DaemonProcess, broker, collectors, daemon_tables, daemons, publish  # noqa: F401

MODEL = Path(__file__).resolve().parents[2] / "models" / "general.onnx"
TOPIC = "plant/{stream}/data"
LENGTH, RESTART = 600, 330
# stream: (scale, channels, shifted channel, step of the shift)
STREAMS = {
    "tank-level": (1e-3, ["level"], "level", 400),
    "press-3": (1.0, ["oil_temp", "pressure", "current"], "pressure", 460),
    "line7": (1e4, [f"zone{k}" for k in range(1, 8)], "zone5", 520),
}
DETECT_WITHIN = 20  # steps after the shift


def _series(seed: int, scale: float, channels: list[str], shifted: str, at: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(LENGTH)[:, None]
    phase = rng.uniform(0, 2 * np.pi, len(channels))
    x = np.sin(2 * np.pi * t / rng.uniform(40, 70, len(channels)) + phase) + rng.normal(0, 0.1, (LENGTH, len(channels)))
    x[at:, channels.index(shifted)] += 4.0
    return scale * x + 5 * scale


def _messages(series: dict[str, np.ndarray], t0: float, start: int, stop: int) -> list[tuple[str, str]]:
    out = []
    for k in range(start, stop):
        for stream, values in series.items():
            names = STREAMS[stream][1]
            body = {"ts": t0 + k, "values": dict(zip(names, values[k].tolist()))}
            out.append((TOPIC.replace("{stream}", stream), json.dumps(body)))
    return out


def _state(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.fixture(scope="module")
def any_sensor(tmp_path_factory):
    if not MODEL.is_file():
        pytest.skip(f"{MODEL} not found")
    folder = tmp_path_factory.mktemp("any-sensor")
    series = {name: _series(i, *spec) for i, (name, spec) in enumerate(STREAMS.items())}
    broker = Broker(folder / "broker")
    broker.start()
    tables = daemon_tables(broker, MODEL, folder, mqtt={"topics": [TOPIC]}, windows={"max_gap": 5})
    daemon = DaemonProcess(folder, tables)
    collector = None
    t0 = float(int(time.time())) - LENGTH
    try:
        collector = Collector(broker.port, ["trep-edge/#"])
        phases = []
        for start, stop in ((0, RESTART), (RESTART, LENGTH)):
            daemon.start()
            daemon.wait_http("/readyz", timeout=60)
            publish(broker.port, _messages(series, t0, start, stop))
            # Every step but each stream's newest is final once a newer one arrived.
            want = sum(1 for k in range(stop - 1) for _ in series)
            collector.wait_for(lambda c: len(c.select("trep-edge/scores/")) >= want, timeout=120,
                               what=f"scores up to step {stop - 1}")  # fmt: skip
            assert daemon.stop(signal.SIGTERM) == 0, daemon.log_text()
            phases.append(_state(folder / "state.npz"))
        scores = [m.json() for m in collector.select("trep-edge/scores/")]
        alerts = [m.json() for m in collector.select("trep-edge/alerts/")]
    finally:
        if collector is not None:
            collector.close()
        daemon.stop(signal.SIGKILL)
        broker.stop()
    return {"t0": t0, "scores": scores, "alerts": alerts, "phases": phases, "log": daemon.log_text()}


def _step(body: dict, t0: float) -> int:
    return int(round(body["timestamp"] - t0))


def test_each_level_shift_alerts_in_its_own_stream_only_and_names_the_channel(any_sensor):
    raised = [(a["stream"], _step(a, any_sensor["t0"]), a["channel"]) for a in any_sensor["alerts"]
              if a["state"] == "raised"]  # fmt: skip
    for stream, (_, _, channel, at) in STREAMS.items():
        inside = [r for r in raised if at <= r[1] <= at + DETECT_WITHIN]
        assert [(s, c) for s, _, c in inside] == [(stream, channel)], (stream, raised)


def test_every_channel_of_every_stream_is_scored_on_its_own_scale(any_sensor):
    scored = {(s["stream"], s["channel"]) for s in any_sensor["scores"] if s.get("channel")}
    assert {s for s, _ in scored} == set(STREAMS), scored
    first, _ = any_sensor["phases"]
    scales = np.sort(first["scaler/scale_"])
    assert len(scales) == sum(len(spec[1]) for spec in STREAMS.values())  # one lane per channel
    # Each lane learned its own sensor's scale: three groups six and four orders of magnitude apart.
    assert scales[0] < 1e-2 and 0.1 < scales[1] < 10 and scales[-1] > 1e3, scales


def test_the_restarted_daemon_resumes_every_lanes_scale_without_warming_up(any_sensor):
    first, second = any_sensor["phases"]
    np.testing.assert_array_less(first["scaler/count_"], second["scaler/count_"] + 1)
    assert (second["scaler/count_"] > first["scaler/count_"]).all()
    after = [s for s in any_sensor["scores"] if _step(s, any_sensor["t0"]) >= RESTART]
    assert after and not any(s["warming"] for s in after)
    assert "restored" in any_sensor["log"].lower()


def _ready(tmp_path, broker, daemons, model: Path, **sections) -> DaemonProcess:
    """A daemon with ``model`` and the given config sections on the test's broker, started and ready."""
    daemon = daemons(tmp_path, daemon_tables(broker, model, tmp_path, **sections))
    daemon.start()
    daemon.wait_http("/readyz", timeout=60)
    return daemon


def test_one_plain_number_per_topic_is_a_reading_of_the_channel_the_topic_names(tmp_path, broker, daemons,
                                                                                 collectors):  # fmt: skip
    daemon = _ready(tmp_path, broker, daemons, MODEL, mqtt={"topics": ["plant/{stream}/value/{channel}"]})
    collector = collectors(broker.port, ["trep-edge/dead-letter"])
    publish(broker.port, [("plant/press-3/value/oil_temp", "41.7"), ("plant/press-3/value/pressure", "2.5"),
                          ("plant/press-3/value/current", "null"), ("plant/press-3/value/pressure", '{"v": 2}')])
    key = 'trep_edge_malformed_total{kind="wrong_type"}'
    deadline = time.monotonic() + 20
    while daemon.metrics().get(key) != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    metrics = daemon.metrics()
    assert metrics[key] == 1 and metrics["trep_edge_readings_total"] == 3
    dead = collector.wait_count("trep-edge/dead-letter", 1)[0].json()
    assert dead["kind"] == "wrong_type" and "one number" in dead["error"]


def test_influx_line_protocol_streams_are_scored_by_series_key_and_bad_lines_counted(tmp_path, broker, daemons,
                                                                                     collectors):  # fmt: skip
    daemon = _ready(tmp_path, broker, daemons, MODEL, mqtt={"topics": ["telegraf/#"]}, input={"format": "influx"})
    collector = collectors(broker.port, ["trep-edge/scores/#"])
    t0 = int(time.time()) - 100
    lines = [f"machine,line=l3 oil_temp={40 + k % 3},vibration={k % 2}i {(t0 + k) * 10**9}" for k in range(20)]
    # One message of Telegraf's batch shape with a bad line in it, then the rest one line per message.
    publish(broker.port, [("telegraf/host1", "\n".join(lines[:10] + ['machine,line=l3 oil_temp="hot"',
                                                                    "machine oil_temp"]))]
            + [("telegraf/host1", line) for line in lines[10:]])  # fmt: skip
    scores = collector.wait_count("trep-edge/scores/machine,line=l3", 20)
    assert sorted(s.json()["timestamp"] for s in scores) == [t0 + k for k in range(20)]
    metrics = daemon.metrics()
    assert metrics['trep_edge_malformed_total{kind="bad_line"}'] == 1
    assert metrics['trep_edge_malformed_total{kind="wrong_type"}'] == 1
    assert metrics["trep_edge_readings_total"] == 20


def test_streams_sampled_at_another_period_than_the_model_are_reported(tmp_path, broker, daemons, collectors):
    """The ICU model learned hourly steps (card period 3600 s); a bed sending every second is reported on the log,
    the status topic and a metric, and the config's own period mismatch is named at start."""
    icu = Path(__file__).resolve().parents[2] / "models" / "icu-vitals.onnx"
    daemon = _ready(tmp_path, broker, daemons, icu, mqtt={"topics": ["icu/{bed}/vitals"]})
    status = collectors(broker.port, ["trep-edge/status/#"])
    t0 = int(time.time()) - 100
    vitals = {"HR": 80, "O2Sat": 97, "Temp": 37, "SBP": 120, "MAP": 85, "DBP": 65, "Resp": 18}
    publish(broker.port, [("icu/bed1/vitals", json.dumps({"ts": t0 + k, "values": vitals})) for k in range(12)])
    deadline = time.monotonic() + 25
    while daemon.metrics().get("trep_edge_streams_period_mismatch") != 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert daemon.metrics()["trep_edge_streams_period_mismatch"] == 1
    log = daemon.log_text()
    assert "trained on readings every 3600 s, but [windows] period is 1 s" in log
    assert "1 stream(s) send at another period than model icu-vitals was trained on (3600 s): e.g. bed1 every 1 s" in log
    reports = [m.json().get("period_mismatch") for m in status.select("trep-edge/status/")]
    assert {"streams": 1, "model_period": 3600.0, "examples": {"bed1": 1.0}} in reports


def test_sparkplug_b_device_data_is_scored_once_in_order_on_its_group_node_device_stream(tmp_path, broker, daemons,
                                                                                        collectors):  # fmt: skip
    """An edge node speaking Sparkplug B: NBIRTH, DBIRTH (names and aliases), then DDATA with aliases only; bad input
    of the three Sparkplug kinds (bad_protobuf, unknown_alias, bad_topic) is counted and costs nothing else."""
    from trep_edge.runtime.service.sparkplug import payload_class

    payload = payload_class()
    daemon = _ready(tmp_path, broker, daemons, MODEL, mqtt={"topics": ["spBv1.0/#"]}, input={"format": "sparkplug"})
    collector = collectors(broker.port, ["trep-edge/scores/#", "trep-edge/dead-letter"])
    names, steps = ["oil_temp", "pressure", "current"], 120
    t0 = int(time.time()) - 200
    node = payload(timestamp=t0 * 1000, seq=0)
    node.metrics.add(name="bdSeq", alias=100, datatype=8, long_value=0)
    node.metrics.add(name="Node Control/Rebirth", alias=101, datatype=11, boolean_value=False)
    device = payload(timestamp=t0 * 1000, seq=1)
    for alias, name in enumerate(names, start=1):
        device.metrics.add(name=name, alias=alias, datatype=10, double_value=0.0)
    messages = [("spBv1.0/plant/NBIRTH/edge1", node.SerializeToString()),
                ("spBv1.0/plant/DBIRTH/edge1/press3", device.SerializeToString())]  # fmt: skip
    for k in range(steps):
        data = payload(timestamp=(t0 + k) * 1000, seq=(k + 2) % 256)
        for alias in range(1, len(names) + 1):
            data.metrics.add(alias=alias, double_value=40.0 + alias + np.sin(k / 7 + alias))
        messages.append(("spBv1.0/plant/DDATA/edge1/press3", data.SerializeToString()))
        if k == steps // 2:  # bad input of each Sparkplug kind, between good messages
            messages += [("spBv1.0/plant/DDATA/edge1/press3", b"\xff\xfe not a protobuf"),
                         ("spBv1.0/plant/DDATA/edge1/press4", data.SerializeToString()),  # no DBIRTH for press4
                         ("spBv1.0/plant/BOGUS/edge1", data.SerializeToString())]  # fmt: skip
    publish(broker.port, messages)
    scores = [m.json() for m in collector.wait_count("trep-edge/scores/plant/edge1/press3", steps, timeout=60)]
    assert [s["timestamp"] for s in scores] == [t0 + k for k in range(steps)]  # each DDATA once, in order
    assert {s["stream"] for s in scores} == {"plant/edge1/press3"}
    assert daemon.alive() and daemon.http("/healthz")[0] == 200
    metrics = daemon.metrics()
    for kind in ("bad_protobuf", "unknown_alias", "bad_topic"):
        assert metrics[f'trep_edge_malformed_total{{kind="{kind}"}}'] == 1, kind
    assert metrics["trep_edge_readings_total"] == steps
    # press4's DDATA repeats the seq of the one before it: a gap, and one rebirth request to edge1, which the daemon
    # (subscribed to spBv1.0/#) hears too.
    assert metrics["trep_edge_sparkplug_seq_gaps_total"] == 1
    assert sum(v for k, v in metrics.items() if k.startswith("trep_edge_sparkplug_rebirth_requests_total")) == 1
    assert metrics["trep_edge_messages_total"] == steps + 5 + 1
    assert len(collector.select("trep-edge/scores/plant/edge1/press3")) == steps  # and no score twice since
    letters = [m.json() for m in collector.wait_count("trep-edge/dead-letter", 3)]
    assert {(d["kind"], d["topic"]) for d in letters} == {
        ("bad_protobuf", "spBv1.0/plant/DDATA/edge1/press3"), ("unknown_alias", "spBv1.0/plant/DDATA/edge1/press4"),
        ("bad_topic", "spBv1.0/plant/BOGUS/edge1")}
