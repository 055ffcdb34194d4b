"""Stream ownership: the documented formula, the i/N option, and a daemon's intake keeping only its own streams
(topic-named streams before parsing, payload-named ones after; bad input without a topic stream reported once)."""
from __future__ import annotations

import json
import time
import zlib

import pytest

from trep_edge.cli import main
from trep_edge.runtime.service.config import ConfigError, load_config
from trep_edge.runtime.service.daemon import Daemon
from trep_edge.runtime.service.mqtt_io import Telemetry
from trep_edge.runtime.core.sharding import Shard, shard_of


def test_owner_is_crc32_ieee_of_the_utf8_stream_id_mod_n():
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32/IEEE check value other languages document
    assert shard_of("bed01", 3) == 3899556148 % 3 == 1
    assert shard_of("lit/ünïcode", 7) == zlib.crc32("lit/ünïcode".encode("utf-8")) % 7
    names = [f"bed{k:03d}" for k in range(1000)]
    for n in (2, 3, 4, 8):
        owners = [[s for s in names if Shard(i, n).owns(s)] for i in range(n)]
        assert sorted(sum(owners, [])) == names, "every stream has exactly one owner"
        assert max(map(len, owners)) <= 1.1 * len(names) / n, f"unbalanced over {n} shards"
    assert all(Shard().owns(s) for s in names)


@pytest.mark.parametrize("text", ["3/3", "1", "-1/2", "a/b", "0/0", "1/3/4"])
def test_a_bad_shard_is_refused_naming_the_expected_form(text):
    with pytest.raises(ConfigError, match="monitor.shard: shard"):
        load_config(None, {"TREP_EDGE_MONITOR_SHARD": text})


def test_run_refuses_a_bad_shard_flag_with_one_line(capsys):
    assert main(["run", "--shard", "3/3", "--model-path", "missing.onnx"]) == 2
    assert "need 0 <= i < N" in capsys.readouterr().err


def _daemon(model, shard: str, topics: str) -> Daemon:
    flags = {("model", "path"): str(model), ("model", "providers"): "cpu", ("http", "port"): "0",
             ("state", "path"): "", ("monitor", "shard"): shard, ("mqtt", "topics"): topics}  # fmt: skip
    return Daemon(load_config(None, {}, flags))


def _message(topic: str, stream: str | None, payload) -> Telemetry:
    return Telemetry(stream or topic, stream, topic, json.dumps(payload).encode(), time.time())


def test_intake_keeps_only_the_shards_streams_whether_the_topic_or_the_payload_names_them(vitals_model):
    names = [f"bed{k}" for k in range(12)]
    ts = float(int(time.time()))
    reading = {"ts": ts, "values": {"HR": 70.0, "SpO2": 97.0, "RESP": 16.0}}
    topic_named = _daemon(vitals_model, "1/3", "sensors/{stream}/telemetry")
    topic_named._ingest([_message(f"sensors/{n}/telemetry", n, reading) for n in names])
    payload_named = _daemon(vitals_model, "1/3", "sensors/telemetry")
    payload_named._ingest([_message("sensors/telemetry", None, {**reading, "stream": n}) for n in names])
    owned = sorted(n for n in names if shard_of(n, 3) == 1)
    for daemon in (topic_named, payload_named):
        assert sorted(daemon.monitor.streams) == owned
        assert daemon.metrics.value("trep_edge_messages_other_shard_total") == len(names) - len(owned)
        assert daemon.metrics.value("trep_edge_readings_total") == len(owned)
        assert daemon._status()["shard"] == "1/3"


def test_bad_input_naming_no_stream_is_reported_by_shard_zero_only(vitals_model):
    bad = _message("sensors/telemetry", None, {"ts": "yesterday", "values": {"HR": 70.0}, "stream": "bed1"})
    reported = []
    for shard in ("0/2", "1/2"):
        daemon = _daemon(vitals_model, shard, "sensors/telemetry")
        daemon._ingest([bad])
        reported.append([line for line in daemon.metrics.render().splitlines()
                         if line.startswith(("trep_edge_malformed_total{", "trep_edge_rejected_total{"))
                         and not line.endswith(" 0")])  # fmt: skip
    assert reported == [['trep_edge_malformed_total{kind="wrong_type"} 1'], []]
