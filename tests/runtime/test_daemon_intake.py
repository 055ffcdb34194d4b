"""The daemon's building blocks without a broker: topic templates, the intake queue, backoff, metrics, checkpoints."""
import os
import random
import threading

import numpy as np
import pytest

from trep_edge.runtime.service.checkpoint import load_checkpoint, save_checkpoint
from trep_edge.runtime.service.intake import BadInput
from trep_edge.runtime.service.http_status import Metrics, monitor_metrics
from trep_edge.runtime.service.mqtt_io import Telemetry, TelemetryQueue, TopicTemplate, backoff_delay, match_topic


def _msg(stream: str, n: int) -> Telemetry:
    return Telemetry(stream, stream, f"t/{stream}", str(n).encode(), 0.0)


def test_topic_template_gives_the_subscription_filter_and_stream_id():
    t = TopicTemplate("icu/{bed}/vitals")
    assert t.filter == "icu/+/vitals"
    assert t.match("icu/bed12/vitals") == (True, "bed12", None)
    assert t.match("icu/bed12/labs") == (False, None, None)
    assert t.match("icu/bed12/vitals/extra") == (False, None, None)
    two = TopicTemplate("site/{site}/+/{sensor}")
    assert two.filter == "site/+/+/+" and two.match("site/a/x/temp") == (True, "a/temp", None)
    rest = TopicTemplate("plant/{line}/#")
    assert rest.filter == "plant/+/#" and rest.match("plant/l3/a/b") == (True, "l3", None)
    assert TopicTemplate("telemetry/all").match("telemetry/all") == (True, None, None)  # stream from the payload
    assert match_topic([TopicTemplate("a/{x}"), TopicTemplate("b/{y}/c")], "b/7/c") == ("b/{y}/c", "7", None)
    per_value = TopicTemplate("plant/{line}/{machine}/{channel}")  # the channel level is not part of the stream
    assert per_value.filter == "plant/+/+/+"
    assert per_value.match("plant/l3/press2/oil_temp") == (True, "l3/press2", "oil_temp")
    with pytest.raises(ValueError, match="at most one"):
        TopicTemplate("a/{channel}/{channel}")


@pytest.mark.parametrize("bad", ["a/#/b", "icu/bed{n}/vitals", "a/b+"])
def test_topic_template_refuses_malformed_templates(bad):
    with pytest.raises(ValueError, match="topic template"):
        TopicTemplate(bad)


def test_full_queue_drops_the_oldest_message_of_the_same_stream():
    q = TelemetryQueue(4)
    for item in [_msg("a", 1), _msg("b", 1), _msg("a", 2), _msg("b", 2)]:
        assert q.put(item) is None
    victim = q.put(_msg("b", 3))
    assert (victim.key, victim.payload) == ("b", b"1") and q.dropped == 1
    assert [(m.key, m.payload) for m in q.drain()] == [("a", b"1"), ("a", b"2"), ("b", b"2"), ("b", b"3")]
    assert len(q) == 0


def test_full_queue_makes_room_from_the_busiest_stream_when_the_new_stream_has_nothing_queued():
    q = TelemetryQueue(3)
    for item in [_msg("flood", 1), _msg("flood", 2), _msg("quiet", 1)]:
        q.put(item)
    victim = q.put(_msg("new", 1))
    assert (victim.key, victim.payload) == ("flood", b"1")
    assert [m.key for m in q.drain()] == ["flood", "quiet", "new"]


def test_queue_never_blocks_the_producer_and_keeps_per_stream_order_under_overload():
    q = TelemetryQueue(100)
    n, streams = 20_000, 10

    def produce():
        for i in range(n):
            q.put(_msg(f"s{i % streams}", i))

    producer = threading.Thread(target=produce)
    producer.start()
    got = []
    while producer.is_alive() or len(q):
        q.wait(0.01)
        got += q.drain(50)
    producer.join()
    assert len(got) + q.dropped == n and len(q._order) <= 2 * q.capacity + 1
    for s in range(streams):
        seq = [int(m.payload) for m in got if m.key == f"s{s}"]
        assert seq == sorted(seq)


def test_backoff_doubles_up_to_the_cap_with_jitter():
    rng = random.Random(0)
    delays = [[backoff_delay(k, 0.5, 8.0, rng) for _ in range(200)] for k in range(7)]
    for k, samples in enumerate(delays):
        base = min(8.0, 0.5 * 2**k)
        assert base / 2 <= min(samples) and max(samples) <= base
        assert max(samples) - min(samples) > base / 4  # jittered, not one value
    assert backoff_delay(10_000, 0.5, 8.0, rng) <= 8.0


def test_metrics_render_the_prometheus_text_format():
    m = Metrics()
    m.declare("x_total", "counter", "things")
    m.declare("lat_seconds", "histogram", "latency", (0.1, 1.0))
    m.inc("x_total", kind='say "hi"\n')
    m.observe("lat_seconds", 0.05)
    m.observe("lat_seconds", 0.5, count=2)
    text = m.render()
    assert '# TYPE x_total counter\nx_total{kind="say \\"hi\\"\\n"} 1' in text
    assert 'lat_seconds_bucket{le="0.1"} 1\nlat_seconds_bucket{le="1"} 3\nlat_seconds_bucket{le="+Inf"} 3' in text
    assert "lat_seconds_count 3" in text
    with pytest.raises(KeyError):
        m.inc("undeclared_total")
    assert "trep_edge_malformed_total" in monitor_metrics().render()


def test_checkpoint_round_trips_and_a_failed_write_leaves_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "state" / "monitor.npz"
    state = {"windows/buf": np.arange(6, dtype=np.float32).reshape(1, 2, 3), "monitor/config": np.array('{"a": 1}')}
    save_checkpoint(path, state, {"saved_at": 1.0})
    loaded, meta = load_checkpoint(path)
    np.testing.assert_array_equal(loaded["windows/buf"], state["windows/buf"])
    assert str(loaded["monitor/config"]) == '{"a": 1}' and meta["saved_at"] == 1.0

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_checkpoint(path, {"windows/buf": np.zeros(1)}, {"saved_at": 2.0})
    monkeypatch.undo()
    assert load_checkpoint(path)[1]["saved_at"] == 1.0
    assert [p.name for p in path.parent.iterdir()] == ["monitor.npz"]  # no temp file left behind


def test_bad_input_logs_and_samples_at_their_rate_limits():
    bad = BadInput(log_interval=10.0, sample_interval=1.0)
    assert bad.note("not_json", 0.0) == (1, True)
    assert bad.note("not_json", 0.5) == (0, False)
    assert bad.note("not_json", 1.5) == (0, True)
    assert bad.note("empty", 1.6) == (1, True)  # kinds are limited separately
    assert bad.note("not_json", 10.0) == (3, True)  # the log line counts what it held back


def test_a_publish_paho_drops_for_a_full_queue_is_refused_and_counted(caplog):
    from trep_edge.runtime.service.config import MqttConfig
    from trep_edge.runtime.service.mqtt_io import MqttLink

    refused = []
    link = MqttLink(MqttConfig(), TelemetryQueue(4), "trep-edge/status/x", {}, on_refused=lambda t, r: refused.append(r))
    # Never connected: QoS 1 messages wait in paho's queue (10,000 at most); paho reports the rest by return code only.
    infos = [link.publish("trep-edge/alerts/a", "{}", qos=1) for _ in range(10_005)]
    assert sum(info is None for info in infos) == len(refused) == 5
    assert all("queue is full" in reason for reason in refused)
    assert caplog.text.count("refused") == 1  # one log line, the rest counted (at most one line per 10 s)
