import json
import math
import random

import pytest

from trep_edge.runtime.service.payloads import (
    MALFORMED_KINDS,
    PayloadError,
    Reading,
    parse_payload,
    parse_payload_lenient,
)

CHANNELS = ["HR", "SpO2", "RESP"]
NOW = 1_732_200_000.0


def parse(payload, stream="bed12", **kw):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return parse_payload(data, stream, CHANNELS, NOW, **kw)


def kind_of(payload, stream="bed12", **kw):
    with pytest.raises(PayloadError) as info:
        parse(payload, stream, **kw)
    assert info.value.kind in MALFORMED_KINDS
    return info.value.kind


# one reading


def test_one_reading_with_an_epoch_timestamp():
    assert parse({"ts": NOW - 0.5, "values": {"HR": 72, "SpO2": 97.5}}) == [
        Reading("bed12", NOW - 0.5, {"HR": 72.0, "SpO2": 97.5})
    ]


@pytest.mark.parametrize(
    "ts, expected",
    [("2024-11-21T14:40:00.5Z", 1732200000.5), ("2024-11-21T15:40:00+01:00", 1732200000.0), (None, NOW)],
)
def test_iso_timestamps_with_an_offset_and_a_missing_ts_meaning_now(ts, expected):
    payload = {"values": {"HR": 72}} if ts is None else {"ts": ts, "values": {"HR": 72}}
    assert parse(payload)[0].timestamp == expected
    assert parse({"ts": None, "values": {"HR": 72}})[0].timestamp == NOW


def test_timestamps_without_offset_or_of_the_wrong_type_are_refused():
    assert kind_of({"ts": "2024-11-21T14:40:00", "values": {"HR": 1}}) == "wrong_type"
    assert kind_of({"ts": "yesterday", "values": {"HR": 1}}) == "wrong_type"
    assert kind_of({"ts": True, "values": {"HR": 1}}) == "wrong_type"
    assert kind_of(b'{"ts": Infinity, "values": {"HR": 1}}') == "non_finite"


@pytest.mark.parametrize("ts", [NOW + 86400 + 1, NOW - 86400 - 1, NOW * 1000, 0])
def test_timestamps_far_from_now_are_absurd(ts):
    assert kind_of({"ts": ts, "values": {"HR": 1}}) == "absurd_timestamp"
    assert parse({"ts": ts, "values": {"HR": 1}}, max_skew=1e13)[0].timestamp == ts


def test_milliseconds_sent_as_seconds_get_a_hint():
    with pytest.raises(PayloadError, match="milliseconds"):
        parse({"ts": NOW * 1000, "values": {"HR": 1}})


# values


def test_null_and_the_nan_literal_are_missing_values():
    (reading,) = parse(b'{"ts": 1732200000, "values": {"HR": null, "SpO2": NaN, "RESP": 12}}')
    assert math.isnan(reading.values["HR"]) and math.isnan(reading.values["SpO2"]) and reading.values["RESP"] == 12.0


@pytest.mark.parametrize(
    "raw, kind",
    [("Infinity", "non_finite"), ("-Infinity", "non_finite"), ("1e400", "non_finite"), ("1" + "0" * 400, "non_finite"),
     ('"NaN"', "non_finite"), ('"inf"', "non_finite"), ('"72"', "wrong_type"), ("true", "wrong_type"),
     ("[72]", "wrong_type"), ('{"v": 72}', "wrong_type")],
)  # fmt: skip
def test_bad_values_are_refused_by_kind(raw, kind):
    assert kind_of(('{"values": {"HR": %s}}' % raw).encode()) == kind


def test_unknown_channels_are_refused_or_ignored():
    payload = {"values": {"HR": 70, "Temp": 37}}
    assert kind_of(payload) == "unknown_channel"
    assert parse(payload, unknown_channels="ignore")[0].values == {"HR": 70.0}
    assert kind_of({"values": {"Temp": 37}}, unknown_channels="ignore") == "empty"
    assert kind_of({"values": {}}) == "empty"
    with pytest.raises(ValueError, match="unknown_channels"):
        parse(payload, unknown_channels="drop")


