"""Sparkplug B input (runtime/trep_edge/runtime/service/sparkplug.py through runtime/trep_edge/runtime/service/payloads.py): real protobuf payloads built with the
module's own schema, plus one encoded by hand from the published field numbers so the schema is checked against
the spec rather than against itself; the edge nodes' sessions (rebirth requests, seq gaps, deaths) in the decoder
and in a daemon on a real Mosquitto."""
from __future__ import annotations

import math
import time
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from broker import broker, collectors, daemons, publish  # noqa: F401 - fixtures
from test_daemon_any_sensor import MODEL, _ready

from trep_edge.extras import missing_extra_hint
from trep_edge.runtime.service.payloads import MALFORMED_KINDS, PayloadError, parse_payload_lenient
from trep_edge.runtime.service.config import ConfigError, InputConfig
from trep_edge.runtime.service.sparkplug import REBIRTH_METRIC, Death, SparkplugDecoder, parse_topic, payload_class

NOW = 1_732_200_000.0
MS = int(NOW * 1000)
CHANNELS = ["HR", "SpO2", "RESP"]
DOUBLE, BOOLEAN, STRING, INT8, INT32, INT64, UINT32, UINT64 = 10, 11, 12, 1, 3, 4, 7, 8
BIRTH = "spBv1.0/icu/DBIRTH/gw1/bed12"
DATA = "spBv1.0/icu/DDATA/gw1/bed12"
NBIRTH, NDATA, NDEATH, DDEATH = (f"spBv1.0/icu/{kind}/gw1" for kind in ("NBIRTH", "NDATA", "NDEATH", "DDEATH"))
DDEATH += "/bed12"
NCMD = "spBv1.0/icu/NCMD/gw1"


def message(*metrics: dict, timestamp: int | None = MS, seq: int | None = 0) -> bytes:
    payload = payload_class()()
    if seq is not None:
        payload.seq = seq
    if timestamp is not None:
        payload.timestamp = timestamp
    for metric in metrics:
        payload.metrics.add(**metric)
    return payload.SerializeToString()


def birth(names=CHANNELS, datatype=DOUBLE, seq: int = 0) -> bytes:
    return message(*({"name": n, "alias": i + 1, "datatype": datatype, "double_value": 0.0}
                     for i, n in enumerate(names)), seq=seq)  # fmt: skip


def node_birth(bd_seq: int = 0, seq: int = 0, names=("HR",)) -> bytes:
    """An NBIRTH as the spec has it: bdSeq, Node Control/Rebirth = false, the node's own metrics."""
    return message({"name": "bdSeq", "datatype": UINT64, "long_value": bd_seq},
                   {"name": REBIRTH_METRIC, "datatype": BOOLEAN, "boolean_value": False},
                   *({"name": n, "alias": i + 1, "datatype": DOUBLE, "double_value": 0.0} for i, n in enumerate(names)),
                   seq=seq)  # fmt: skip


def node_death(bd_seq: int) -> bytes:
    """An NDEATH (the node's MQTT Will): bdSeq, no seq."""
    return message({"name": "bdSeq", "datatype": UINT64, "long_value": bd_seq}, timestamp=None, seq=None)


def by_alias(seq: int, value: float = 72.0, alias: int = 1) -> bytes:
    return message({"alias": alias, "double_value": value}, seq=seq)


def parse(decoder, topic, data, channels=CHANNELS, stream=None, **kw):
    return parse_payload_lenient(data, stream, channels, NOW, format="sparkplug", topic=topic, sparkplug=decoder, **kw)


def kinds(errors: list[PayloadError]) -> list[str]:
    assert all(e.kind in MALFORMED_KINDS for e in errors)
    return [e.kind for e in errors]


def test_birth_names_aliases_and_data_with_aliases_only_become_readings_of_the_device_stream():
    decoder = SparkplugDecoder()
    assert parse(decoder, BIRTH, birth()) == ([], [])  # a BIRTH defines, it gives no reading
    data = message({"alias": 1, "double_value": 72.0}, {"alias": 2, "double_value": 97.0},
                   {"alias": 3, "double_value": 16.0}, timestamp=MS + 1000)  # fmt: skip
    readings, errors = parse(decoder, DATA, data)
    assert errors == []
    assert [(r.stream, r.timestamp, r.values) for r in readings] == [
        ("icu/gw1/bed12", NOW + 1, {"HR": 72.0, "SpO2": 97.0, "RESP": 16.0})]
    # DATA may also name its metrics; a name needs no BIRTH.
    readings, _ = parse(SparkplugDecoder(), DATA, message({"name": "HR", "datatype": DOUBLE, "double_value": 71.0}))
    assert readings[0].values == {"HR": 71.0} and readings[0].timestamp == NOW


