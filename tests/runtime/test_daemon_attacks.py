"""Hostile traffic against a running daemon and a real Mosquitto, each once a defect: stream ids that MQTT topic
names may not carry (the daemon published scores on them at QoS 1, Mosquitto disconnected it, paho resent the
packet after every reconnect), a backlog of 20,000 readings (health and checkpoints must keep their cadence while
the queue drains), and streams of one reading each (eviction must free them, the cap and the checkpoint too; the
loop once stalled for minutes at 20,000 ids, until stream registration and eviction were batched)."""
from __future__ import annotations

import json
import re
import threading
import time

import numpy as np
import pytest

from broker import broker, collectors, daemon_tables, daemons, parse_metrics, publish  # noqa: F401 - fixtures

TOPIC = "plant/telemetry"  # no {name} level: every reading names its stream in the payload
OK = {"HR": 70.0, "SpO2": 97.0, "RESP": 16.0}


def _payload_daemon(tmp_path, broker, daemons, model, **sections):
    """A daemon on ``plant/telemetry`` (stream ids from the payload) with the given sections, started and ready."""
    tables = daemon_tables(broker, model, tmp_path, mqtt={"topics": [TOPIC]}, **sections)
    daemon = daemons(tmp_path, tables)
    daemon.start()
    daemon.wait_http("/readyz")
    return daemon


def _reading(stream: str, t: float, hr: float = 70.0) -> dict:
    return {"stream": stream, "ts": t, "values": {**OK, "HR": hr}}


