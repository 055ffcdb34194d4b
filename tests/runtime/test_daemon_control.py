"""Operator commands and bed events on a real Mosquitto (docs/alerts.md, "Commands and bed events"): malformed
requests are refused, counted and dead-lettered; a silence keeps an episode off the alerts topic until it ends; an ack
marks the episode and survives a restart; admit, discharge and transfer act on the streams' state; a disconnected
sensor is reported and never alerts. The broker's ACL side is tests/deploy/test_broker_acl.py.

Streams are the univariate fixture model's (UCR series 135); every wait is bounded by a deadline.
"""
from __future__ import annotations

import json
import time

import numpy as np
from broker import Collector, broker, collectors, daemon_tables, daemons, publish  # noqa: F401 - fixtures
from test_daemon_bad_input import _ready_daemon
from test_daemon_lifecycle import _json, _reading, _retained, _send, _series, _wait_scores

from trep_edge.runtime.service.checkpoint import load_checkpoint
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.service.replay import RecordedSeries
from trep_edge.runtime.service.score_file import score_recording

REPLIES = "trep-edge/replies/"


def _request(broker, topic: str, **doc) -> None:
    publish(broker.port, [(f"trep-edge/{topic}", json.dumps(doc))])


def _replies(c: Collector, n: int) -> list[dict]:
    return [m.json() for m in c.wait_count(REPLIES, n)]


def _malformed(daemon, kind: str) -> float:
    return daemon.metrics().get(f'trep_edge_malformed_total{{kind="{kind}"}}')