def test_node_messages_are_the_node_stream():
    decoder = SparkplugDecoder()
    parse(decoder, "spBv1.0/icu/NBIRTH/gw1", birth(["HR", "bdSeq"]))
    readings, errors = parse(decoder, "spBv1.0/icu/NDATA/gw1", message({"alias": 1, "double_value": 60.0}))
    assert errors == [] and [(r.stream, r.values) for r in readings] == [("icu/gw1", {"HR": 60.0})]


def test_data_before_birth_is_unknown_alias_and_a_later_birth_resolves_it():
    decoder = SparkplugDecoder()
    data = message({"alias": 1, "double_value": 72.0})
    readings, errors = parse(decoder, DATA, data)
    assert readings == [] and kinds(errors) == ["unknown_alias"]
    assert "no BIRTH seen" in str(errors[0]) and "icu/gw1/bed12" in str(errors[0])
    parse(decoder, BIRTH, birth())
    assert parse(decoder, DATA, data)[0][0].values == {"HR": 72.0}
    # An alias the BIRTH did not define; and another device's BIRTH defines nothing for this one.
    assert kinds(parse(decoder, DATA, message({"alias": 9, "double_value": 1.0}))[1]) == ["unknown_alias"]
    other = "spBv1.0/icu/DDATA/gw1/bed13"
    assert kinds(parse(decoder, other, data)[1]) == ["unknown_alias"]


def test_garbage_and_json_are_bad_protobuf_and_random_bytes_never_raise_anything_else():
    decoder = SparkplugDecoder()
    for junk in (b"\xff\xff\xff\xff", b'{"ts": 1, "values": {"HR": 70}}', b"\x0a\x02\xff\xfe\x12"):
        readings, errors = parse(decoder, DATA, junk)
        assert readings == [] and kinds(errors) == ["bad_protobuf"], junk
    rng = random.Random(7)
    for _ in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        readings, errors = parse(decoder, DATA, data)
        assert all(isinstance(r.values, dict) for r in readings)
        kinds(errors)


def test_a_metric_name_that_is_not_utf8_is_bad_protobuf():
    # Payload.metrics (field 2) holding a Metric whose name (field 1) is the bytes ff fe.
    data = b"\x12\x04" + b"\x0a\x02\xff\xfe"
    assert kinds(parse(SparkplugDecoder(), DATA, data)[1]) == ["bad_protobuf"]


def test_the_schema_matches_the_published_field_numbers():
    """A DDATA encoded by hand: Payload.timestamp 1, metrics 2, seq 3; Metric name 1, alias 2, timestamp 3,
    datatype 4, int_value 10, double_value 13, boolean_value 14 (sparkplug_b.proto)."""
    def varint(n: int) -> bytes:
        out = b""
        while True:
            low, n = n & 0x7F, n >> 7
            if not n:
                return out + bytes([low])
            out += bytes([low | 0x80])

    def length_delimited(field: int, body: bytes) -> bytes:
        return varint(field << 3 | 2) + varint(len(body)) + body

    hr = length_delimited(1, b"HR") + b"\x20" + varint(DOUBLE) + b"\x69" + struct.pack("<d", 72.5)
    resp = b"\x10" + varint(3) + b"\x18" + varint(MS + 5000) + b"\x50" + varint(16)  # alias 3, int_value 16
    alarm = length_delimited(1, b"SpO2") + b"\x20" + varint(BOOLEAN) + b"\x70\x01"
    data = b"\x08" + varint(MS) + length_delimited(2, hr) + length_delimited(2, resp) + length_delimited(2, alarm)
    data += b"\x18" + varint(4)
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, birth(datatype=UINT32))
    readings, errors = parse(decoder, DATA, data)
    assert errors == []
    assert [(r.timestamp, r.values) for r in readings] == [(NOW, {"HR": 72.5, "SpO2": 1.0}), (NOW + 5, {"RESP": 16.0})]