# streams


def test_the_stream_comes_from_the_topic_or_the_payload_and_they_must_agree():
    assert parse({"stream": "bed7", "values": {"HR": 1}}, stream=None)[0].stream == "bed7"
    assert parse({"stream": "bed12", "values": {"HR": 1}})[0].stream == "bed12"
    assert kind_of({"stream": "bed7", "values": {"HR": 1}}) == "stream_mismatch"
    assert kind_of({"values": {"HR": 1}}, stream=None) == "missing_field"
    assert kind_of({"stream": 7, "values": {"HR": 1}}, stream=None) == "wrong_type"
    assert kind_of({"stream": "a+b", "values": {"HR": 1}}, stream=None) == "bad_stream_id"
    assert parse({"values": {"HR": 1}}, stream="press3/line2")[0].stream == "press3/line2"


# batches


def test_batches_as_an_object_or_a_top_level_array():
    readings = [{"ts": NOW - 1, "values": {"HR": 70}}, {"ts": NOW, "values": {"HR": 71}}]
    expected = [Reading("bed12", NOW - 1, {"HR": 70.0}), Reading("bed12", NOW, {"HR": 71.0})]
    assert parse({"readings": readings}) == expected
    assert parse(readings) == expected
    batch = {"stream": "bed3", "readings": [{"values": {"HR": 1}}, {"stream": "bed4", "values": {"HR": 2}}]}
    assert [r.stream for r in parse(batch, stream=None)] == ["bed3", "bed4"]


def test_a_bad_reading_is_rejected_alone_in_lenient_mode_and_poisons_the_batch_in_strict_mode():
    batch = {"readings": [{"values": {"HR": 70}}, {"values": {"HR": "x"}}, {"ts": 1, "values": {"HR": 1}}, 5,
                          {"values": {"SpO2": 97}}]}  # fmt: skip
    readings, errors = parse_payload_lenient(json.dumps(batch).encode(), "bed1", CHANNELS, NOW)
    assert [r.values for r in readings] == [{"HR": 70.0}, {"SpO2": 97.0}]
    assert [(e.kind, e.index) for e in errors] == [("wrong_type", 1), ("absurd_timestamp", 2), ("not_object", 3)]
    assert "reading 1" in str(errors[0])
    assert kind_of(batch) == "wrong_type"


@pytest.mark.parametrize(
    "payload, kind",
    [(b"", "empty"), (b"  \n", "empty"), (b"{", "not_json"), (b"\xff\xfe{}", "not_json"), (b"[]", "empty"),
     (b"42", "not_object"), (b'"hello"', "not_object"), (b"null", "not_object"), (b'{"ts": 1}', "missing_field"),
     (b'{"readings": {}}', "wrong_type"), (b'{"readings": []}', "empty"), (b'{"values": [1]}', "wrong_type"),
     (b"[" * 100_000, "too_large"), (b"[" * 60_000 + b"]" * 60_000, "too_large")],
)  # fmt: skip
def test_unreadable_messages_are_refused_by_kind(payload, kind):
    assert kind_of(payload) == kind


def test_an_integer_beyond_the_digit_limit_is_non_finite_and_duplicate_keys_are_refused():
    # Python's json refuses integer literals of more than 4,300 digits with a ValueError that read as not_json.
    assert kind_of(b'{"values": {"HR": %s}}' % (b"7" * 5000)) == "non_finite"
    assert kind_of(b'{"ts": -%s, "values": {"HR": 70}}' % (b"9" * 5000)) == "non_finite"
    assert kind_of(b'{"values": {"HR": 70, "HR": 120}}') == "duplicate_key"
    assert kind_of(b'{"values": {"HR": 70}, "values": {"HR": 120}}') == "duplicate_key"
    assert kind_of(b'{"values": {"HR": 7%s}}' % (b"0" * 400)) == "non_finite"  # a double overflows long before


def test_deep_nesting_within_the_size_limit_is_not_json():
    assert kind_of(b"[" * 30_000 + b"]" * 30_000) == "not_json"