def test_a_silence_holds_an_episode_back_until_it_ends_and_an_ack_marks_it_across_a_restart(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    out = collectors(broker.port, ["trep-edge/#"])
    # clear_after far away: the spike's episode stays open until it is discharged.
    daemon = _ready_daemon(tmp_path, broker, daemons, univariate_model, alerts={"clear_after": 100_000},
                           monitor={"tick_interval": 0.1}, input={"dead_letter_interval": 0.0})  # fmt: skip
    publish(broker.port, [("trep-edge/commands", b"not json"),
                          ("trep-edge/commands", json.dumps({"command": "admit", "stream": "spiky"})),
                          ("trep-edge/beds", json.dumps({"event": "transfer", "stream": "spiky", "request_id": "r0"}))])
    bad = _replies(out, 3)
    assert [(r["result"], r["reason"]) for r in bad] == [("refused", "control_not_json"),
                                                         ("refused", "control_unknown"),
                                                         ("refused", "control_invalid")]  # fmt: skip
    assert bad[2]["request_id"] == "r0" and bad[2]["request"] == "transfer" and bad[2]["topic"] == "trep-edge/beds"
    letters = [m.json() for m in out.wait_count("trep-edge/dead-letter", 3)]
    assert [m["kind"] for m in letters] == ["control_not_json", "control_unknown", "control_invalid"]
    assert [_malformed(daemon, k) for k in ("control_not_json", "control_unknown", "control_invalid")] == [1, 1, 1]

    _request(broker, "commands", command="silence", stream="spiky", seconds=600, by="op", request_id="s1")
    silence = _replies(out, 4)[-1]
    assert (silence["result"], silence["request_id"], silence["by"]) == ("accepted", "s1", "op")
    t0 = float(int(time.time())) - 1000
    values = _series(ucr_series, length=200)
    _send(broker, "spiky", values, t0)
    [raised] = out.wait_for(lambda c: _json(c, "trep-edge/state/spiky", kind="anomaly"), what="the raise, retained")
    assert raised["state"] == "raised" and raised["silenced"] is True and raised["silenced_until"] == silence["until"]
    _wait_scores(out, "spiky", len(values))
    assert not _json(out, "trep-edge/alerts/spiky", kind="anomaly"), "notified inside the silence"

    _request(broker, "commands", command="silence", stream="spiky", seconds=1)  # the same silence, shortened
    shortened = _replies(out, 5)[-1]
    [notified] = out.wait_for(lambda c: _json(c, "trep-edge/alerts/spiky", kind="anomaly"), timeout=10,
                              what="the held-back raise, once the silence ended")  # fmt: skip
    assert (notified["alert_id"], notified["state"], notified["silenced"]) == (raised["alert_id"], "raised", False)
    assert notified["published_at"] >= shortened["until"]
    assert daemon.metrics()["trep_edge_alerts_withheld_total"] == 1 and daemon.metrics()["trep_edge_silences"] == 0

    _request(broker, "commands", command="ack", alert_id=raised["alert_id"], by="nurse.k")
    ack = _replies(out, 6)[-1]
    assert (ack["result"], ack["alert_id"], ack["by"]) == ("accepted", raised["alert_id"], "nurse.k")
    retained = _retained(broker, "trep-edge/state/spiky")
    assert (retained["alert_id"], retained["acknowledged"], retained["acknowledged_by"]) == (raised["alert_id"], True,
                                                                                             "nurse.k")  # fmt: skip
    assert len(_json(out, "trep-edge/alerts/spiky", kind="anomaly")) == 1, "an ack is not notified again"

    assert daemon.stop() == 0
    _, meta = load_checkpoint(tmp_path / "state.npz")
    assert set(meta["control"]["acks"]) == {raised["alert_id"]}
    daemon.start()
    daemon.wait_http("/readyz")
    _request(broker, "beds", event="discharge", stream="spiky")
    [cleared] = out.wait_for(lambda c: _json(c, "trep-edge/alerts/spiky", kind="anomaly", state="cleared"),
                             timeout=10, what="the discharge's clear")  # fmt: skip
    assert (cleared["alert_id"], cleared["acknowledged_by"]) == (raised["alert_id"], "nurse.k")  # the ack came back
    assert _replies(out, 7)[-1]["result"] == "accepted"
    assert daemon.metrics()['trep_edge_control_requests_total{request="discharge",result="accepted"}'] == 1


def test_admit_restarts_a_bed_transfer_moves_its_state_and_a_disconnected_sensor_never_alerts(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    out = collectors(broker.port, ["trep-edge/#"])
    daemon = _ready_daemon(tmp_path, broker, daemons, univariate_model, alerts={"clear_after": 100_000},
                           monitor={"tick_interval": 0.1}, input={"disconnected": ["*=0"]})  # fmt: skip
    t0 = float(int(time.time())) - 1000
    spiky, calm = _series(ucr_series, length=200), _series(ucr_series, spike=None, length=200)
    quiet = ucr_series.values[3000:3200].copy()
    zeros = quiet.copy()
    zeros[100:130] = 0.0  # the bedside monitor is unplugged: MIMIC-II numerics write 0

    def offline(values: np.ndarray) -> list:
        engine = load_engine(univariate_model, "cpu")
        return score_recording(engine, RecordedSeries("bed5", ["value"], values.reshape(-1, 1))).events

    assert offline(quiet) == [], "the fixture model alerts on this stretch anyway: pick a quiet one"
    assert offline(zeros)[0][1] == "raised", "zeros scored as values must alert, or the test proves nothing"
    _send(broker, "bed1", spiky, t0)
    _send(broker, "bed3", calm[:120], t0)
    _send(broker, "bed5", zeros, t0)
    [raised] = out.wait_for(lambda c: _json(c, "trep-edge/alerts/bed1", kind="anomaly"), what="bed1's episode")
    _wait_scores(out, "bed3", 120)
    before = len(_wait_scores(out, "bed1", len(spiky)))

    _request(broker, "beds", event="admit", stream="bed1", request_id="a1")
    _request(broker, "beds", event="transfer", stream="bed3", to="bed4", request_id="t1")
    _request(broker, "beds", event="discharge", stream="bed3", request_id="d1")  # gone with the transfer
    replies = {r["request_id"]: r for r in _replies(out, 3)}
    assert (replies["a1"]["result"], replies["a1"]["known"]) == ("accepted", True)
    assert (replies["t1"]["result"], replies["t1"]["to"], replies["t1"]["replaced"]) == ("accepted", "bed4", False)
    assert (replies["d1"]["result"], replies["d1"]["reason"]) == ("refused", "unknown_stream")
    [cleared] = _json(out, "trep-edge/alerts/bed1", kind="anomaly", state="cleared")
    assert cleared["alert_id"] == raised["alert_id"] and cleared["status"] == "resolved"

    _send(broker, "bed1", calm[:5], t0 + len(spiky))
    _send(broker, "bed4", calm[120:150], t0, start=120)
    after = [s for s in _wait_scores(out, "bed1", before + 5) if s["timestamp"] >= t0 + len(spiky)]
    assert after and all(s["warming"] for s in after), "a new patient warms up again"
    moved = _wait_scores(out, "bed4", 30)
    assert not any(s["warming"] for s in moved) and all(s["score"] is not None for s in moved)  # no warm-up gap
    assert daemon.metrics()['trep_edge_streams{state="active"}'] == 2  # bed4 and bed5; bed3 is gone

    scored = _wait_scores(out, "bed5", len(zeros) - 30)
    assert not any(t0 + 100 <= s["timestamp"] < t0 + 130 for s in scored), "a disconnected reading was scored"
    sensor = [(m["fault"], m["state"], m["channel"], m["alert_id"]) for m in _json(out, "trep-edge/alerts/bed5")]
    assert sensor == [("disconnected", "raised", None, "bed5:sensor"), ("disconnected", "cleared", None, "bed5:sensor")]
    assert daemon.metrics()['trep_edge_monitor_events_total{event="disconnected_readings"}'] == 30