def test_booleans_are_zero_and_one_and_null_is_missing():
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, message({"name": "HR", "alias": 1, "datatype": BOOLEAN, "boolean_value": False},
                                  {"name": "SpO2", "alias": 2, "datatype": DOUBLE, "double_value": 1.0}))  # fmt: skip
    readings, _ = parse(decoder, DATA, message({"alias": 1, "boolean_value": True}, {"alias": 2, "is_null": True}))
    assert readings[0].values["HR"] == 1.0 and math.isnan(readings[0].values["SpO2"])
    readings, _ = parse(decoder, DATA, message({"alias": 1, "boolean_value": False}))
    assert readings[0].values == {"HR": 0.0}


def test_signed_integers_are_read_from_their_twos_complement():
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, message({"name": "HR", "alias": 1, "datatype": INT32}, {"name": "SpO2", "alias": 2,
                                   "datatype": INT8}, {"name": "RESP", "alias": 3, "datatype": INT64}))  # fmt: skip
    cases = [({"alias": 1, "int_value": 2**32 - 5}, "HR", -5.0), ({"alias": 2, "int_value": 2**32 - 3}, "SpO2", -3.0),
             ({"alias": 2, "int_value": 256 - 3}, "SpO2", -3.0), ({"alias": 2, "int_value": 100}, "SpO2", 100.0),
             ({"alias": 3, "long_value": 2**64 - 7}, "RESP", -7.0), ({"alias": 3, "long_value": 7}, "RESP", 7.0)]
    for metric, channel, value in cases:
        readings, errors = parse(decoder, DATA, message(metric))
        assert errors == [] and readings[0].values == {channel: value}, metric
    # Without a datatype (no BIRTH, a name only), the field's unsigned value is taken as sent.
    readings, _ = parse(SparkplugDecoder(), DATA, message({"name": "HR", "int_value": 70}))
    assert readings[0].values == {"HR": 70.0}


def test_metrics_with_their_own_timestamps_are_separate_readings_in_time_order():
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, birth())
    data = message({"alias": 1, "double_value": 72.0, "timestamp": MS + 2000},
                   {"alias": 2, "double_value": 97.0},  # the payload's time
                   {"alias": 3, "double_value": 16.0, "timestamp": MS + 2000},
                   {"alias": 1, "double_value": 70.0, "timestamp": MS - 1000}, timestamp=MS)  # fmt: skip
    readings, errors = parse(decoder, DATA, data)
    assert errors == []
    assert [(r.timestamp, r.values) for r in readings] == [
        (NOW - 1, {"HR": 70.0}), (NOW, {"SpO2": 97.0}), (NOW + 2, {"HR": 72.0, "RESP": 16.0})]
    # No time anywhere: the receive time.
    readings, _ = parse(decoder, DATA, message({"alias": 1, "double_value": 1.0}, timestamp=None))
    assert readings[0].timestamp == NOW


def test_string_and_other_non_numeric_metrics_are_skipped_not_errors():
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, message({"name": "HR", "alias": 1, "datatype": DOUBLE, "double_value": 0.0},
                                  {"name": "Status", "alias": 2, "datatype": STRING, "string_value": "ok"},
                                  {"name": "Photo", "alias": 3, "datatype": 17, "bytes_value": b"\x00"}))  # fmt: skip
    data = message({"alias": 1, "double_value": 72.0}, {"alias": 2, "string_value": "alarm"},
                   {"alias": 3, "bytes_value": b"\x01"}, {"name": "Note", "string_value": "x"})  # fmt: skip
    readings, errors = parse(decoder, DATA, data)
    assert errors == [] and readings[0].values == {"HR": 72.0}
    # A DATA holding only text gives no reading and no error.
    assert parse(decoder, DATA, message({"alias": 2, "string_value": "ok"})) == ([], [])
    # A numeric metric that carries text is a producer bug.
    assert kinds(parse(decoder, DATA, message({"alias": 1, "string_value": "72"}))[1]) == ["wrong_type"]


