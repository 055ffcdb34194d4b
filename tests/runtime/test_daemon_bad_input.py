"""Bad input of every kind reaches a running daemon: it stays up, counts each kind, dead-letters samples, and
scores the next valid reading. Also the stream-level guards: a reading stamped far ahead (a clock slip) does not
reset its stream, and streams that fall silent are closed instead of holding memory forever."""
from __future__ import annotations

import json
import time

import numpy as np

from broker import broker, collectors, daemon_tables, daemons, publish  # noqa: F401 - fixtures

from trep_edge.runtime.service.payloads import MALFORMED_KINDS


def _bad_messages(now: float) -> dict[str, list[tuple[str, bytes]]]:
    """At least one message per malformed kind, on bed1's topic unless the kind needs another."""
    topic = "icu/bed1/vitals"

    def js(obj) -> bytes:
        return json.dumps(obj).encode()

    ok = {"HR": 70, "SpO2": 97, "RESP": 16}
    return {
        "not_json": [(topic, b"{HR: 70"), (topic, b"\xff\xfe\x00\x01 binary")],
        "not_object": [(topic, b"42")],
        "missing_field": [(topic, js({"ts": now}))],
        "wrong_type": [(topic, js({"ts": now, "values": {"HR": "70"}})), (topic, js({"ts": True, "values": ok}))],
        "non_finite": [(topic, b'{"ts": %.3f, "values": {"HR": Infinity}}' % now),
                       (topic, b'{"values": {"HR": 1e999}}')],
        "unknown_channel": [(topic, js({"ts": now, "values": {**ok, "Temp": 37.0}}))],
        "absurd_timestamp": [(topic, js({"ts": now * 1000, "values": ok})), (topic, js({"ts": 0, "values": ok}))],
        "too_large": [(topic, js({"ts": now, "values": ok, "note": "x" * 1500}))],
        "senml_invalid": [(topic, js([{"n": "HR", "vs": "high"}]))],
        "empty": [(topic, b""), (topic, js({"ts": now, "values": {}}))],
        "stream_mismatch": [(topic, js({"stream": "bed9", "ts": now, "values": ok}))],
        "bad_stream_id": [(topic, js({"stream": "bed\u202e1", "ts": now, "values": ok}))],
        "duplicate_key": [(topic, b'{"ts": %.3f, "values": {"HR": 70, "HR": 120}}' % now)],
    }  # fmt: skip


def _ready_daemon(tmp_path, broker, daemons, model, **sections):
    """A daemon on ``icu/{bed}/vitals`` with the given config sections, started and ready."""
    tables = daemon_tables(broker, model, tmp_path, mqtt={"topics": ["icu/{bed}/vitals"]}, **sections)
    daemon = daemons(tmp_path, tables)
    daemon.start()
    daemon.wait_http("/readyz")
    return daemon


def _vitals(bed: str, t: float, hr: float = 70.0) -> tuple[str, bytes]:
    """One good reading of ``bed`` at time ``t``."""
    return f"icu/{bed}/vitals", json.dumps({"ts": t, "values": {"HR": hr, "SpO2": 97, "RESP": 16}}).encode()