def test_a_utf8_bom_is_tolerated():
    assert parse(b'\xef\xbb\xbf{"values": {"HR": 1}}')[0].values == {"HR": 1.0}


# SenML


def test_senml_records_of_one_time_form_one_reading():
    pack = [
        {"bn": "urn:dev:bed12:", "bt": NOW - 10, "n": "HR", "v": 72},
        {"n": "SpO2", "v": 97},
        {"n": "HR", "v": 73, "t": 1},
        {"n": "RESP", "v": 14, "t": 1, "u": "/min"},
    ]
    assert parse(pack, stream=None) == [
        Reading("urn:dev:bed12", NOW - 10, {"HR": 72.0, "SpO2": 97.0}),
        Reading("urn:dev:bed12", NOW - 9, {"HR": 73.0, "RESP": 14.0}),
    ]
    assert [r.stream for r in parse(pack)] == ["bed12", "bed12"]  # the topic's stream wins


def test_senml_times_below_2_pow_28_are_relative_to_now():
    pack = [{"n": "urn:dev:bed1/HR", "v": 1, "t": -5}, {"n": "urn:dev:bed1/HR", "v": 2}]
    assert [(r.stream, r.timestamp, r.values) for r in parse(pack, stream=None)] == [
        ("urn:dev:bed1", NOW - 5, {"HR": 1.0}), ("urn:dev:bed1", NOW, {"HR": 2.0})
    ]  # fmt: skip
    assert parse([{"n": "HR", "v": 1, "t": NOW - 3}])[0].timestamp == NOW - 3


def test_senml_base_value_is_added_and_null_is_missing():
    (reading,) = parse([{"bn": "x:", "bv": 100, "n": "HR", "v": -30}, {"n": "SpO2", "v": None}])
    assert reading.values["HR"] == 70.0 and math.isnan(reading.values["SpO2"])


@pytest.mark.parametrize(
    "pack",
    [[{"n": "HR", "vs": "high"}], [{"n": "HR", "vb": True}], [{"n": "HR", "v": 1, "vd": "AA"}], [{"n": "HR"}],
     [{"n": "HR", "v": 1, "x_": 1}], [{"bver": 11, "n": "HR", "v": 1}], [{"bn": 5, "n": "HR", "v": 1}], [5],
     [{"n": 5, "v": 1}], [{"v": 1}]],
)  # fmt: skip
def test_invalid_senml_is_refused(pack):
    assert kind_of(pack) == "senml_invalid"


def test_a_bad_senml_record_rejects_its_reading_only():
    pack = [{"bn": "d:", "bt": NOW, "n": "HR", "v": 70}, {"n": "SpO2", "v": "x"}, {"n": "HR", "v": 71, "t": 1},
            {"n": "Temp", "v": 37, "t": 2}, {"n": "HR", "v": 72, "t": 3}, {"n": "HR", "v": 1, "t": 1e7}]  # fmt: skip
    readings, errors = parse_payload_lenient(json.dumps(pack).encode(), "bed1", CHANNELS, NOW)
    assert [(r.timestamp, r.values) for r in readings] == [(NOW, {"HR": 70.0}), (NOW + 1, {"HR": 71.0}),
                                                           (NOW + 3, {"HR": 72.0})]  # fmt: skip
    assert [(e.kind, e.index) for e in errors] == [("wrong_type", 1), ("unknown_channel", 3), ("absurd_timestamp", 5)]
    readings, errors = parse_payload_lenient(json.dumps(pack).encode(), "bed1", CHANNELS, NOW,
                                             unknown_channels="ignore")  # fmt: skip
    assert "empty" in [e.kind for e in errors]


def test_a_bad_base_field_skips_the_rest_of_the_pack():
    pack = [{"bn": "d:", "n": "HR", "v": 70}, {"bt": "soon", "n": "HR", "v": 71}, {"n": "HR", "v": 72}]
    readings, errors = parse_payload_lenient(json.dumps(pack).encode(), "bed1", CHANNELS, NOW)
    assert [r.values for r in readings] == [{"HR": 70.0}]
    assert [(e.kind, e.index) for e in errors] == [("wrong_type", 1)]


