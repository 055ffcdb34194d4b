"""The daemon's control topics: operator commands (``[topics] commands``) and bed events (``[topics] bed_events``),
and the state they leave: acknowledged episodes, silences, notifications held back by a silence.

Requests are JSON objects (docs/alerts.md, "Commands and bed events"):

- commands: ``ack`` an open episode by its ``alert_id``; ``silence`` a ``stream`` (or a ``pattern``, shell-style:
  ``ward3/*``) for ``seconds``; ``unsilence`` it. Optional ``by``, ``note`` and ``request_id`` on every request;
- bed events: ``admit`` a new patient on a ``stream`` (its open episode is cleared and its windows, scales and
  detector restart: ``Monitor.close_episodes``, ``Monitor.reset_stream``), ``discharge`` (its open episode is
  cleared and its state removed: ``Monitor.remove_streams``), ``transfer`` a ``stream`` ``to`` another id
  (``Monitor.move_stream``: the new id scores on without a warm-up).

Every request is answered once on ``[topics] replies``, ``accepted`` or ``refused`` with a reason; a malformed one
is also counted by kind and dead-lettered like bad telemetry (``CONTROL_KINDS``). With shards, the shard that owns
the request's stream answers and acts (for a pattern silence: shard 0 answers, every shard keeps it); the others
stay silent.

Silences follow Alertmanager: a silenced alert is tracked but not notified. While a stream is silenced its episode
messages still go to the retained state topic (a dashboard shows the truth, with ``silenced: true``) but not to the
alerts topic, which is what notifiers read. When the silence ends, an episode still open whose latest message was
held back is published then; an episode raised and cleared inside the silence is never notified; the clear of an
episode whose firing was notified is always published, so no notifier keeps an alert firing forever.

An acknowledged episode stays open; its later messages carry ``acknowledged: true`` with who and when, and its last
message is retained again at once (not re-notified). Acks end with their episode. Acks, silences and held-back
messages ride in the checkpoint meta (``to_json`` / ``restore``), so a restart keeps them.

Pure bookkeeping: the daemon parses nothing itself and publishes what ``Outcome`` and ``expire`` return.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Mapping

import paho.mqtt.client as mqtt

from trep_edge.runtime.service.config import MonitorConfig
from trep_edge.runtime.service.http_status import Metrics
from trep_edge.runtime.core.monitor import AlertOut, Monitor
from trep_edge.runtime.service.mqtt_io import Telemetry
from trep_edge.runtime.service.payloads import MAX_STREAM_ID, PayloadError, decode_json, valid_stream_id
from trep_edge.runtime.core.sharding import Shard, shard_of

REPLY_SCHEMA_VERSION = 1
COMMANDS = ("ack", "silence", "unsilence")
"""The ``command`` values of the commands topic."""
BED_EVENTS = ("admit", "discharge", "transfer")
"""The ``event`` values of the bed events topic."""
CONTROL_TOPICS = {"commands": ("command", COMMANDS), "bed_events": ("event", BED_EVENTS)}
"""Per control topic (its ``[topics]`` field): the key naming the request, and the requests it may carry."""
CONTROL_KINDS = ("control_not_json", "control_unknown", "control_invalid")
"""Malformed kinds of control messages: not a JSON object within the limits; no or an unknown command or event
(also one sent on the other control topic); a field missing or wrong."""
MAX_SILENCE_SECONDS = 7 * 86400.0
"""The longest silence: a forgotten silence must not mute a stream for good."""
MAX_TEXT = 1024
"""Longest ``by``, ``note`` and ``request_id`` accepted."""


def control_filters(config: MonitorConfig) -> dict[str, str]:
    """The control topics to subscribe to, filter → ``[topics]`` field; ValueError for one that would read the daemon's
    own output (a reply to a reply, forever) or both kinds of request."""
    topics, client_id = config.topics, config.mqtt.client_id
    outputs = (topics.alerts, topics.state, topics.scores, topics.dead_letter, topics.status, topics.replies)
    own = [t.replace("{stream}", "x").replace("{client_id}", client_id) for t in outputs if t]
    filters: dict[str, str] = {}
    for name in CONTROL_TOPICS:
        topic = getattr(topics, name).replace("{client_id}", client_id)
        if not topic:
            continue
        clash = [t for t in own if mqtt.topic_matches_sub(topic, t)] + [f for f in filters if f == topic]
        if clash:
            raise ValueError(f"topics.{name} {topic!r} also matches {clash[0]!r}, which the daemon publishes or reads "
                             "as the other control topic: give each control topic a topic of its own")
        filters[topic] = name
    return filters


class ControlError(ValueError):
    """A malformed control message: ``kind`` is one of ``CONTROL_KINDS``."""

    def __init__(self, kind: str, message: str, request: str = "unknown", request_id: str | None = None) -> None:
        self.kind, self.request, self.request_id = kind, request, request_id
        super().__init__(message)


@dataclass(frozen=True)
class Request:
    """A well-formed request: ``action`` (a command or bed event) and its checked fields."""

    action: str
    request_id: str | None = None
    by: str | None = None
    note: str | None = None
    stream: str | None = None
    pattern: str | None = None
    to: str | None = None
    alert_id: str | None = None
    seconds: float | None = None

    @property
    def matcher(self) -> str:
        """What a silence matches: the stream id, or the pattern."""
        return self.stream if self.stream is not None else str(self.pattern)


def _text(doc: Mapping[str, Any], key: str, what: str, request: str, request_id: str | None = None) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not value.isprintable():
        raise ControlError("control_invalid", f"{key} must be printable text of 1..{MAX_TEXT} characters ({what})",
                           request, request_id)  # fmt: skip
    return value


def _stream(doc: Mapping[str, Any], key: str, request: str, request_id: str | None) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not valid_stream_id(value):
        raise ControlError("control_invalid", f"{request} needs {key}: a stream id (1..{MAX_STREAM_ID} printable "
                           "characters, no + or #)", request, request_id)  # fmt: skip
    return value


def parse_request(payload: bytes, topic: str, max_bytes: int) -> Request:
    """Check one message of the control topic ``topic`` (a key of ``CONTROL_TOPICS``); ControlError if malformed."""
    try:
        doc = decode_json(payload, max_bytes)
    except PayloadError as exc:
        raise ControlError("control_not_json", str(exc)) from None
    if not isinstance(doc, dict):
        raise ControlError("control_not_json", "a request must be a JSON object")
    key, allowed = CONTROL_TOPICS[topic]
    request_id = doc.get("request_id") if isinstance(doc.get("request_id"), str) else None
    action = doc.get(key)
    if action not in allowed:
        raise ControlError("control_unknown", f"{key} must be one of {', '.join(allowed)} on this topic, got "
                           f"{ascii(action)[:80]}", request_id=request_id)  # fmt: skip
    request_id = _text(doc, "request_id", "an id echoed in the reply", action)
    fields: dict[str, Any] = {"by": _text(doc, "by", "who sent it", action, request_id),
                              "note": _text(doc, "note", "free text", action, request_id)}  # fmt: skip
    if action == "ack":
        alert_id = doc.get("alert_id")
        stream, _, number = alert_id.rpartition("-") if isinstance(alert_id, str) else ("", "", "")
        if not (valid_stream_id(stream) and number.isascii() and number.isdigit()):
            raise ControlError("control_invalid", "ack needs alert_id: an episode id STREAM-NUMBER (the alert "
                               "message's alert_id)", action, request_id)  # fmt: skip
        fields.update(alert_id=alert_id, stream=stream)
    elif action in ("silence", "unsilence"):
        if ("stream" in doc) == ("pattern" in doc):
            raise ControlError("control_invalid", f"{action} needs either stream or pattern", action, request_id)
        if "stream" in doc:
            fields["stream"] = _stream(doc, "stream", action, request_id)
        else:
            pattern = doc["pattern"]
            if not isinstance(pattern, str) or not 0 < len(pattern) <= 2 * MAX_STREAM_ID or not pattern.isprintable():
                raise ControlError("control_invalid", "pattern must be a shell-style pattern of stream ids (e.g. "
                                   "ward3/*)", action, request_id)  # fmt: skip
            fields["pattern"] = pattern
        if action == "silence":
            seconds = doc.get("seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                    or not 0 < seconds <= MAX_SILENCE_SECONDS:  # fmt: skip
                raise ControlError("control_invalid", f"silence needs seconds: a number in (0, "
                                   f"{MAX_SILENCE_SECONDS:g}]", action, request_id)  # fmt: skip
            fields["seconds"] = float(seconds)
    else:
        fields["stream"] = _stream(doc, "stream", action, request_id)
        if action == "transfer":
            fields["to"] = _stream(doc, "to", action, request_id)
            if fields["to"] == fields["stream"]:
                raise ControlError("control_invalid", "transfer needs another stream id in to", action, request_id)
    return Request(action, request_id, **fields)


@dataclass
class Outcome:
    """What one control message asks the daemon to publish. ``reply`` is None when another shard answers it."""

    request: str
    result: str  # "accepted", "refused" or "other_shard"
    reply: dict[str, Any] | None = None
    error: ControlError | None = None  # a malformed message: count and dead-letter it too
    cleared: list[AlertOut] = field(default_factory=list)  # episodes closed: publish like any alert change
    forget: list[str] = field(default_factory=list)  # streams whose lifecycle ends (alerts.Lifecycle.forget)
    retain: list[dict[str, Any]] = field(default_factory=list)  # episode messages to retain again (acknowledged)
    notify: list[dict[str, Any]] = field(default_factory=list)  # held-back episode messages to publish now


def declare_control_metrics(metrics: Metrics) -> None:
    """Register the control topics' metric families on the daemon's registry."""
    metrics.declare("trep_edge_control_requests_total", "counter", "operator commands and bed events, by request "
                    "and result (accepted, refused, other_shard)")  # fmt: skip
    metrics.declare("trep_edge_alerts_withheld_total", "counter", "episode messages kept off the alerts topic by a "
                    "silence (still retained on the state topic)")  # fmt: skip
    metrics.declare("trep_edge_silences", "gauge", "silences in force")


class Control:
    """The control topics' requests and what they leave behind (module docstring).

    ``acks``: alert id → ``{"by", "at", "note"}`` of each acknowledged open episode; ``silences``: stream id or pattern
    → ``{"pattern", "until", "since", "by", "note"}``; ``withheld``: alert id → ``{"stream", "message", "notified"}``
    for each open episode whose latest message a silence kept off the alerts topic (``notified``: its firing was
    published before).
    """

    def __init__(self, shard: Shard, client_id: str) -> None:
        self.shard = shard
        self.client_id = client_id
        self.acks: dict[str, dict[str, Any]] = {}
        self.silences: dict[str, dict[str, Any]] = {}
        self.withheld: dict[str, dict[str, Any]] = {}

    # -- requests --------------------------------------------------------------------------------------------------
    def handle(self, item: Telemetry, monitor: Monitor, open_episodes: Mapping[str, Mapping[str, Any]], now: float,
               max_bytes: int) -> Outcome:  # fmt: skip
        """Apply one control message to the monitor and to this state; what to publish (never raises on input).

        ``open_episodes`` is ``alerts.Lifecycle.open``: stream → its open episode's last message.
        """
        try:
            request = parse_request(item.payload, item.control, max_bytes)
        except ControlError as exc:
            # A malformed message names no stream to route it by: shard 0 alone reports and answers it, as it does
            # for bad telemetry.
            if self.shard.index:
                return Outcome(exc.request, "other_shard")
            return Outcome(exc.request, "refused", error=exc, reply=self._reply(
                item, exc.request, exc.request_id, None, "refused", {"reason": exc.kind, "message": str(exc)}, now))
        if request.action in ("silence", "unsilence"):
            # Every shard keeps every silence (a pattern spans shards); one answers.
            owner = self.shard.owns(request.stream) if request.stream is not None else self.shard.index == 0
            outcome = self._silence(request, now)
        elif not self.shard.owns(str(request.stream)):
            return Outcome(request.action, "other_shard")
        else:
            owner = True
            ack = request.action == "ack"
            outcome = self._ack(request, open_episodes, now) if ack else self._bed_event(request, monitor, now)
        if not owner:
            outcome.result, outcome.reply = "other_shard", None
            return outcome
        # The handlers put the reply's details (reason, message, what it was about) where the reply goes.
        outcome.reply = self._reply(item, request.action, request.request_id, request.by, outcome.result,
                                    outcome.reply or {}, now)  # fmt: skip
        return outcome

    def _ack(self, request: Request, open_episodes: Mapping[str, Mapping[str, Any]], now: float) -> Outcome:
        alert_id, stream = str(request.alert_id), str(request.stream)
        episode = open_episodes.get(stream, {})
        details = {"alert_id": alert_id, "stream": stream}
        if episode.get("alert_id") != alert_id:
            return _refused("ack", "not_open", f"episode {alert_id} is not open (cleared, or never raised)", details)
        if alert_id in self.acks:
            return _accepted("ack", f"episode {alert_id} was already acknowledged", details)
        self.acks[alert_id] = {"by": request.by, "at": now, "note": request.note}
        outcome = _accepted("ack", f"episode {alert_id} acknowledged", details)
        if "kind" in episode:  # its last message (not just the id of an episode restored without it)
            message = dict(episode)
            self._decorate(message, now)
            message["published_at"] = now
            outcome.retain.append(message)
        return outcome

    def _silence(self, request: Request, now: float) -> Outcome:
        matcher = request.matcher
        details: dict[str, Any] = {"stream": request.stream, "pattern": request.pattern}
        if request.action == "silence":
            until = now + float(request.seconds or 0.0)
            self.silences[matcher] = {"pattern": request.pattern is not None, "until": until, "since": now,
                                      "by": request.by, "note": request.note}  # fmt: skip
            return _accepted("silence", f"{matcher} silenced for {request.seconds:g} s", {**details, "until": until})
        if self.silences.pop(matcher, None) is None:
            return _refused("unsilence", "not_silenced", f"no silence of {matcher} is in force", details)
        outcome = _accepted("unsilence", f"silence of {matcher} ended", details)
        outcome.notify = self._release(now)
        return outcome

    def _bed_event(self, request: Request, monitor: Monitor, now: float) -> Outcome:
        stream, action = str(request.stream), request.action
        details: dict[str, Any] = {"stream": stream}
        known = stream in monitor.streams
        if action == "admit":
            outcome = _accepted(action, f"{stream}: new patient, scoring restarts" if known else
                                f"{stream}: new patient; no state yet", {**details, "known": known})  # fmt: skip
            if known:
                outcome.cleared = monitor.close_episodes([stream], now)
                monitor.reset_stream(stream)
                outcome.forget = [stream]
            return outcome
        if not known:
            return _refused(action, "unknown_stream", f"{stream} has no state here (never seen, or closed)", details)
        if action == "discharge":
            outcome = _accepted(action, f"{stream}: discharged, its state removed", details)
            outcome.cleared = monitor.remove_streams([stream], now)
            outcome.forget = [stream]
            return outcome
        to = str(request.to)
        details["to"] = to
        if not self.shard.owns(to):
            return _refused(action, "other_shard", f"{to} belongs to shard {shard_of(to, self.shard.count)} of "
                            f"{self.shard.count}: discharge {stream} and admit {to} instead", details)  # fmt: skip
        replaced = to in monitor.streams
        outcome = _accepted(action, f"{stream} moved to {to}" + (f" (replacing {to}'s own state)" if replaced else ""),
                            {**details, "replaced": replaced})  # fmt: skip
        outcome.cleared = monitor.move_stream(stream, to, now)
        outcome.forget = [stream, to]
        return outcome

    def _reply(self, item: Telemetry, request: str, request_id: str | None, by: str | None, result: str,
               details: Mapping[str, Any], now: float) -> dict[str, Any]:  # fmt: skip
        """The reply message: the request, its result, ``details`` (reason, message, what it was about) and where
        it came from."""
        return {"schema_version": REPLY_SCHEMA_VERSION, "kind": "reply", "request": request, "request_id": request_id,
                "by": by, "result": result, **details, "topic": item.topic, "received": item.received,
                "client_id": self.client_id, "shard": str(self.shard), "published_at": now}  # fmt: skip

    # -- episodes --------------------------------------------------------------------------------------------------
    def silence_of(self, stream: str, now: float) -> dict[str, Any] | None:
        """The silence in force for ``stream`` that lasts longest, if any."""
        found = None
        for matcher, silence in self.silences.items():
            hit = fnmatchcase(stream, matcher) if silence["pattern"] else stream == matcher
            if hit and silence["until"] > now and (found is None or silence["until"] > found["until"]):
                found = silence
        return found

    def _decorate(self, message: dict[str, Any], now: float) -> None:
        ack = self.acks.get(message["alert_id"]) or {}
        silence = self.silence_of(message["stream"], now) or {}
        message.update(acknowledged=bool(ack), acknowledged_by=ack.get("by"), acknowledged_at=ack.get("at"),
                       silenced=bool(silence), silenced_until=silence.get("until"))  # fmt: skip

    def on_episode(self, message: dict[str, Any], now: float) -> bool:
        """Add the acknowledgement and silence fields to an episode message (in place); whether the alerts topic gets
        it (module docstring: the state topic always does)."""
        self._decorate(message, now)
        alert_id = message["alert_id"]
        held = self.withheld.pop(alert_id, None)
        if message["state"] == "cleared":
            self.acks.pop(alert_id, None)
            return held is None or held["notified"]
        if message["silenced"]:
            notified = message["state"] != "raised" and (held is None or held["notified"])
            self.withheld[alert_id] = {"stream": message["stream"], "message": message, "notified": notified}
            return False
        return True

    def expire(self, now: float) -> list[dict[str, Any]]:
        """End the silences that ran out; the held-back messages of episodes no silence covers any more, to publish."""
        for matcher in [m for m, s in self.silences.items() if s["until"] <= now]:
            del self.silences[matcher]
        return self._release(now) if self.withheld else []

    def _release(self, now: float) -> list[dict[str, Any]]:
        out = []
        for alert_id, held in list(self.withheld.items()):
            if self.silence_of(held["stream"], now) is None:
                del self.withheld[alert_id]
                message = dict(held["message"])
                self._decorate(message, now)
                message["published_at"] = now
                out.append(message)
        return out

    # -- checkpoint ------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The checkpointed part (docs: ``checkpoint.py``'s ``control`` meta key)."""
        return {"acks": self.acks, "silences": self.silences, "withheld": self.withheld}

    def restore(self, saved: Mapping[str, Any] | None, open_ids: set[str], now: float) -> None:
        """Take back ``to_json`` output (None: a checkpoint without it): silences still in force, and the acks and
        held-back messages of episodes still open (``open_ids``)."""
        saved = saved or {}
        self.silences = {m: dict(s) for m, s in dict(saved.get("silences", {})).items() if float(s["until"]) > now}
        self.acks = {a: dict(v) for a, v in dict(saved.get("acks", {})).items() if a in open_ids}
        self.withheld = {a: dict(v) for a, v in dict(saved.get("withheld", {})).items() if a in open_ids}


def _accepted(request: str, message: str, details: dict[str, Any]) -> Outcome:
    return Outcome(request, "accepted", {"reason": "", "message": message, **details})


def _refused(request: str, reason: str, message: str, details: dict[str, Any]) -> Outcome:
    return Outcome(request, "refused", {"reason": reason, "message": message, **details})