def test_every_kind_of_bad_input_is_counted_dead_lettered_and_survived(tmp_path, broker, daemons, collectors,
                                                                       vitals_model):  # fmt: skip
    daemon = _ready_daemon(tmp_path, broker, daemons, vitals_model,
                           input={"max_bytes": 1024, "dead_letter_interval": 0.0, "log_interval": 0.0})  # fmt: skip
    out = collectors(broker.port, ["trep-edge/#"])
    t0 = float(int(time.time()))
    good = {"HR": 72.0, "SpO2": 96.0, "RESP": 15.0}
    publish(broker.port, [("icu/bed1/vitals", json.dumps({"ts": t0, "values": good}))])
    out.wait_count("trep-edge/scores/bed1", 1)

    bad = _bad_messages(t0)
    # Line protocol's and Sparkplug B's own kinds are counted by tests/runtime/test_daemon_any_sensor.py on daemons
    # of those formats.
    own_format = {"bad_line", "bad_protobuf", "bad_topic", "unknown_alias"}
    assert set(bad) | own_format == set(MALFORMED_KINDS), "a malformed kind without a test message"
    late = ("icu/bed1/vitals", json.dumps({"ts": t0 - 5, "values": good}).encode())
    publish(broker.port, [m for messages in bad.values() for m in messages] + [late])
    publish(broker.port, [("icu/bed1/vitals", json.dumps({"ts": t0 + 1, "values": good}))])

    scores = [m.json() for m in out.wait_count("trep-edge/scores/bed1", 2)]
    assert scores[-1]["timestamp"] == t0 + 1, "not the reading sent after the bad ones"
    assert scores[-1]["values"] == good and scores[-1]["raw"] is not None

    assert daemon.alive() and daemon.http("/healthz")[0] == 200
    metrics = daemon.metrics()
    for kind, messages in bad.items():
        assert metrics.get(f'trep_edge_malformed_total{{kind="{kind}"}}') == len(messages), kind
    assert metrics.get('trep_edge_rejected_total{kind="late"}') == 1
    assert metrics["trep_edge_readings_total"] == 2
    assert metrics["trep_edge_messages_total"] == 2 + sum(len(m) for m in bad.values()) + 1

    expected = sum(len(m) for m in bad.values()) + 1  # every rejection is sampled with dead_letter_interval 0
    letters = [m.json() for m in out.wait_count("trep-edge/dead-letter", expected)]
    assert len(letters) == expected
    assert {letter["kind"] for letter in letters} == set(bad) | {"late"}
    mismatch = next(letter for letter in letters if letter["kind"] == "stream_mismatch")
    assert mismatch["topic"] == "icu/bed1/vitals" and '"bed9"' in mismatch["payload"] and "bed9" in mismatch["error"]
    assert next(letter for letter in letters if letter["kind"] == "too_large")["truncated"] is False  # 1.5 kB: whole
    assert "rejected 1 message(s) as stream_mismatch" in daemon.log_text()


def test_bad_input_is_logged_at_a_rate_limit(tmp_path, broker, daemons, vitals_model):
    daemon = _ready_daemon(tmp_path, broker, daemons, vitals_model,
                           input={"log_interval": 60.0, "dead_letter_interval": 60.0})  # fmt: skip
    publish(broker.port, [("icu/bed1/vitals", b"not json")] * 50)
    deadline = time.monotonic() + 10
    while daemon.metrics().get('trep_edge_malformed_total{kind="not_json"}') != 50 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemon.metrics().get('trep_edge_malformed_total{kind="not_json"}') == 50
    assert daemon.log_text().count("as not_json") == 1  # one line for the first, the next in 60 s with the count


def test_one_reading_an_hour_ahead_is_set_aside_and_the_stream_is_not_reset(tmp_path, broker, daemons, collectors,
                                                                             vitals_model):  # fmt: skip
    scores = collectors(broker.port, ["trep-edge/scores/#"])
    daemon = _ready_daemon(tmp_path, broker, daemons, vitals_model)
    t0 = float(int(time.time())) - 200

    def reading(t: float) -> tuple[str, bytes]:
        return _vitals("bed1", t, hr=70 + t % 5)

    # A time-zone slip: one reading stamped an hour ahead between readings on the stream's own clock.
    publish(broker.port, [reading(t0 + k) for k in range(60)] + [reading(t0 + 60 + 3600)]
            + [reading(t0 + k) for k in range(60, 120)])  # fmt: skip
    scores.wait_for(lambda c: len(c.select("trep-edge/scores/")) >= 119, timeout=30, what="119 scores")
    metrics = daemon.metrics()
    assert metrics['trep_edge_rejected_total{kind="ahead"}'] == 1 and metrics["trep_edge_readings_total"] == 120
    assert metrics['trep_edge_monitor_events_total{event="resets"}'] == 0
    steps = sorted(m.json()["step"] for m in scores.select("trep-edge/scores/"))
    assert steps == list(range(steps[0], steps[0] + len(steps)))  # every reading on the stream's clock, once