def test_a_seven_channel_device_with_a_channel_independent_model():
    names = [f"zone{k}" for k in range(1, 8)]
    decoder = SparkplugDecoder()
    parse(decoder, "spBv1.0/plant/DBIRTH/line7/oven", birth(names), channels=None)
    data = message(*({"alias": k + 1, "double_value": 100.0 + k} for k in range(7)))
    readings, errors = parse(decoder, "spBv1.0/plant/DDATA/line7/oven", data, channels=None)
    assert errors == []
    assert readings[0].stream == "plant/line7/oven"
    assert readings[0].values == {name: 100.0 + k for k, name in enumerate(names)}


def test_rename_and_the_unknown_channel_policy_apply_to_metric_names():
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, birth(["Sensors/HR", "SpO2", "Sensors/Temp"]))
    data = message(*({"alias": k, "double_value": float(k)} for k in (1, 2, 3)))
    renames = {"Sensors/HR": "HR"}
    readings, errors = parse(decoder, DATA, data, rename=renames)
    assert readings == [] and kinds(errors) == ["unknown_channel"] and "Sensors/Temp" in str(errors[0])
    readings, errors = parse(decoder, DATA, data, rename=renames, unknown_channels="ignore")
    assert errors == [] and readings[0].values == {"HR": 1.0, "SpO2": 2.0}


def test_deaths_commands_and_state_give_no_readings_and_are_not_errors():
    decoder = SparkplugDecoder()
    for topic in ("spBv1.0/icu/NDEATH/gw1", "spBv1.0/icu/DDEATH/gw1/bed12", "spBv1.0/icu/NCMD/gw1",
                  "spBv1.0/icu/DCMD/gw1/bed12", "spBv1.0/STATE/scada-host"):  # fmt: skip
        assert parse(decoder, topic, b'{"online": true}') == ([], []), topic
    # A death's payload that does not parse is still a death: the topic says who died.
    assert decoder.take(0.0, 30.0).deaths == (Death("icu/gw1", "NDEATH"), Death("icu/gw1/bed12", "DDEATH"))


def test_a_node_whose_birth_was_not_seen_is_asked_to_rebirth_once_per_interval():
    decoder = SparkplugDecoder()
    for seq in (7, 8, 9):  # the daemon started after the BIRTHs: three DDATA it cannot read
        assert kinds(parse(decoder, DATA, by_alias(seq))[1]) == ["unknown_alias"]
    (rebirth,) = decoder.take(100.0, 30.0).rebirths
    assert (rebirth.node, rebirth.reason, rebirth.topic) == ("icu/gw1", "no_birth", NCMD)
    command = payload_class().FromString(rebirth.payload)
    assert [(m.name, m.datatype, m.boolean_value) for m in command.metrics] == [(REBIRTH_METRIC, BOOLEAN, True)]
    assert command.HasField("timestamp") and not command.HasField("seq")  # the spec's NCMD: stamped, no seq
    parse(decoder, DATA, by_alias(10))
    assert decoder.take(129.0, 30.0).rebirths == ()  # held off: a flood of bad data is not a flood of commands
    parse(decoder, DATA, by_alias(11))
    assert [r.reason for r in decoder.take(130.0, 30.0).rebirths] == ["no_birth"]
    parse(decoder, DATA, by_alias(12))
    assert decoder.take(1000.0, 0.0).rebirths == ()  # interval 0: listen only
    # After the rebirth: read, and an alias the new BIRTH lacks asks again (once the hold-off passed).
    parse(decoder, NBIRTH, node_birth())
    parse(decoder, BIRTH, birth(seq=1))
    assert parse(decoder, DATA, by_alias(2))[0][0].values == {"HR": 72.0}
    assert decoder.take(1001.0, 30.0).rebirths == ()
    assert kinds(parse(decoder, DATA, by_alias(3, alias=9))[1]) == ["unknown_alias"]
    assert [r.reason for r in decoder.take(1002.0, 30.0).rebirths] == ["unknown_alias"]


