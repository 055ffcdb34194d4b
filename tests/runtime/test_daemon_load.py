"""200 bedside streams at 1 Hz (3 vitals, 5 % missing) through a real broker into one daemon on this machine:
nothing dropped, every reading scored, and the reading→score latency measured end to end (publish to the
score's arrival at a subscriber; alerts go out in the same tick as the scores, so this is also reading→alert).

Run ``pytest tests/runtime/test_daemon_load.py -s`` to see the numbers; docs/daemon.md records a run.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
from broker import broker, collectors, daemon_tables, daemons  # noqa: F401 - fixtures

from trep_edge.runtime.service.replay import Publisher, RecordedSeries, replay

STREAMS, SECONDS = 200, 25
TICK = float(os.environ.get("TREP_EDGE_LOAD_TICK", "0.25"))  # seconds; docs/daemon.md also reports 1.0, the default


class TimedPublisher(Publisher):
    """Remembers when each reading was handed to the network."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent_at: dict[tuple[str, float], float] = {}

    def publish(self, topic: str, payload: bytes, qos: int = 1) -> None:
        self.sent_at[(topic.split("/")[1], json.loads(payload)["ts"])] = time.time()
        super().publish(topic, payload, qos)


def _vitals(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n)
    x = np.stack([75 + 5 * np.sin(t / 30) + rng.normal(0, 1, n), 97 + rng.normal(0, 0.5, n),
                  16 + 2 * np.sin(t / 10) + rng.normal(0, 0.5, n)], axis=-1).astype(np.float32)  # fmt: skip
    x[rng.random(x.shape) < 0.05] = np.nan
    return x


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_200_streams_at_1hz_are_all_scored_with_low_latency(tmp_path, broker, daemons, collectors, vitals_model):
    tables = daemon_tables(broker, vitals_model, tmp_path, mqtt={"topics": ["icu/{bed}/vitals"]},
                           monitor={"tick_interval": TICK}, state={"checkpoint_interval": 10.0})  # fmt: skip
    daemon = daemons(tmp_path, tables)
    daemon.start()
    daemon.wait_http("/readyz")
    out = collectors(broker.port, ["trep-edge/scores/#", "trep-edge/alerts/#"])
    rng = np.random.default_rng(1)
    beds = [RecordedSeries(f"bed{k:03d}", ["HR", "SpO2", "RESP"], _vitals(rng, SECONDS)) for k in range(STREAMS)]
    publisher = TimedPublisher("127.0.0.1", broker.port)
    publisher.wait_connected()
    cpu0, wall0 = _cpu_seconds(daemon.proc.pid), time.monotonic()
    try:
        stats = replay(beds, publisher, "icu/{stream}/vitals", rate=1.0)
    finally:
        publisher.close()
    n = STREAMS * SECONDS
    assert stats.published == n and stats.unconfirmed == 0
    scores = out.wait_count("trep-edge/scores/", n, timeout=15)
    cpu = (_cpu_seconds(daemon.proc.pid) - cpu0) / (time.monotonic() - wall0)
    metrics = daemon.metrics()

    assert metrics.get("trep_edge_dropped_total", 0) == 0
    assert metrics["trep_edge_readings_total"] == n and metrics["trep_edge_scored_total"] == n
    refused = {k: v for k, v in metrics.items() if k.startswith(("trep_edge_malformed_total", "trep_edge_rejected_total"))}
    assert refused and not any(refused.values())  # every kind exported, at 0
    assert len(scores) == n and len({(m.topic, m.json()["step"]) for m in scores}) == n
    latency = np.array([m.at - publisher.sent_at[(m.json()["stream"], m.json()["timestamp"])] for m in scores])
    p50, p95, p99 = np.percentile(latency, [50, 95, 99])
    rows = metrics["trep_edge_inference_batch_rows_sum"] / metrics["trep_edge_inference_batch_rows_count"]
    infer = metrics["trep_edge_inference_seconds_sum"] / metrics["trep_edge_inference_seconds_count"]
    print(f"\n{STREAMS} streams x {SECONDS} s at 1 Hz, tick {TICK} s: {n} readings, {n} scored, 0 dropped; "
          f"reading->score latency p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
          f"max {latency.max() * 1000:.0f} ms; {rows:.0f} engine rows per call, {infer * 1000:.1f} ms per call; "
          f"daemon CPU {cpu * 100:.0f} % of one core; alerts {len(out.select('trep-edge/alerts/'))}")  # fmt: skip
    # Beside the suite's other worker (exports on the second core) a 2-core CI box ran inference at 258 ms per call:
    # p50 683 ms, p99 1,314 ms. A daemon falling behind would grow its latency for the whole run, far past these.
    assert p50 < TICK + 1.0 and p99 < TICK + 2.0, f"p50 latency {p50:.3f} s, p99 {p99:.3f} s"


def test_the_tick_budget_keeps_up_with_a_steady_stream_at_the_default_tick_interval(tmp_path, broker, daemons,
                                                                                    vitals_model):  # fmt: skip
    # At tick_interval 1 s the budget once counted the wait between ticks as work: the allowance halved every tick
    # until one message per tick was taken in, and a 200 readings/s replay took minutes to arrive.
    tables = daemon_tables(broker, vitals_model, tmp_path, mqtt={"topics": ["icu/{bed}/vitals"]},
                           monitor={"tick_interval": 1.0, "tick_budget_ms": 500.0})  # fmt: skip
    daemon = daemons(tmp_path, tables)
    daemon.start()
    daemon.wait_http("/readyz")
    publisher = Publisher("127.0.0.1", broker.port)
    publisher.wait_connected()
    series = [RecordedSeries("bed1", ["HR", "SpO2", "RESP"], _vitals(np.random.default_rng(1), 1200))]
    try:
        replay(series, publisher, "icu/{bed}/vitals", rate=200.0)  # 6 s
    finally:
        publisher.close()
    # 30 s of slack, not seconds: a loaded slow 2-core box took in only 1,030 readings in 16 s, while the halving
    # budget this guards against took minutes.
    deadline = time.monotonic() + 30
    while daemon.metrics()["trep_edge_readings_total"] < 1200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert daemon.metrics()["trep_edge_readings_total"] == 1200
