"""End to end: a UCR-anomaly series replayed through a real broker into the daemon, compared with ``trep-edge score``.

Two streams are replayed at once, accelerated (1000 readings/s each), by two ``trep-edge replay`` processes:

- ``ucr135``: UCR series 135 as recorded, its first 4,500 readings (they hold the labelled anomaly, and the rest of
  the series adds only time). The tiny fixture model (16 dims, 40 training steps) does NOT detect its
  labelled anomaly (steps 4186..4198), offline either; nor does the shipped general model (docs/detection.md: UCR
  top-1 0 for every detector in the benchmark). The detection assertion on it is kept, marked as an expected
  failure (strict, so it is noticed if a better fixture model starts detecting it).
- ``ucr135-spike``: the series' first 3,000 readings with a 3-point spike (+200, about 15 normalisation scales)
  injected at steps 2500..2502 and labelled there (through the file name, as the archive labels its anomalies). The
  model detects spikes; this stream shows the alert path end to end.

For both, the daemon's per-step scores and its alert episodes must equal those of ``trep-edge score`` on the same
file.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from broker import Broker, Collector, DaemonProcess, daemon_tables
from ucr_files import write_ucr

from trep_edge.runtime.core.detector import DetectorConfig

TOPIC = "sensors/{stream}/telemetry"
SPIKE_AT = (2500, 2503)  # injected anomaly, steps [start, end)
LENGTH = {"ucr135": 4500, "ucr135-spike": 3000}  # readings per stream: cuts of the series
RATE = 1000


def _score_csv(model, data, stream, out) -> list[dict]:
    cmd = [sys.executable, "-m", "trep_edge.cli", "score", str(data), "--model", str(model), "--stream", stream,
           "--out", str(out), "--no-plot", "--providers", "cpu"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    with open(out) as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, univariate_model, ucr_series):
    """Replay both streams through broker and daemon; return the daemon's scores/alerts and the offline CSVs."""
    folder = tmp_path_factory.mktemp("e2e")
    real = folder / "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"
    write_ucr(real, ucr_series.values[: LENGTH["ucr135"]])
    spiked_values = ucr_series.values[: LENGTH["ucr135-spike"]].copy()
    spiked_values[SPIKE_AT[0] : SPIKE_AT[1]] += 200.0
    # Archive names give 1-based inclusive anomaly positions.
    spiked = folder / f"135_UCR_Anomaly_InternalBleeding16spike_1200_{SPIKE_AT[0] + 1}_{SPIKE_AT[1]}.txt"
    write_ucr(spiked, spiked_values)
    streams = {"ucr135": real, "ucr135-spike": spiked}

    broker = Broker(folder / "broker")
    broker.start()
    daemon = DaemonProcess(folder / "daemon", daemon_tables(broker, univariate_model, folder / "daemon"))
    collector = None
    replays = []
    try:
        daemon.start()
        daemon.wait_http("/readyz")
        collector = Collector(broker.port, ["trep-edge/#"])
        for stream, path in streams.items():
            cmd = [sys.executable, "-m", "trep_edge.cli", "replay", str(path), "--topic", TOPIC, "--broker",
                   broker.url, "--rate", str(RATE), "--stream", stream]  # fmt: skip
            replays.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        for proc in replays:
            out, _ = proc.communicate(timeout=90)
            assert proc.returncode == 0, out.decode()
        for stream in streams:
            collector.wait_count(f"trep-edge/scores/{stream}", LENGTH[stream], timeout=60)
        daemon_scores = {s: [m.json() for m in collector.select(f"trep-edge/scores/{s}")] for s in streams}
        alerts = {s: [m.json() for m in collector.select(f"trep-edge/alerts/{s}")] for s in streams}
        metrics = daemon.metrics()
        # A late subscriber gets each stream's current alert state, retained.
        late = Collector(broker.port, ["trep-edge/state/#"])
        retained = {m.topic: m for m in late.wait_for(lambda c: c.select("trep-edge/state/"), what="retained states")}
        late.close()
    finally:
        for proc in replays:
            if proc.poll() is None:
                proc.kill()
        if collector is not None:
            collector.close()
        daemon.stop()
        broker.stop()
    offline = {s: _score_csv(univariate_model, p, s, folder / f"{s}.csv") for s, p in streams.items()}
    labels = {"ucr135": ucr_series.labels[: LENGTH["ucr135"]], "ucr135-spike": _spike_labels(LENGTH["ucr135-spike"])}
    return {"scores": daemon_scores, "alerts": alerts, "offline": offline, "metrics": metrics, "retained": retained,
            "labels": labels}


def _spike_labels(n: int) -> np.ndarray:
    labels = np.zeros(n, dtype=bool)
    labels[SPIKE_AT[0] : SPIKE_AT[1]] = True
    return labels


def _floats(rows: list, key: str) -> np.ndarray:
    return np.array([np.nan if r[key] in ("", None) else float(r[key]) for r in rows])


def _daemon_events(e2e, stream) -> list[tuple[int, str, str, str, str]]:
    first = e2e["scores"][stream][0]["step"]
    return [(round(a["window_end"]) - first, a["state"], a["severity"], a["alert_id"], a["cause"])
            for a in e2e["alerts"][stream]]  # fmt: skip