def _js(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


class Prober(threading.Thread):
    """Polls some status paths of a daemon every ``interval`` seconds, recording (time, path, code, body)."""

    def __init__(self, daemon, paths: tuple[str, ...], interval: float) -> None:
        super().__init__(daemon=True)
        self.daemon_process, self.paths, self.interval = daemon, paths, interval
        self.samples: list[tuple[float, str, int, str]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for path in self.paths:
                try:
                    code, body = self.daemon_process.http(path)
                except Exception as exc:  # e.g. a truncated answer: a failed probe, recorded as such
                    code, body = -1, repr(exc)
                self.samples.append((time.monotonic(), path, code, body))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def of(self, path: str) -> list[tuple[float, int, str]]:
        return [(t, code, body) for t, p, code, body in self.samples if p == path]

    def metrics(self) -> list[tuple[float, dict[str, float]]]:
        return [(t, parse_metrics(body)) for t, code, body in self.of("/metrics") if code == 200]

    def __enter__(self) -> "Prober":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# -- 1. poison stream ids at QoS 1 --------------------------------------------------------------------------------

GOOD_STREAMS = ["pump1", "Förderband-2", "泵/3"]  # non-ASCII and multi-level ids are legitimate
POISON_IDS = ["nel\u0085", "c1\u009f", "non\ufdd0char", "non\uffff"]


def _poison(k: int, t: float) -> bytes:
    """The k-th poisoned message: a reading whose stream id holds a code point MQTT topic names may not carry."""
    variants = len(POISON_IDS) * 2 + 1
    v = k % variants
    if v == len(POISON_IDS) * 2:  # a lone surrogate exists only as a JSON escape: str.encode would refuse it
        return b'{"stream": "!\\ud800", "ts": %.3f, "values": {"HR": 70, "SpO2": 97, "RESP": 16}}' % t
    stream = POISON_IDS[v // 2]
    reading = _reading(stream, t)
    # Raw UTF-8 on the wire, or the same id as \u escapes: both decode to the same string.
    return _js(reading) if v % 2 == 0 else json.dumps(reading, ensure_ascii=True).encode()


def test_poison_stream_ids_at_qos1_are_counted_once_and_never_reach_a_topic(tmp_path, broker, daemons, collectors,
                                                                           vitals_model):  # fmt: skip
    daemon = _payload_daemon(tmp_path, broker, daemons, vitals_model,
                             input={"dead_letter_interval": 0.0, "log_interval": 60.0})  # fmt: skip
    assert daemon.tables["topics"]["scores_qos"] == 1  # scores at QoS 1: a refused one would be resent forever
    out = collectors(broker.port, ["trep-edge/#"])
    steps = 45
    t0 = float(int(time.time())) - 200
    messages, bad = [], 0
    for k in range(steps):
        messages += [(TOPIC, _js(_reading(stream, t0 + k, 70.0 + k % 5))) for stream in GOOD_STREAMS]
        messages.append((TOPIC, _poison(k, t0 + k)))
        bad += 1
    with Prober(daemon, ("/readyz",), 0.05) as ready:
        for i in range(0, len(messages), 20):  # in slices, so the probes interleave with the traffic
            publish(broker.port, messages[i : i + 20])
        for stream in GOOD_STREAMS:
            out.wait_count(f"trep-edge/scores/{stream}", steps, timeout=30)
        out.wait_count("trep-edge/dead-letter", bad, timeout=10)
        time.sleep(1.0)  # a disconnect caused by the last messages would show by now
    samples = ready.of("/readyz")
    assert len(samples) >= 10
    assert [s for s in samples if s[1] != 200] == [], "readiness was lost (a disconnect)"

    assert daemon.alive() and daemon.http("/healthz")[0] == 200
    for stream in GOOD_STREAMS:
        scores = [m.json() for m in out.select(f"trep-edge/scores/{stream}")]
        assert [s["timestamp"] for s in scores] == [t0 + k for k in range(steps)], stream  # each once, in order
        assert all(s["stream"] == stream for s in scores)
    metrics = daemon.metrics()
    assert metrics['trep_edge_malformed_total{kind="bad_stream_id"}'] == bad
    others = {k: v for k, v in metrics.items() if k.startswith(("trep_edge_malformed_total{", "trep_edge_rejected_"
                                                                 "total{")) and "bad_stream_id" not in k and v}
    assert others == {}
    assert metrics["trep_edge_messages_total"] == len(messages)
    assert metrics["trep_edge_readings_total"] == steps * len(GOOD_STREAMS)
    assert metrics["trep_edge_publish_refused_total"] == 0  # nothing with a poisoned id was even tried
    assert metrics["trep_edge_mqtt_connected"] == 1
    letters = [m.json() for m in out.select("trep-edge/dead-letter")]
    assert len(letters) == bad and {letter["kind"] for letter in letters} == {"bad_stream_id"}
    # Every published topic is one the broker accepted; no topic names a poisoned id.
    assert all(m.topic.isprintable() for m in out.messages)

    # Never reconnected: one connect in the daemon's log and in the broker's, no disconnect in either.
    log = daemon.log_text()
    assert len(re.findall(r"connected to 127\.0\.0\.1:\d+ \(session present", log)) == 1, log
    assert "disconnected from" not in log and "refused" not in log, log
    client_id = daemon.tables["mqtt"]["client_id"]
    broker_log = broker.log_text()
    assert broker_log.count(f"as {client_id} (") == 1, broker_log
    assert f"Client {client_id} disconnected" not in broker_log, broker_log
    assert "malformed" not in broker_log.lower(), broker_log


# -- 2. a backlog of 20,000 readings ------------------------------------------------------------------------------

BACKLOG_STREAMS, BACKLOG_STEPS, PER_MESSAGE = 100, 200, 10


def test_a_backlog_of_20000_readings_drains_with_health_and_checkpoints_on_time(tmp_path, broker, daemons, collectors,
                                                                                vitals_model):  # fmt: skip
    checkpoint_interval = 1.0
    daemon = _payload_daemon(tmp_path, broker, daemons, vitals_model,
                             monitor={"tick_interval": 0.2, "tick_budget_ms": 100.0},
                             state={"checkpoint_interval": checkpoint_interval})  # fmt: skip
    out = collectors(broker.port, ["trep-edge/scores/#"])
    t0 = float(int(time.time())) - BACKLOG_STEPS - 100
    streams = [f"m{i:03d}" for i in range(BACKLOG_STREAMS)]
    messages = []
    for k in range(BACKLOG_STEPS):  # a gateway batching one time step of 10 machines per message
        for first in range(0, BACKLOG_STREAMS, PER_MESSAGE):
            machines = streams[first : first + PER_MESSAGE]
            batch = [_reading(s, t0 + k, 70.0 + (k + i) % 7) for i, s in enumerate(machines)]
            messages.append((TOPIC, _js({"readings": batch})))
    n = BACKLOG_STREAMS * BACKLOG_STEPS
    started = time.monotonic()
    with Prober(daemon, ("/healthz", "/metrics"), 0.5) as probe:
        publish(broker.port, messages)
        published = time.monotonic() - started
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            metrics = daemon.metrics()
            if metrics["trep_edge_scored_total"] >= n and metrics["trep_edge_readings_total"] >= n:
                break
            time.sleep(0.25)
        drained = time.monotonic() - started
        time.sleep(1.0)
    metrics = daemon.metrics()
    print(f"\npublished {len(messages)} messages ({n} readings) in {published:.1f} s, all scored after {drained:.1f} s")
    assert metrics["trep_edge_readings_total"] == n and metrics["trep_edge_scored_total"] == n, \
        f"{metrics['trep_edge_readings_total']} readings, {metrics['trep_edge_scored_total']} scored"
    assert metrics["trep_edge_dropped_total"] == 0 and metrics["trep_edge_messages_total"] == len(messages)
    assert not any(v for k, v in metrics.items() if k.startswith(("trep_edge_malformed_total{",
                                                                   "trep_edge_rejected_total{")))  # fmt: skip
    scores = out.wait_count("trep-edge/scores/", n, timeout=30)
    assert len({(m.json()["stream"], m.json()["step"]) for m in scores}) == n  # each reading scored once

    health = probe.of("/healthz")
    assert len(health) >= 4
    assert [(round(t - started, 1), code, body) for t, code, body in health if code != 200] == []
    degraded = [body for _, code, body in health if body.startswith("degraded (backlog)")]
    assert degraded, "no backlog was seen: the test did not load the daemon"
    samples = probe.metrics()
    assert max(m.get("trep_edge_tick_backlog", 0) for _, m in samples) > 0
    # The loop kept its cadence under the backlog: ticks and checkpoints went on while the queue drained.
    times = [t for t, _ in samples]
    assert max(np.diff(times)) < 3.0, "a metrics scrape hung"
    ticks = [(t, m["trep_edge_last_tick_timestamp_seconds"]) for t, m in samples
             if "trep_edge_last_tick_timestamp_seconds" in m]  # set from the first tick on
    checkpoints = [(t, m["trep_edge_checkpoints_total"]) for t, m in samples]
    wall = time.time() - time.monotonic()
    # An intake that ignored the budget would hold one tick for the whole drain; budgeted, no tick waits more than a
    # fraction of it. A fraction, not seconds: the probe's clock runs in this process, which is busy collecting the
    # 20,000 scores, and a loaded 2-core box has stretched single ticks to over 3 s while the drain took 33 s.
    late = max(t + wall - last for t, last in ticks)
    assert late < drained / 5, f"a tick came {late:.1f} s late in a {drained:.1f} s drain"
    changes = [t for (t, c), (_, prev) in zip(checkpoints[1:], checkpoints) if c > prev]
    # The first checkpoint waits for the first readings to arrive (publishing 2,000 messages took 6 s on a slow 2-core
    # box): judge its cadence from there, and that it began while the queue was still draining.
    assert len(changes) >= 3 and changes[0] < started + drained, (changes, drained)
    assert max(np.diff(changes)) < 3 * checkpoint_interval + 1.0, changes


# -- 3. 6,000 one-reading stream ids ------------------------------------------------------------------------------

def _streams_gauge(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("trep_edge_streams{"))


def test_one_reading_ids_are_evicted_and_free_the_cap_and_the_checkpoint(tmp_path, broker, daemons, collectors,
                                                                         vitals_model):  # fmt: skip
    # Per-stream state once grew by copying every stream's arrays per new stream and shrank one stream at a time:
    # 20,000 new ids stalled the loop for minutes (/healthz 503 after about 1,100 readings).
    # That stall showed within the first 1,100 ids (the health probe below catches it), so 6,000 ids are enough.
    # Intake must end before the first eviction, so that the cap is still full when "fresh" arrives: intake is held
    # to 20 s below and no stream is evicted before evict_after. A slow 2-core box under the whole suite took 20 s
    # for 17,000 ids once and for only 9,600 another day, so the ids leave intake twice its need on the slower day.
    ids, per_message, evict_after, intake_limit = 6_000, 100, 25.0, 20.0
    daemon = _payload_daemon(tmp_path, broker, daemons, vitals_model, windows={"max_streams": ids},
                             monitor={"tick_interval": 0.2, "evict_after": evict_after, "tick_max_messages": 20})
    out = collectors(broker.port, ["trep-edge/scores/fresh"])
    now = float(int(time.time()))
    names = [f"dev-{i:05d}" for i in range(ids)]
    messages = [(TOPIC, _js({"readings": [_reading(s, now - 10) for s in names[i : i + per_message]]}))
                for i in range(0, ids, per_message)]  # fmt: skip
    # One more id right behind them, while the cap is full: refused.
    messages.append((TOPIC, _js(_reading("fresh", now - 10))))
    started = time.monotonic()
    with Prober(daemon, ("/healthz", "/metrics"), 0.5) as probe:
        publish(broker.port, messages)
        deadline = time.monotonic() + evict_after + 30
        while time.monotonic() < deadline:
            metrics = daemon.metrics()
            if metrics["trep_edge_streams_evicted_total"] >= ids and _streams_gauge(metrics) == 0:
                break
            if any(code != 200 for _, code, _ in probe.of("/healthz")):
                break  # the loop stalled: fail now rather than at the deadline
            if metrics["trep_edge_readings_total"] < ids and time.monotonic() - started > intake_limit:
                break  # intake crawls: fail now (a few seconds are enough for 6,000 new ids)
            time.sleep(0.25)
        evicted = time.monotonic() - started
    print(f"\n{ids} one-reading ids sent and all evicted after {evicted:.1f} s")
    health = probe.of("/healthz")
    assert [(round(t - started, 1), code, body) for t, code, body in health if code != 200] == []
    metrics = daemon.metrics()
    assert metrics["trep_edge_readings_total"] == ids and metrics["trep_edge_scored_total"] == ids
    assert metrics['trep_edge_rejected_total{kind="too_many_streams"}'] == 1
    assert metrics[f'trep_edge_streams_refused_total{{pattern="{TOPIC}"}}'] == 1
    assert metrics["trep_edge_streams_evicted_total"] == ids
    assert _streams_gauge(metrics) == 0

    # The next checkpoint holds no stream, and is small.
    before = metrics["trep_edge_checkpoints_total"]
    deadline = time.monotonic() + 10
    while daemon.metrics()["trep_edge_checkpoints_total"] < before + 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemon.metrics()["trep_edge_checkpoints_total"] > before
    with np.load(tmp_path / "state.npz") as state:
        assert json.loads(str(state["monitor/config"]))["names"] == []
    size = (tmp_path / "state.npz").stat().st_size
    assert size < 100_000, f"{size} bytes"  # ~30 kB of settings and empty arrays; 500 streams' state is ~2 MB

    # A legitimate new stream is accepted now that the evictions freed the cap.
    publish(broker.port, [(TOPIC, _js(_reading("fresh", now - 9)))])
    scores = out.wait_count("trep-edge/scores/fresh", 1)
    assert scores[0].json()["timestamp"] == now - 9
    metrics = daemon.metrics()
    assert metrics["trep_edge_readings_total"] == ids + 1
    assert metrics['trep_edge_rejected_total{kind="too_many_streams"}'] == 1

    assert daemon.stop() == 0
    with np.load(tmp_path / "state.npz") as state:
        assert json.loads(str(state["monitor/config"]))["names"] == ["fresh"]