def test_a_seq_gap_is_counted_and_asks_for_a_rebirth_but_keeps_its_reading():
    decoder = SparkplugDecoder()
    parse(decoder, NBIRTH, node_birth(seq=254))
    parse(decoder, BIRTH, birth(seq=255))
    for seq in (0, 1):  # 255 wraps to 0
        parse(decoder, DATA, by_alias(seq))
    parse(decoder, NDATA, by_alias(2))  # node and device messages share one sequence
    assert decoder.take(0.0, 30.0).seq_gaps == ()
    readings, errors = parse(decoder, DATA, by_alias(5, value=75.0))  # 3 and 4 lost
    assert errors == [] and readings[0].values == {"HR": 75.0}
    events = decoder.take(1.0, 30.0)
    assert events.seq_gaps == ("icu/gw1",) and [r.reason for r in events.rebirths] == ["seq_gap"]
    parse(decoder, DATA, by_alias(6))  # counting resumes from the message after the gap
    assert decoder.take(2.0, 30.0).seq_gaps == ()
    parse(decoder, DATA, message({"alias": 1, "double_value": 1.0}, seq=None))  # no seq: nothing to check
    assert decoder.take(3.0, 30.0).seq_gaps == ()


def test_deaths_take_streams_offline_and_drop_their_aliases_but_a_late_will_is_ignored():
    decoder = SparkplugDecoder()
    parse(decoder, NBIRTH, node_birth(bd_seq=3))
    parse(decoder, BIRTH, birth(seq=1))
    parse(decoder, "spBv1.0/icu/DBIRTH/gw1/bed13", birth(seq=2))
    decoder.take(0.0, 30.0)
    parse(decoder, NDEATH, node_death(bd_seq=2))  # the Will of the connection before this NBIRTH
    assert decoder.take(1.0, 30.0).deaths == ()
    assert parse(decoder, DATA, by_alias(3))[1] == []
    # A device's death: its aliases are gone until its next DBIRTH, the node's other devices read on.
    parse(decoder, DDEATH, message(seq=4))
    (death,) = decoder.take(2.0, 30.0).deaths
    assert death == Death("icu/gw1/bed12", "DDEATH")
    assert kinds(parse(decoder, DATA, by_alias(5))[1]) == ["unknown_alias"]
    assert parse(decoder, "spBv1.0/icu/DDATA/gw1/bed13", by_alias(6))[1] == []
    assert [r.reason for r in decoder.take(3.0, 30.0).rebirths] == ["no_birth"]
    # The node's death covers it and all its devices (not another node whose id starts alike).
    parse(decoder, NDEATH, node_death(bd_seq=3))
    (death,) = decoder.take(4.0, 30.0).deaths
    assert [death.covers(s) for s in ("icu/gw1", "icu/gw1/bed13", "icu/gw10", "icu/gw10/bed1")] == [
        True, True, False, False]  # fmt: skip
    assert len(decoder) == 0
    assert kinds(parse(decoder, "spBv1.0/icu/DDATA/gw1/bed13", by_alias(0))[1]) == ["unknown_alias"]


def test_the_rebirth_interval_must_be_a_finite_number_of_seconds():
    assert InputConfig(sparkplug_rebirth_interval=0.0).sparkplug_rebirth_interval == 0.0
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ConfigError, match="sparkplug_rebirth_interval"):
            InputConfig(sparkplug_rebirth_interval=bad)


def test_topics_that_are_not_sparkplug_are_bad_topic():
    assert parse_topic(DATA).stream == "icu/gw1/bed12"
    assert parse_topic("spBv1.0/icu/NDATA/gw1").stream == "icu/gw1"
    for topic in ("sensors/bed1/telemetry", "spBv1.0/icu/NDATA/gw1/bed12", "spBv1.0/icu/DDATA/gw1",
                  "spBv1.0/icu/XDATA/gw1", "spBv1.0//NDATA/gw1", "spAv1.0/icu/NDATA/gw1"):  # fmt: skip
        readings, errors = parse(SparkplugDecoder(), topic, message({"name": "HR", "double_value": 1.0}))
        assert readings == [] and kinds(errors) == ["bad_topic"], topic


def test_a_template_stream_must_agree_with_the_sparkplug_stream():
    decoder = SparkplugDecoder()
    data = message({"name": "HR", "double_value": 1.0})
    assert parse(decoder, DATA, data, stream="icu/gw1/bed12")[0][0].stream == "icu/gw1/bed12"
    assert kinds(parse(decoder, DATA, data, stream="icu/gw1")[1]) == ["stream_mismatch"]


