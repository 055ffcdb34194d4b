"""A bounded, seeded fuzz of a running daemon against a real Mosquitto: a few hundred bad messages across topic,
stream id, payload and value, each of a kind known in advance, interleaved with good readings. The daemon must stay
up, count every bad message exactly once under its kind, and score every good reading."""
from __future__ import annotations

import collections
import json
import random
import time

from broker import broker, collectors, daemon_tables, daemons, publish  # noqa: F401 - fixtures

CASES = 300
GOOD_EVERY = 3  # a good reading after every third bad message
MAX_BYTES = 8192  # room for a 5,000-digit number
OK = {"HR": 70.0, "SpO2": 97.0, "RESP": 16.0}
BAD_IDS = ["bed\u202e1", "zero\u200bwidth", "soft\u00adhyphen", "iso\u2066late", "x" * 129]
PAYLOAD_BAD_IDS = BAD_IDS + ["nel\u0085", "c1\u009f", "non\ufdd0char", "non\uffff", "wild+card", "wild#", ""]


def _js(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def _bad_case(rng: random.Random, ts: float) -> tuple[str, bytes, str]:
    """One bad message: (topic, payload, the kind it must be counted as)."""
    topic = "fz/dev1/data"
    reading = {"ts": ts, "values": dict(OK)}
    family = rng.choice(["topic_id", "payload_id", "bytes", "truncated", "value", "shape", "channel", "time", "size"])
    if family == "topic_id":
        return f"fz/{rng.choice(BAD_IDS)}/data", _js(reading), "bad_stream_id"
    if family == "payload_id":
        if rng.random() < 0.2:  # a lone surrogate can only be written as a JSON escape
            return "fz/bus", b'{"stream": "bed\\ud800", "ts": %.3f, "values": {"HR": 70}}' % ts, "bad_stream_id"
        if rng.random() < 0.2:
            return "fz/bus", _js({"stream": rng.randint(0, 99), **reading}), "wrong_type"
        return "fz/bus", _js({"stream": rng.choice(PAYLOAD_BAD_IDS), **reading}), "bad_stream_id"
    if family == "bytes":
        return topic, b"\xff" + rng.randbytes(rng.randint(0, 60)), "not_json"
    if family == "truncated":
        text = _js(reading)
        return topic, text[: rng.randint(1, len(text) - 1)], "not_json"
    if family == "value":
        name = rng.choice(list(OK))
        bad, kind = rng.choice([('"70"', "wrong_type"), ("true", "wrong_type"), ("[70]", "wrong_type"),
                                ('{"v": 70}', "wrong_type"), ("1e999", "non_finite"), ("-Infinity", "non_finite"),
                                ('"NaN"', "non_finite"), ("9" * 5000, "non_finite")])  # fmt: skip
        values = ", ".join(f'"{k}": {bad if k == name else v}' for k, v in OK.items())
        return topic, b'{"ts": %.3f, "values": {%s}}' % (ts, values.encode()), kind
    if family == "shape":
        payload, kind = rng.choice([(b"42", "not_object"), (b'"text"', "not_object"), (b"null", "not_object"),
                                    (_js({"ts": ts}), "missing_field"), (_js({"ts": ts, "values": {}}), "empty"),
                                    (b"", "empty"), (b"[]", "empty"),
                                    (b'{"ts": %.3f, "ts": %.3f, "values": {"HR": 70}}' % (ts, ts), "duplicate_key"),
                                    (_js({"stream": "dev9", **reading}), "stream_mismatch")])  # fmt: skip
        return topic, payload, kind
    if family == "channel":
        return topic, _js({"ts": ts, "values": {**OK, f"X{rng.randint(0, 9)}": 1.0}}), "unknown_channel"
    if family == "time":
        return topic, _js({"ts": rng.choice([ts * 1000, 0, -ts, ts + 10 * 86400]), "values": OK}), "absurd_timestamp"
    return topic, _js({**reading, "pad": "x" * rng.randint(MAX_BYTES, 3 * MAX_BYTES)}), "too_large"


def test_seeded_fuzz_every_bad_message_counted_once_every_good_reading_scored(tmp_path, broker, daemons,
                                                                              collectors, vitals_model):  # fmt: skip
    tables = daemon_tables(broker, vitals_model, tmp_path, mqtt={"topics": ["fz/{dev}/data", "fz/bus"]},
                           input={"max_bytes": MAX_BYTES, "dead_letter_interval": 60.0, "log_interval": 60.0})  # fmt: skip
    daemon = daemons(tmp_path, tables)
    daemon.start()
    daemon.wait_http("/readyz")
    scores = collectors(broker.port, ["trep-edge/scores/#"])
    rng = random.Random(20261123)
    t0 = float(int(time.time())) - 400
    messages, expected, good = [], collections.Counter(), collections.Counter()
    for case in range(CASES):
        topic, payload, kind = _bad_case(rng, t0 + case // GOOD_EVERY)
        messages.append((topic, payload))
        expected[kind] += 1
        if case % GOOD_EVERY == GOOD_EVERY - 1:  # good readings on the topic stream and on the payload stream
            ts = t0 + case // GOOD_EVERY
            messages += [("fz/dev1/data", _js({"ts": ts, "values": OK})),
                         ("fz/bus", _js({"stream": "dev2", "ts": ts, "values": OK}))]  # fmt: skip
            good["dev1"] += 1
            good["dev2"] += 1
    assert len(expected) >= 12, f"the seed reaches too few kinds: {sorted(expected)}"
    publish(broker.port, messages)

    for stream, n in good.items():
        scores.wait_count(f"trep-edge/scores/{stream}", n, timeout=60)
    deadline = time.monotonic() + 20
    while daemon.metrics().get("trep_edge_messages_total", 0) < len(messages) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert daemon.alive() and daemon.http("/healthz")[0] == 200
    metrics = daemon.metrics()
    counted = {key.split('"')[1]: v for key, v in metrics.items()
               if key.startswith(("trep_edge_malformed_total{", "trep_edge_rejected_total{")) and v}  # fmt: skip
    assert counted == dict(expected)  # every bad message once, under the kind it was made as
    assert metrics["trep_edge_messages_total"] == len(messages)
    assert metrics["trep_edge_readings_total"] == sum(good.values())
    for stream, n in good.items():
        steps = [m.json()["timestamp"] for m in scores.select(f"trep-edge/scores/{stream}")]
        assert steps == [t0 + k for k in range(n)], stream  # every good reading scored, once, in order