def _offline_events(e2e, stream) -> list[tuple[int, str, str, str, str]]:
    return [(int(r["step"]), r["event"], r["severity"], r["alert_id"], r["cause"])
            for r in e2e["offline"][stream] if r["event"]]  # fmt: skip


@pytest.mark.parametrize("stream", ["ucr135", "ucr135-spike"])
def test_daemon_scores_every_step_as_trep_edge_score_does(e2e, stream):
    scores, offline = e2e["scores"][stream], e2e["offline"][stream]
    assert len(scores) == len(offline) == LENGTH[stream]
    steps = [s["step"] for s in scores]
    assert steps == list(range(steps[0], steps[0] + len(steps))), "steps missing, repeated or out of order"
    np.testing.assert_allclose(_floats(scores, "raw"), _floats(offline, "raw"), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(_floats(scores, "score"), _floats(offline, "score"), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(_floats(scores, "threshold"), _floats(offline, "threshold"))
    assert [s["alert"] for s in scores] == [r["alert"] == "1" for r in offline]
    assert [s["warming"] for s in scores] == [r["warming"] == "1" for r in offline]
    assert [s["channel"] for s in scores] == [r["channel"] or None for r in offline]  # one lane: no channel named


@pytest.mark.parametrize("stream", ["ucr135", "ucr135-spike"])
def test_daemon_publishes_the_same_alert_episodes_as_trep_edge_score(e2e, stream):
    assert _daemon_events(e2e, stream) == _offline_events(e2e, stream)


def test_daemon_alerts_carry_the_explanation_trep_edge_score_writes(e2e):
    offline = {int(r["step"]): json.loads(r["explanation"]) for r in e2e["offline"]["ucr135-spike"] if r["explanation"]}
    first = e2e["scores"]["ucr135-spike"][0]["step"]
    alerts = e2e["alerts"]["ucr135-spike"]
    assert [a["explanation"] is None for a in alerts] == [a["state"] == "cleared" for a in alerts]
    streamed = {round(a["window_end"]) - first: a["explanation"] for a in alerts if a["explanation"]}
    assert streamed.keys() == offline.keys() and streamed
    for step, why in streamed.items():
        # One channel, the model's: all of the score is its, its expected value the window's median.
        assert why["top"] == offline[step]["top"] == ["value"] and why["channels"][0]["contribution"] == 1.0
        for key in ("surprise", "expected", "seen"):
            assert why["channels"][0][key] == pytest.approx(offline[step]["channels"][0][key], rel=1e-4, abs=1e-6)


def test_injected_labelled_anomaly_raises_an_alert_inside_it(e2e):
    labelled = np.flatnonzero(e2e["labels"]["ucr135-spike"])
    raised = [step for step, state, *_ in _daemon_events(e2e, "ucr135-spike") if state == "raised"]
    assert any(labelled[0] <= step <= labelled[-1] for step in raised), raised
    alert = next(a for a in e2e["alerts"]["ucr135-spike"] if a["state"] == "raised")
    assert alert["advisory"] is True and alert["schema_version"] == 1 and len(alert["model"]["sha256"]) == 64
    assert alert["score"] > alert["threshold"] == DetectorConfig().threshold and set(alert["values"]) == {"value"}
    assert alert["channel"] is None  # a fixed-channel model names no channel
    assert alert["window_end"] - alert["window_start"] == 63  # window 64 at period 1 s


MISSED = ("the tiny fixture model (40 training steps) does not detect UCR 135's labelled anomaly, offline either; "
          "see the module docstring")


@pytest.mark.xfail(strict=True, reason=MISSED)
def test_real_labelled_anomaly_of_ucr135_raises_an_alert_inside_it(e2e):
    labelled = np.flatnonzero(e2e["labels"]["ucr135"])
    raised = [step for step, state, *_ in _daemon_events(e2e, "ucr135") if state == "raised"]
    assert any(labelled[0] <= step <= labelled[-1] for step in raised), raised


def test_end_to_end_run_dropped_and_rejected_nothing(e2e):
    m = e2e["metrics"]
    assert m["trep_edge_readings_total"] == sum(LENGTH.values())
    assert m.get("trep_edge_dropped_total", 0) == 0
    assert not [k for k, v in m.items() if k.startswith(("trep_edge_malformed_total", "trep_edge_rejected_total")) and v]


def test_current_alert_state_is_retained_per_stream(e2e):
    state = e2e["retained"]["trep-edge/state/ucr135-spike"]
    assert state.retain and state.json() == e2e["alerts"]["ucr135-spike"][-1]  # the last change, same payload
    assert state.json()["state"] == "cleared" and state.json()["active"] is False
    # The real series: its last episode change if it had one, else the ok status of its first score.
    plain = e2e["retained"]["trep-edge/state/ucr135"].json()
    if e2e["alerts"]["ucr135"]:
        assert plain == e2e["alerts"]["ucr135"][-1]
    else:
        assert (plain["kind"], plain["status"], plain["reason"]) == ("stream", "ok", "first_score")