def test_limits_timestamps_and_ids_are_checked_as_for_every_format():
    decoder = SparkplugDecoder()
    data = message({"name": "HR", "double_value": 1.0}, timestamp=MS * 1000)
    assert kinds(parse(decoder, DATA, data)[1]) == ["absurd_timestamp"]
    big = message(*({"name": "HR", "double_value": float(k), "timestamp": MS + k} for k in range(100)))
    assert kinds(parse(decoder, DATA, big, max_bytes=256)[1]) == ["too_large"]
    long_id = "spBv1.0/icu/DDATA/gw1/" + "b" * 130
    assert kinds(parse(decoder, long_id, message({"name": "HR", "double_value": 1.0}))[1]) == ["bad_stream_id"]
    twice = message({"name": "HR", "double_value": 1.0}, {"name": "HR", "double_value": 2.0})
    assert kinds(parse(decoder, DATA, twice)[1]) == ["duplicate_key"]


def test_a_birth_giving_one_alias_to_two_names_is_refused_and_drops_the_old_table():
    decoder = SparkplugDecoder()
    parse(decoder, BIRTH, birth())
    bad = message({"name": "HR", "alias": 1, "datatype": DOUBLE}, {"name": "SpO2", "alias": 1, "datatype": DOUBLE})
    assert kinds(parse(decoder, BIRTH, bad)[1]) == ["duplicate_key"]
    assert kinds(parse(decoder, DATA, message({"alias": 1, "double_value": 1.0}))[1]) == ["unknown_alias"]


def test_alias_tables_are_bounded_least_recently_used_first():
    decoder = SparkplugDecoder(max_tables=2, max_entries=100)
    for device in ("a", "b"):
        parse(decoder, f"spBv1.0/g/DBIRTH/n/{device}", birth())
    parse(decoder, "spBv1.0/g/DDATA/n/a", message({"alias": 1, "double_value": 1.0}))  # a is now the most recent
    parse(decoder, "spBv1.0/g/DBIRTH/n/c", birth())  # evicts b
    assert len(decoder) == 2 and decoder.entries == 2 * 6  # three aliases and three names per table
    ok = {d: not parse(decoder, f"spBv1.0/g/DDATA/n/{d}", message({"alias": 1, "double_value": 1.0}))[1]
          for d in "abc"}  # fmt: skip
    assert ok == {"a": True, "b": False, "c": True}
    small = SparkplugDecoder(max_entries=10)
    for device in ("a", "b"):
        parse(small, f"spBv1.0/g/DBIRTH/n/{device}", birth())
    assert len(small) == 1 and small.entries == 6


