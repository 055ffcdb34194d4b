"""Sparkplug B input (runtime/sparkplug.py through runtime/payloads.py): real protobuf payloads built with the
module's own schema, plus one encoded by hand from the published field numbers so the schema is checked against
the spec rather than against itself."""
from __future__ import annotations

import math
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from trep_edge.extras import missing_extra_hint
from trep_edge.runtime.payloads import MALFORMED_KINDS, PayloadError, parse_payload_lenient
from trep_edge.runtime.sparkplug import SparkplugDecoder, parse_topic, payload_class

NOW = 1_732_200_000.0
MS = int(NOW * 1000)
CHANNELS = ["HR", "SpO2", "RESP"]
DOUBLE, BOOLEAN, STRING, INT8, INT32, INT64, UINT32 = 10, 11, 12, 1, 3, 4, 7
BIRTH = "spBv1.0/icu/DBIRTH/gw1/bed12"
DATA = "spBv1.0/icu/DDATA/gw1/bed12"


def message(*metrics: dict, timestamp: int | None = MS, seq: int = 0) -> bytes:
    payload = payload_class()(seq=seq)
    if timestamp is not None:
        payload.timestamp = timestamp
    for metric in metrics:
        payload.metrics.add(**metric)
    return payload.SerializeToString()


def birth(names=CHANNELS, datatype=DOUBLE) -> bytes:
    return message(*({"name": n, "alias": i + 1, "datatype": datatype, "double_value": 0.0}
                     for i, n in enumerate(names)))  # fmt: skip


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


def test_deaths_commands_and_state_give_nothing_and_are_not_errors():
    decoder = SparkplugDecoder()
    for topic in ("spBv1.0/icu/NDEATH/gw1", "spBv1.0/icu/DDEATH/gw1/bed12", "spBv1.0/icu/NCMD/gw1",
                  "spBv1.0/icu/DCMD/gw1/bed12", "spBv1.0/STATE/scada-host"):  # fmt: skip
        assert parse(decoder, topic, b'{"online": true}') == ([], []), topic


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