def test_streams_silent_for_evict_after_are_closed_and_leave_the_checkpoint(tmp_path, broker, daemons, vitals_model):
    daemon = _ready_daemon(tmp_path, broker, daemons, vitals_model, monitor={"tick_interval": 0.2, "evict_after": 2.0})
    t0 = float(int(time.time())) - 100
    publish(broker.port, [_vitals(bed, t0 + k) for k in range(5) for bed in ("bed1", "bed2", "bed3")])
    deadline, k = time.monotonic() + 20, 5
    while daemon.metrics()["trep_edge_streams_evicted_total"] < 2 and time.monotonic() < deadline:
        publish(broker.port, [_vitals("bed1", t0 + k)])  # bed1 keeps talking, bed2 and bed3 fell silent
        k += 1
        time.sleep(0.5)
    metrics = daemon.metrics()
    assert metrics["trep_edge_streams_evicted_total"] == 2
    assert sum(v for key, v in metrics.items() if key.startswith("trep_edge_streams{")) == 1
    assert daemon.stop() == 0
    with np.load(tmp_path / "state.npz") as state:
        assert json.loads(str(state["monitor/config"]))["names"] == ["bed1"]


def test_an_absurd_value_is_a_sensor_alert_and_blinds_nothing(tmp_path, broker, daemons, collectors, vitals_model):
    out = collectors(broker.port, ["trep-edge/scores/#", "trep-edge/alerts/#"])
    daemon = _ready_daemon(tmp_path, broker, daemons, vitals_model)
    t0 = float(int(time.time())) - 200
    # A corrupted register: heart rate 1e15 once (it blinded the stream for a window and then alerted, before).
    publish(broker.port, [_vitals("bed1", t0 + k, hr=1e15 if k == 60 else 70 + k % 5) for k in range(120)])
    scores = out.wait_count("trep-edge/scores/bed1", 120, timeout=30)
    sensor = [m.json() for m in out.wait_count("trep-edge/alerts/bed1", 2)]
    assert [(s["kind"], s["state"], s["channel"], s["value"]) for s in sensor] == [
        ("sensor", "raised", "HR", 1e15), ("sensor", "cleared", "HR", 71.0)]
    by_time = {m.json()["timestamp"]: m.json() for m in scores}
    assert by_time[t0 + 60]["values"]["HR"] is None  # filed as missing
    assert all(by_time[t0 + k]["raw"] is not None for k in range(61, 120))  # every later reading scored
    metrics = daemon.metrics()
    assert metrics['trep_edge_monitor_events_total{event="implausible_values"}'] == 1
    assert metrics['trep_edge_sensor_faults_total{state="raised"}'] == 1
    assert not any(m.json()["kind"] == "anomaly" for m in out.select("trep-edge/alerts/"))


def test_streams_refused_at_max_streams_are_counted_by_topic_template(tmp_path, broker, daemons, vitals_model):
    tables = daemon_tables(broker, vitals_model, tmp_path, mqtt={"topics": ["icu/{bed}/vitals", "ward/{bed}/vitals"]},
                           windows={"max_streams": 2})  # fmt: skip
    daemon = daemons(tmp_path, tables)
    daemon.start()
    daemon.wait_http("/readyz")
    t0 = float(int(time.time())) - 100
    flood = [(f"ward/{bed}/vitals", _vitals(bed, t0)[1]) for bed in ("w1", "w2", "w3", "w4")]
    publish(broker.port, [_vitals("bed1", t0)] + flood + [_vitals("bed1", t0 + 1)])
    deadline = time.monotonic() + 10
    while daemon.metrics().get("trep_edge_readings_total") != 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    metrics = daemon.metrics()
    assert metrics["trep_edge_readings_total"] == 3  # bed1 twice and w1: two streams at most
    assert metrics['trep_edge_streams_refused_total{pattern="ward/{bed}/vitals"}'] == 3
    assert 'trep_edge_streams_refused_total{pattern="icu/{bed}/vitals"}' not in metrics