# fuzz


def random_json(rng, depth=0):
    choice = rng.randrange(10 if depth < 4 else 6)
    atoms = [None, True, 1e400, -0.0, float("nan"), "", "HR", "2024-11-21T14:40:00Z", NOW, 10**30, -1, "ts"]
    if choice < 6:
        return rng.choice(atoms) if choice < 4 else rng.uniform(-1e10, 1e10)
    if choice < 8:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["ts", "values", "stream", "readings", "n", "v", "t", "bn", "bt", "bv", "vs", "bver", "HR", "SpO2", "x_"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def check_only_payload_errors(payload):
    for stream in ("bed1", None):
        for policy in ("reject", "ignore"):
            readings, errors = parse_payload_lenient(payload, stream, CHANNELS, NOW, unknown_channels=policy)
            assert all(e.kind in MALFORMED_KINDS for e in errors)
            for r in readings:
                assert isinstance(r.stream, str) and r.stream and math.isfinite(r.timestamp)
                assert r.values and set(r.values) <= set(CHANNELS)
                assert all(isinstance(v, float) and not math.isinf(v) for v in r.values.values())
            try:
                parse_payload(payload, stream, CHANNELS, NOW, unknown_channels=policy)
            except PayloadError:
                pass


def test_fuzzed_bytes_and_json_only_ever_raise_payload_errors():
    rng = random.Random(0)
    valid = [
        json.dumps({"ts": NOW, "values": {"HR": 72, "SpO2": None}}).encode(),
        json.dumps([{"bn": "urn:dev:b1:", "bt": NOW, "n": "HR", "v": 1}, {"n": "SpO2", "v": 2, "t": -1}]).encode(),
    ]
    for _ in range(4000):
        check_only_payload_errors(bytes(rng.randrange(256) for _ in range(rng.randrange(40))))
        check_only_payload_errors(json.dumps(random_json(rng)).encode())
        base = bytearray(rng.choice(valid))
        for _ in range(rng.randrange(1, 4)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        check_only_payload_errors(bytes(base[: rng.randrange(len(base) + 1)]))


def test_renames_map_sent_names_to_model_channels_in_json_and_senml():
    rename = {"O2Sat": "SpO2", "Resp": "RESP"}
    [reading] = parse({"ts": NOW, "values": {"HR": 70, "O2Sat": 97, "Resp": 15}}, rename=rename)
    assert reading.values == {"HR": 70.0, "SpO2": 97.0, "RESP": 15.0}
    [reading] = parse([{"bn": "urn:dev:bed12:", "bt": NOW, "n": "O2Sat", "v": 96}], rename=rename)
    assert reading.values == {"SpO2": 96.0}
    assert kind_of({"ts": NOW, "values": {"O2Sat": 97}}) == "unknown_channel"  # without the rename


def test_a_channel_independent_model_knows_every_printable_channel_name():
    def parse_any(payload, **kw):
        return parse_payload_lenient(json.dumps(payload).encode(), "pump7", None, NOW, **kw)

    readings, errors = parse_any({"ts": NOW, "values": {"pressure": 2.5, "temp_C": 41.0, "vib x": 0.01}})
    assert not errors and readings[0].values == {"pressure": 2.5, "temp_C": 41.0, "vib x": 0.01}
    readings, errors = parse_any([{"bn": "urn:dev:pump7:", "bt": NOW, "n": "flow", "v": 3.0}])
    assert not errors and readings[0].values == {"flow": 3.0}
    for bad in ("", "a\u202eb", "x" * 129, "line\nfeed"):
        readings, errors = parse_any({"ts": NOW, "values": {bad: 1.0}})
        assert not readings and [e.kind for e in errors] == ["unknown_channel"], bad
    readings, errors = parse_any({"ts": NOW, "values": {"a\u200bb": 1.0, "ok": 2.0}}, unknown_channels="ignore")
    assert not errors and readings[0].values == {"ok": 2.0}


def test_a_topic_that_names_the_channel_carries_one_plain_number():
    def one(payload: bytes, channel="SpO2", stream="bed12", **kw):
        return parse_payload_lenient(payload, stream, CHANNELS, NOW, channel=channel, **kw)

    readings, errors = one(b"97.5")
    assert not errors and readings == [Reading("bed12", NOW, {"SpO2": 97.5})]
    assert math.isnan(one(b"null")[0][0].values["SpO2"]) and math.isnan(one(b"NaN")[0][0].values["SpO2"])
    assert one(b"15", channel="Resp", rename={"Resp": "RESP"})[0][0].values == {"RESP": 15.0}
    for payload, kind in ((b'{"v": 1}', "wrong_type"), (b"[1]", "wrong_type"), (b'"97"', "wrong_type"),
                          (b"Infinity", "non_finite"), (b"9x", "not_json"), (b"", "empty")):  # fmt: skip
        assert [e.kind for e in one(payload)[1]] == [kind], payload
    assert [e.kind for e in one(b"1", channel="Temp")[1]] == ["unknown_channel"]
    assert [e.kind for e in one(b"1", stream=None)[1]] == ["missing_field"]
    # A channel-independent model takes any channel the topic names.
    assert parse_payload_lenient(b"3.5", "pump7", None, NOW, channel="flow")[0][0].values == {"flow": 3.5}


# InfluxDB line protocol


def influx(text, stream=None, **kw):
    return parse_payload_lenient(text.encode(), stream, CHANNELS, NOW, format="influx", **kw)


def test_line_protocol_lines_are_readings_named_by_their_series_key_or_the_topic():
    ns = int(NOW * 1e9)
    readings, errors = influx(f"vitals,ward=icu,bed=12 HR=72,SpO2=97i {ns}\n# comment\n\nvitals,bed=13 RESP=16u\n")
    assert errors == []
    assert readings == [Reading("vitals,ward=icu,bed=12", NOW, {"HR": 72.0, "SpO2": 97.0}),
                        Reading("vitals,bed=13", NOW, {"RESP": 16.0})]  # fmt: skip
    assert influx(f"vitals,bed=12 HR=72 {ns}", stream="bed12")[0][0].stream == "bed12"
    assert influx("vitals HR=72 1732200000", influx_precision="s")[0][0].timestamp == NOW
    escaped, _ = influx('my\\ vitals,bed\\,id=a\\ b HR=1,RESP=2')
    assert escaped[0].stream == "my\\ vitals,bed\\,id=a\\ b" and escaped[0].values == {"HR": 1.0, "RESP": 2.0}


@pytest.mark.parametrize("line, kind", [
    ("vitals", "bad_line"), ("vitals HR", "bad_line"), ("vitals HR=abc", "bad_line"), ("a b c d", "bad_line"),
    ("vitals HR=72 12.5", "bad_line"), ('vitals HR="72"', "wrong_type"), ("vitals HR=true", "wrong_type"),
    ("vitals HR=inf", "non_finite"), ("vitals Temp=37", "unknown_channel"), ("vitals HR=72 1", "absurd_timestamp"),
    ("vitals+x HR=72", "bad_stream_id"),
])  # fmt: skip
def test_a_bad_line_is_rejected_alone_by_kind(line, kind):
    readings, errors = influx(f"vitals SpO2=97\n{line}\nvitals RESP=16")
    assert [r.values for r in readings] == [{"SpO2": 97.0}, {"RESP": 16.0}]
    assert [(e.kind, e.index) for e in errors] == [(kind, 1)]


def test_line_protocol_that_is_not_text_is_a_bad_line_and_the_format_is_checked():
    assert [e.kind for e in influx("")[1]] == ["empty"]
    assert [e.kind for e in parse_payload_lenient(b"\xff\xfe", None, CHANNELS, NOW, format="influx")[1]] == ["bad_line"]
    with pytest.raises(ValueError, match="format must be one of"):
        parse_payload_lenient(b"x", None, CHANNELS, NOW, format="csv")
