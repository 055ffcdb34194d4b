"""Operator commands and bed events without a broker (runtime/trep_edge/runtime/service/control_topics.py): malformed requests by kind, silences
(Alertmanager's: tracked, not notified, released when they end), acknowledgements and the checkpointed state. The
daemon and broker side is tests/runtime/test_daemon_control.py."""
from __future__ import annotations

import json

import pytest

from trep_edge.runtime.service.config import ConfigError, MonitorConfig, TopicsConfig
from trep_edge.runtime.service.control_topics import Control, ControlError, control_filters, parse_request
from trep_edge.runtime.service.mqtt_io import Telemetry
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.service.payloads import disconnected_codes, mark_disconnected
from trep_edge.runtime.core.sharding import Shard, shard_of


def command(**doc) -> bytes:
    return json.dumps(doc).encode()


def item(payload: bytes, control: str = "commands") -> Telemetry:
    return Telemetry("t", None, f"trep-edge/{control}", payload, 1.0, control=control)


def episode(alert_id: str, state: str) -> dict:
    """An anomaly message as the daemon builds it (only the fields the control state reads)."""
    return {"kind": "anomaly", "alert_id": alert_id, "stream": alert_id.rpartition("-")[0], "state": state}


@pytest.mark.parametrize("payload, topic, kind", [
    (b"not json", "commands", "control_not_json"),
    (b"[1]", "commands", "control_not_json"),
    (b'{"command": "ack", "command": "ack"}', "commands", "control_not_json"),
    (command(command="admit", stream="bed1"), "commands", "control_unknown"),  # a bed event on the commands topic
    (command(event="ack", alert_id="bed1-1"), "bed_events", "control_unknown"),
    (command(command="ack", alert_id="bed1"), "commands", "control_invalid"),
    (command(command="ack", alert_id="bed+1-1"), "commands", "control_invalid"),
    (command(command="silence", stream="bed1"), "commands", "control_invalid"),
    (command(command="silence", stream="bed1", seconds=-5), "commands", "control_invalid"),
    (command(command="silence", stream="bed1", seconds=30 * 86400), "commands", "control_invalid"),
    (command(command="silence", stream="bed1", pattern="bed*", seconds=5), "commands", "control_invalid"),
    (command(command="unsilence", by=""), "commands", "control_invalid"),
    (command(event="transfer", stream="bed1"), "bed_events", "control_invalid"),
    (command(event="transfer", stream="bed1", to="bed1"), "bed_events", "control_invalid"),
    (command(event="discharge", stream=7), "bed_events", "control_invalid"),
])  # fmt: skip
def test_malformed_requests_are_refused_by_kind(payload, topic, kind):
    with pytest.raises(ControlError) as err:
        parse_request(payload, topic, 4096)
    assert err.value.kind == kind


def test_a_well_formed_request_keeps_its_fields_and_a_malformed_one_its_request_id():
    request = parse_request(command(command="ack", alert_id="icu/bed-12-3", by="nurse.k", request_id="r1"),
                            "commands", 4096)  # fmt: skip
    assert (request.action, request.stream, request.alert_id, request.by) == ("ack", "icu/bed-12", "icu/bed-12-3",
                                                                              "nurse.k")  # fmt: skip
    with pytest.raises(ControlError) as err:
        parse_request(command(event="discharge", request_id="r2"), "bed_events", 4096)
    assert (err.value.request, err.value.request_id) == ("discharge", "r2")


def test_a_silenced_episode_is_held_back_and_published_when_the_silence_ends():
    control = Control(Shard(), "monitor")
    reply = control.handle(item(command(command="silence", pattern="bed*", seconds=10, by="op")), None, {}, 100.0,
                           4096).reply  # fmt: skip
    assert (reply["result"], reply["until"], reply["by"]) == ("accepted", 110.0, "op")
    raised = episode("bed1-1", "raised")
    assert control.on_episode(raised, 101.0) is False and raised["silenced"] and raised["silenced_until"] == 110.0
    updated = episode("bed1-1", "updated")
    assert control.on_episode(updated, 102.0) is False
    assert control.on_episode(episode("ward-1", "raised"), 102.0) is True  # another stream
    # Raised and cleared inside the silence: never notified.
    assert control.on_episode(episode("bed2-4", "raised"), 103.0) is False
    assert control.on_episode(episode("bed2-4", "cleared"), 104.0) is False
    assert control.expire(109.0) == [] and set(control.withheld) == {"bed1-1"}
    [released] = control.expire(110.0)
    assert released["state"] == "updated" and released["silenced"] is False and released["published_at"] == 110.0
    assert control.silences == {} and control.withheld == {}
    assert control.on_episode(episode("bed1-1", "cleared"), 111.0) is True


def test_the_clear_of_a_notified_episode_is_published_inside_a_silence_and_unsilence_releases_early():
    control = Control(Shard(), "monitor")
    assert control.on_episode(episode("bed1-1", "raised"), 100.0) is True
    control.handle(item(command(command="silence", stream="bed1", seconds=60)), None, {}, 100.0, 4096)
    assert control.on_episode(episode("bed1-1", "updated"), 101.0) is False
    assert control.on_episode(episode("bed1-1", "cleared"), 102.0) is True  # its firing was notified
    control.on_episode(episode("bed1-2", "raised"), 103.0)
    refused = control.handle(item(command(command="unsilence", stream="bed9")), None, {}, 104.0, 4096)
    assert (refused.result, refused.reply["reason"]) == ("refused", "not_silenced")
    ended = control.handle(item(command(command="unsilence", stream="bed1")), None, {}, 105.0, 4096)
    assert ended.result == "accepted" and [m["alert_id"] for m in ended.notify] == ["bed1-2"]


