"""Three shards on one broker, then resharded to two: every stream is scored by exactly one shard, its owner
``crc32(stream) % N``, and scores and alert episodes equal those of one undisturbed daemon (``trep-edge score`` on
the same input, which tests/runtime/test_daemon_end_to_end.py proves equal to a daemon), across the reshard.

Phase 1: shards 0/3, 1/3, 2/3 score steps [0, SWITCH) of 9 streams; SIGTERM checkpoints them; ``trep-edge reshard
--to 2`` moves the state; phase 2: shards 0/2 and 1/2 resume from it and score steps [SWITCH, LENGTH).
"""
from __future__ import annotations

import signal
import time

import pytest
from broker import Broker, Collector
from shards import TOPIC, assert_scores_match, events, received, references, shard_daemon, spiked_streams

from trep_edge.cli import main
from trep_edge.runtime.service.replay import Publisher, replay
from trep_edge.runtime.core.sharding import shard_of

STREAMS, LENGTH, SWITCH = 9, 420, 190
SPIKES = [120, 340]  # one episode per phase and stream, further apart than the refractory period (200)
RATE = 60.0  # readings/s per stream


def _run_phase(broker, daemons, collector, series, t0, start, limit) -> dict:
    for d in daemons:
        d.start()
    for d in daemons:
        d.wait_http("/readyz")
    publisher = Publisher("127.0.0.1", broker.port)
    publisher.wait_connected()
    try:
        replay(series, publisher, TOPIC, RATE, t0=t0, start=start, limit=limit)
    finally:
        publisher.close()
    end = start + limit if limit else LENGTH
    collector.wait_for(lambda c: len(c.select("trep-edge/scores/")) >= STREAMS * end, timeout=60,
                       what=f"scores of steps up to {end}")  # fmt: skip
    metrics = [d.metrics() for d in daemons]
    codes = [d.stop(signal.SIGTERM) for d in daemons]
    assert codes == [0] * len(daemons), [d.log_text() for d in daemons]
    return {"metrics": metrics}


@pytest.fixture(scope="module")
def scale_out(tmp_path_factory, univariate_model, ucr_series):
    folder = tmp_path_factory.mktemp("scale-out")
    series = spiked_streams(ucr_series.values, STREAMS, LENGTH, SPIKES)
    broker = Broker(folder / "broker")
    broker.start()
    old = [shard_daemon(broker, univariate_model, folder / f"old{i}", f"{i}/3") for i in range(3)]
    resharded = folder / "resharded"
    new = [shard_daemon(broker, univariate_model, folder / f"new{i}", f"{i}/2",
                        state={"path": str(resharded / f"shard-{i}-of-2.npz")}) for i in range(2)]  # fmt: skip
    collector = None
    t0 = float(int(time.time()))
    try:
        collector = Collector(broker.port, ["trep-edge/scores/#", "trep-edge/alerts/#"])
        first = _run_phase(broker, old, collector, series, t0, 0, SWITCH)
        code = main(["reshard", *(str(d.folder / "state.npz") for d in old), "--to", "2",
                     "--out", str(resharded)])  # fmt: skip
        assert code == 0
        second = _run_phase(broker, new, collector, series, t0, SWITCH, None)
        scores, alerts = received(collector, "scores", t0), received(collector, "alerts", t0)
    finally:
        if collector is not None:
            collector.close()
        for d in old + new:
            d.stop(signal.SIGKILL)
        broker.stop()
    return {"series": series, "scores": scores, "alerts": alerts, "reference": references(univariate_model, series),
            "metrics": first["metrics"] + second["metrics"], "logs": [d.log_text() for d in new]}  # fmt: skip


def test_every_stream_is_scored_once_per_step_by_its_owner_only(scale_out):
    seen = {}
    for p in scale_out["scores"]:
        owner = shard_of(p.stream, 3) if p.step < SWITCH else shard_of(p.stream, 2)
        assert p.shard == owner, f"{p.stream} step {p.step} scored by shard {p.shard}, owner {owner}"
        assert (p.stream, p.step) not in seen, f"{p.stream} step {p.step} scored twice"
        seen[(p.stream, p.step)] = p
    assert set(seen) == {(s.stream, k) for s in scale_out["series"] for k in range(LENGTH)}
    assert len({shard_of(s.stream, 3) for s in scale_out["series"]}) == 3, "some shard owned nothing"


def test_sharded_and_resharded_scores_and_alerts_equal_one_undisturbed_daemon(scale_out):
    for s in scale_out["series"]:
        reference = scale_out["reference"][s.stream]
        mine = sorted((p for p in scale_out["scores"] if p.stream == s.stream), key=lambda p: p.step)
        assert_scores_match(mine, reference)
        assert events(scale_out["alerts"], s.stream) == reference.events
        assert [state for _, state, *_ in reference.events].count("raised") == len(SPIKES)


def test_resharded_streams_resume_warm(scale_out):
    for s in scale_out["series"]:
        after = [p for p in scale_out["scores"] if p.stream == s.stream and p.step >= SWITCH]
        assert after and not any(p.body["warming"] for p in after), f"{s.stream} warmed up again after the reshard"
    for log in scale_out["logs"]:
        assert "0 warming" in log and "restored" in log


def test_each_shard_skips_the_other_shards_messages_and_says_which_shard_it_is(scale_out):
    for i, m in enumerate(scale_out["metrics"]):
        shard, count = (i, 3) if i < 3 else (i - 3, 2)
        steps = SWITCH if i < 3 else LENGTH - SWITCH
        owned = sum(shard_of(s.stream, count) == shard for s in scale_out["series"])
        assert m["trep_edge_messages_total"] == STREAMS * steps
        assert m.get("trep_edge_messages_other_shard_total", 0) == (STREAMS - owned) * steps
        assert m["trep_edge_readings_total"] == owned * steps
        assert m[f'trep_edge_shard_info{{shard="{shard}",shards="{count}"}}'] == 1