def test_without_protobuf_the_daemon_refuses_to_start_with_one_line_naming_the_extra(tmp_path):
    config = tmp_path / "monitor.toml"
    config.write_text('[mqtt]\ntopics = ["spBv1.0/#"]\n[input]\nformat = "sparkplug"\n')
    script = ("import sys; sys.modules['google.protobuf'] = None; from trep_edge.cli import main; "
              f"sys.exit(main(['run', '--config', {str(config)!r}]))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("trep-edge run: needs the [sparkplug] extra")
    assert "pip install 'trep-edge[sparkplug]'" in proc.stderr


def test_the_hint_names_the_extra_for_protobuf_and_its_submodules():
    for name in ("google.protobuf", "google.protobuf.message_factory"):
        hint = missing_extra_hint(ModuleNotFoundError(name=name))
        assert hint is not None and "pip install 'trep-edge[sparkplug]'" in hint and "(google.protobuf is" in hint
    assert missing_extra_hint(ModuleNotFoundError(name="google")) is None  # another google package: not ours
    assert "trep-edge[cpu]" in missing_extra_hint(ModuleNotFoundError(name="onnxruntime.capi"))


def test_a_daemon_asks_for_rebirths_and_reports_deaths_on_a_real_broker(tmp_path, broker, daemons, collectors):
    """One edge node whose BIRTHs the daemon missed: its DDATA are dead-lettered and one NCMD rebirth request goes out;
    after the BIRTHs its data are scored; a DDEATH reports the device's stream no_data, its next DDATA ok. A second
    node's seq gap is counted, asks for a rebirth and keeps its reading; its NDEATH takes its stream offline."""
    daemon = _ready(tmp_path, broker, daemons, MODEL, mqtt={"topics": ["spBv1.0/#"]}, input={"format": "sparkplug"})
    out = collectors(broker.port, ["trep-edge/#", "spBv1.0/+/NCMD/+"])
    t0 = (int(time.time()) - 100) * 1000
    press, edge2 = "plant/edge1/press3", "plant/edge2"
    ddata, dbirth = "spBv1.0/plant/DDATA/edge1/press3", "spBv1.0/plant/DBIRTH/edge1/press3"
    names = ["oil_temp", "pressure"]

    def data(seq: int, step: int) -> bytes:
        return message(*({"alias": a, "double_value": 40.0 + a + step % 3} for a in (1, 2)), timestamp=t0 + 1000 * step,
                       seq=seq)  # fmt: skip

    def status(stream: str, **match) -> list[dict]:
        messages = (m.json() for m in out.select(f"trep-edge/alerts/{stream}"))
        return [m for m in messages if m["kind"] == "stream" and all(m.get(k) == v for k, v in match.items())]

    def metric(name: str) -> float:
        return daemon.metrics().get(name, 0.0)

    publish(broker.port, [(ddata, data(seq, step)) for step, seq in enumerate((20, 21, 22))])
    publish(broker.port, [("spBv1.0/plant/NBIRTH/edge1", node_birth(seq=0, names=())), (dbirth, birth(names, seq=1))]
            + [(ddata, data(seq, step)) for step, seq in enumerate(range(2, 7), start=3)])  # fmt: skip
    scores = [m.json()["timestamp"] for m in out.wait_count(f"trep-edge/scores/{press}", 4)]
    assert scores[:4] == [t0 / 1000 + step for step in range(3, 7)]  # the readings after the BIRTHs, none before

    publish(broker.port, [("spBv1.0/plant/DDEATH/edge1/press3", message(seq=7))])
    (dead,) = out.wait_for(lambda c: status(press, status="no_data"), what="the DDEATH's no_data")
    assert (dead["reason"], dead["sparkplug"]) == ("death", "DDEATH")
    publish(broker.port, [(ddata, data(8, 8)), (dbirth, birth(names, seq=9)), (ddata, data(10, 9)),
                          (ddata, data(11, 10))])  # fmt: skip
    (back,) = out.wait_for(lambda c: status(press, status="ok", reason="recovered"), what="the recovery")
    assert back["timestamp"] == t0 / 1000 + 9  # the DDATA before the DBIRTH was not read: no alias table

    publish(broker.port, [("spBv1.0/plant/NBIRTH/edge2", node_birth(bd_seq=4, seq=0, names=names))]
            + [("spBv1.0/plant/NDATA/edge2", data(seq, step)) for step, seq in enumerate((1, 2, 5, 6))])  # fmt: skip
    out.wait_for(lambda c: c.select("spBv1.0/plant/NCMD/edge2"), what="the seq gap's rebirth request")
    kept = out.wait_for(lambda c: [m.json()["timestamp"] for m in c.select(f"trep-edge/scores/{edge2}")][2:3],
                        what="the reading after the gap scored")  # fmt: skip
    assert kept == [t0 / 1000 + 2]
    publish(broker.port, [("spBv1.0/plant/NDEATH/edge2", node_death(bd_seq=4))])
    (dead,) = out.wait_for(lambda c: status(edge2, status="no_data"), what="the NDEATH's no_data")
    assert (dead["reason"], dead["sparkplug"]) == ("death", "NDEATH")

    # One request to edge1 for everything it sent unread (held off 30 s), decoded with the schema; one for edge2.
    (request,) = out.select("spBv1.0/plant/NCMD/edge1")
    command = payload_class().FromString(request.payload)
    assert [(m.name, m.datatype, m.boolean_value) for m in command.metrics] == [(REBIRTH_METRIC, BOOLEAN, True)]
    assert not request.retain and len(out.select("spBv1.0/plant/NCMD/edge2")) == 1
    assert metric('trep_edge_malformed_total{kind="unknown_alias"}') == 4  # 3 before the BIRTHs, 1 after the death
    assert metric('trep_edge_sparkplug_rebirth_requests_total{reason="no_birth"}') == 1
    assert metric('trep_edge_sparkplug_rebirth_requests_total{reason="seq_gap"}') == 1
    assert metric("trep_edge_sparkplug_seq_gaps_total") == 1
    letters = [m.json() for m in out.select("trep-edge/dead-letter")]
    assert {d["kind"] for d in letters} == {"unknown_alias"} and daemon.alive()