def test_an_ack_marks_the_open_episode_once_and_ends_with_it():
    control = Control(Shard(), "monitor")
    raised = {**episode("bed1-1", "raised"), "published_at": 1.0}
    open_episodes = {"bed1": raised}
    ack = item(command(command="ack", alert_id="bed1-1", by="nurse.k", request_id="r7"))
    first = control.handle(ack, None, open_episodes, 50.0, 4096)
    assert first.result == "accepted" and first.reply["request_id"] == "r7" and first.reply["alert_id"] == "bed1-1"
    [retained] = first.retain
    assert (retained["acknowledged"], retained["acknowledged_by"], retained["acknowledged_at"]) == (True, "nurse.k", 50)
    assert retained["published_at"] == 50.0 and "acknowledged" not in raised  # a copy: the lifecycle's is replaced
    again = control.handle(ack, None, open_episodes, 51.0, 4096)
    assert again.result == "accepted" and again.retain == [] and "already" in again.reply["message"]
    updated = episode("bed1-1", "updated")
    assert control.on_episode(updated, 52.0) is True and updated["acknowledged_by"] == "nurse.k"
    cleared = episode("bed1-1", "cleared")
    assert control.on_episode(cleared, 53.0) is True and cleared["acknowledged"] and control.acks == {}
    stale = control.handle(item(command(command="ack", alert_id="bed1-1")), None, {}, 54.0, 4096)
    assert (stale.result, stale.reply["reason"]) == ("refused", "not_open")


def test_acks_silences_and_held_back_messages_survive_the_checkpoint_while_they_apply():
    control = Control(Shard(), "monitor")
    control.handle(item(command(command="silence", stream="bed1", seconds=60)), None, {}, 100.0, 4096)
    control.handle(item(command(command="silence", stream="bed2", seconds=5)), None, {}, 100.0, 4096)
    control.handle(item(command(command="ack", alert_id="bed3-2")), None, {"bed3": episode("bed3-2", "raised")}, 100.0,
                   4096)  # fmt: skip
    control.on_episode(episode("bed1-1", "raised"), 101.0)
    control.on_episode(episode("bed1-7", "raised"), 101.0)
    saved = json.loads(json.dumps(control.to_json()))
    restored = Control(Shard(), "monitor")
    restored.restore(saved, {"bed1-1", "bed3-2"}, 110.0)  # bed2's silence ran out; bed1-7 was cleared meanwhile
    assert set(restored.silences) == {"bed1"} and set(restored.acks) == {"bed3-2"} and set(restored.withheld) == {
        "bed1-1"}  # fmt: skip
    assert [m["alert_id"] for m in restored.expire(160.0)] == ["bed1-1"]


def test_with_shards_the_owner_of_the_stream_answers_and_every_shard_keeps_a_pattern_silence():
    shards = [Control(Shard(i, 3), f"m{i}") for i in range(3)]
    owner = shard_of("bed1", 3)
    acks = [c.handle(item(command(command="ack", alert_id="bed1-1")), None, {}, 1.0, 4096) for c in shards]
    assert [o.reply is not None for o in acks] == [i == owner for i in range(3)]
    assert [o.result for o in acks] == ["refused" if i == owner else "other_shard" for i in range(3)]
    silences = [c.handle(item(command(command="silence", pattern="*", seconds=9)), None, {}, 1.0, 4096) for c in shards]
    assert [o.reply is not None for o in silences] == [True, False, False]
    assert all(c.silence_of("bed1", 2.0) for c in shards)
    bad = [c.handle(item(b"nope"), None, {}, 1.0, 4096) for c in shards]
    assert [(o.reply is not None, o.error is not None) for o in bad] == [(True, True), (False, False), (False, False)]


def test_a_control_topic_that_would_read_the_daemons_own_output_is_refused():
    config = MonitorConfig()
    assert control_filters(config) == {"trep-edge/commands": "commands", "trep-edge/beds": "bed_events"}
    config.topics.commands = "trep-edge/#"
    with pytest.raises(ValueError, match="topics.commands"):
        control_filters(config)
    config.topics.commands = config.topics.bed_events
    with pytest.raises(ValueError, match="topics.bed_events"):
        control_filters(config)
    with pytest.raises(ConfigError, match="no topic filter"):
        TopicsConfig(commands="ops/#/x")
    assert control_filters(MonitorConfig(topics=TopicsConfig(commands="", bed_events=""))) == {}


def test_disconnected_codes_file_values_as_missing_and_mark_a_reading_left_without_any():
    codes = disconnected_codes(["*=0", "Temp=-1"])
    nan = float("nan")
    off = mark_disconnected(Reading("b", 1.0, {"HR": 0.0, "Temp": -1.0, "O2Sat": nan}), codes)
    assert off.disconnected and all(v != v for v in off.values.values())
    probe = mark_disconnected(Reading("b", 1.0, {"HR": 72.0, "O2Sat": 0.0}), codes)
    assert not probe.disconnected and probe.values["HR"] == 72.0 and probe.values["O2Sat"] != probe.values["O2Sat"]
    empty = Reading("b", 1.0, {"HR": nan})
    assert mark_disconnected(empty, codes) is empty  # a missing value alone says nothing about the sensor
    assert mark_disconnected(empty, disconnected_codes(["HR=null"])).disconnected
    with pytest.raises(ValueError, match="CHANNEL=NUMBER"):
        disconnected_codes(["HR"])
    with pytest.raises(ConfigError, match="input.disconnected"):
        MonitorConfig().input.__class__(disconnected=["HR=off"])
