"""MQTT in and out: paho's network thread, topic templates, and the bounded queue between network and scoring.

The network loop owns the socket (paho's own thread); callbacks only enqueue or record state, so a slow model
never stalls keepalives or acknowledgements. Reconnecting and resubscribing are the normal path: every connect
subscribes again and republishes the retained ``online`` status, the Last Will says ``offline``.

A broker blip or daemon restart loses no QoS 1 telemetry because the session persists: a stable client id,
``clean_start=False`` plus a session expiry interval (MQTT 5) or ``clean_session=False`` (3.1.1), and QoS 1
subscriptions, so the broker queues messages for the daemon while it is away.
"""
from __future__ import annotations

import json
import logging
import math
import random
import re
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from trep_edge.runtime.service.config import MqttConfig

log = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")
CHANNEL_LEVEL = "channel"
"""The template placeholder that names a channel rather than part of the stream id."""


class TopicTemplate:
    """A telemetry topic template such as ``icu/{bed}/vitals``: its subscription filter, stream ids and channels.

    Each ``{name}`` level matches one topic level (a ``+`` in the filter); MQTT's own ``+`` and ``#`` may
    appear too but name nothing. The stream id is the ``{name}`` levels of a topic joined by ``/``, or None when
    the template has none (the payload must then carry a stream id). A ``{channel}`` level names the channel
    instead and is not part of the stream id: such topics carry one plain number each (``plant/{machine}/{channel}``
    with payload ``41.7``), the convention of sensors that publish one topic per value.
    """

    def __init__(self, template: str) -> None:
        self.template = template
        levels = template.split("/")
        self._levels: list[tuple[str, str]] = []  # (kind, literal) with kind in "lit", "name", "+", "#"
        for i, level in enumerate(levels):
            if _PLACEHOLDER.match(level):
                self._levels.append(("name", level[1:-1]))
            elif level in ("+", "#"):
                if level == "#" and i != len(levels) - 1:
                    raise ValueError(f"topic template {template!r}: '#' must be the last level")
                self._levels.append((level, level))
            elif any(ch in level for ch in "{}+#"):
                raise ValueError(f"topic template {template!r}: level {level!r} must be a literal, {{name}}, + or #")
            else:
                self._levels.append(("lit", level))
        self.filter = "/".join("+" if kind == "name" else text for kind, text in self._levels)
        self.names = [text for kind, text in self._levels if kind == "name"]
        if self.names.count(CHANNEL_LEVEL) > 1:
            raise ValueError(f"topic template {template!r}: at most one {{{CHANNEL_LEVEL}}} level")

    def match(self, topic: str) -> tuple[bool, str | None, str | None]:
        """Return (matches, stream id, channel) for a concrete topic (None: the topic names none)."""
        parts = topic.split("/")
        values, channel = [], None
        for i, (kind, text) in enumerate(self._levels):
            if kind == "#":
                return True, "/".join(values) if values else None, channel
            if i >= len(parts):
                return False, None, None
            if kind == "lit" and parts[i] != text:
                return False, None, None
            if kind == "name":
                if not parts[i]:
                    return False, None, None
                if text == CHANNEL_LEVEL:
                    channel = parts[i]
                else:
                    values.append(parts[i])
        if len(parts) != len(self._levels):
            return False, None, None
        return True, "/".join(values) if values else None, channel

    def _kinds(self) -> list[tuple[str, str]]:
        """The levels with every ``{name}`` as the ``+`` it subscribes to."""
        return [("+", "+") if kind == "name" else (kind, text) for kind, text in self._levels]

    def covers(self, other: "TopicTemplate") -> bool:
        """Whether every topic ``other`` matches is matched here too (a later route with it would never apply)."""
        mine, theirs = self._kinds(), other._kinds()
        for i, (kind, text) in enumerate(theirs):
            if i >= len(mine) or kind == "#" and mine[i][0] != "#":
                return False
            if mine[i][0] == "#":
                return True
            if mine[i][0] == "lit" and (kind != "lit" or text != mine[i][1]):
                return False
        # '#' also matches its parent level: a/# covers a.
        return len(mine) == len(theirs) or len(mine) == len(theirs) + 1 and mine[-1][0] == "#"

    def overlaps(self, other: "TopicTemplate") -> bool:
        """Whether some topic matches both (a route no subscribed template overlaps never receives a message)."""
        mine, theirs = self._kinds(), other._kinds()
        for i in range(max(len(mine), len(theirs))):
            if i >= len(mine) or i >= len(theirs):
                rest = mine[i:] or theirs[i:]
                return rest[0][0] == "#" and len(rest) == 1
            (a, a_text), (b, b_text) = mine[i], theirs[i]
            if "#" in (a, b):
                return True
            if a == b == "lit" and a_text != b_text:
                return False
        return True


def match_topic(templates: list[TopicTemplate], topic: str) -> tuple[str | None, str | None, str | None]:
    """The first template matching ``topic`` decides its stream id and channel: (template text, stream, channel);
    the template is None when none matches."""
    for template in templates:
        matched, stream, channel = template.match(topic)
        if matched:
            return template.template, stream, channel
    return None, None, None


@dataclass
class Telemetry:
    """One received message, as the network thread hands it to the scoring loop."""

    key: str  # queue key: the stream id, else the topic
    stream: str | None
    topic: str
    payload: bytes
    received: float  # time.time() at arrival, for latency measurements
    matched: bool = True  # the topic matched a template
    dropped: bool = False
    channel: str | None = None  # the channel a {channel} topic level names (the payload is then one number)
    pattern: str = ""  # the [mqtt] topics template the topic matched
    control: str = ""  # a control topic's [topics] field (commands, bed_events): a request, not telemetry


class TelemetryQueue:
    """A bounded, thread-safe queue of telemetry that never blocks the producer.

    When full, ``put`` drops the oldest queued message of the same stream (newer readings of a stream are worth
    more than older ones); if that stream has nothing queued, the oldest message of the stream with the most
    queued messages goes instead, so one flooding sensor cannot starve the others. Drops are counted.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.dropped = 0
        self._order: deque[Telemetry] = deque()  # arrival order, with dropped items left as tombstones
        self._streams: dict[str, deque[Telemetry]] = {}
        self._size = 0
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)

    def __len__(self) -> int:
        return self._size

    def put(self, item: Telemetry) -> Telemetry | None:
        """Enqueue; return the message dropped to make room, if any."""
        with self._lock:
            victim = None
            if self._size >= self.capacity:
                own = self._streams.get(item.key)
                if not own:
                    own = max(self._streams.values(), key=len)
                victim = own.popleft()
                victim.dropped = True
                self._size -= 1
                self.dropped += 1
                if not own:
                    del self._streams[victim.key]
                # Tombstones are skipped when draining; compact if a long overload without drains piles them up.
                if len(self._order) > 2 * self.capacity:
                    self._order = deque(t for t in self._order if not t.dropped)
            self._streams.setdefault(item.key, deque()).append(item)
            self._order.append(item)
            self._size += 1
            self._ready.notify()
            return victim

    def drain(self, limit: int | None = None) -> list[Telemetry]:
        """Remove and return up to ``limit`` queued messages (all by default), in arrival order."""
        out: list[Telemetry] = []
        with self._lock:
            while self._order and (limit is None or len(out) < limit):
                item = self._order.popleft()
                if item.dropped:
                    continue
                own = self._streams[item.key]
                own.popleft()
                if not own:
                    del self._streams[item.key]
                out.append(item)
            self._size -= len(out)
        return out

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds until something is queued; return whether it is."""
        with self._lock:
            if self._size == 0 and timeout > 0:
                self._ready.wait(timeout)
            return self._size > 0


def backoff_delay(attempt: int, low: float, high: float, rng: random.Random | None = None) -> float:
    """Reconnect delay for the n-th failed attempt (0-based): doubling from ``low``, capped at ``high``, jittered.

    Half of the delay is random ("equal jitter"), so many daemons that lost the same broker do not all come
    back in the same instant.
    """
    rng = rng or random
    base = min(high, low * 2 ** min(attempt, 32))
    return base / 2 + rng.uniform(0, base / 2)


class _Client(mqtt.Client):
    """paho's client, remembering why the last connection attempt failed (paho drops the exception)."""

    last_connect_error: BaseException | None = None

    def reconnect(self) -> mqtt.MQTTErrorCode:
        try:
            return super().reconnect()
        except OSError as exc:
            self.last_connect_error = exc
            raise


def describe_connect_error(exc: BaseException | None, config: MqttConfig) -> str:
    """A log line that says what probably went wrong and what to check."""
    where = f"{config.host}:{config.port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: the broker {where} certificate was not accepted ({exc.verify_message}); check mqtt.ca_file"
    if isinstance(exc, ssl.SSLError):
        return (f"TLS handshake with {where} failed ({exc}); check mqtt.tls, mqtt.ca_file, mqtt.cert_file and "
                f"mqtt.key_file")  # fmt: skip
    if isinstance(exc, ConnectionRefusedError):
        return f"broker {where} refused the TCP connection (not running, or wrong host/port)"
    return f"cannot connect to broker {where}: {exc or 'connection failed'}"


MAX_TOPIC_BYTES = 65535


def unpublishable(topic: str, payload: bytes | str) -> str | None:
    """Why ``topic``/``payload`` cannot be published (a broker would refuse the packet), or None when they can."""
    if not isinstance(topic, str) or not topic:
        return "the topic is empty or not text"
    # MQTT topic names are UTF-8 without U+0000..U+001F, U+007F..U+009F or noncharacters (Mosquitto disconnects
    # on them), and a publish may not name a wildcard; isprintable() also refuses surrogates and format characters.
    if not topic.replace(" ", "x").isprintable() or "+" in topic or "#" in topic:
        return "the topic holds a wildcard or a character MQTT topic names may not carry"
    if len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        return f"the topic is longer than {MAX_TOPIC_BYTES} bytes"
    if isinstance(payload, str):
        try:
            payload.encode("utf-8")
        except UnicodeEncodeError:
            return "the payload is not encodable as UTF-8 (a lone surrogate)"
    return None


class MqttLink:
    """The daemon's MQTT connection: subscribe, enqueue telemetry, publish, keep the retained status.

    ``status`` is the JSON object published retained on ``status_topic`` at every connect; the Last Will
    replaces it by ``{"state": "offline", ...}`` when the connection drops without a clean disconnect.
    ``observer=True`` makes a read-only subscriber beside the daemon (``trep-edge promote --shadow``): no status, no
    Last Will, and a clean session the broker forgets at disconnect, so no telemetry is queued for it once it is gone.
    """

    def __init__(
        self,
        config: MqttConfig,
        queue: TelemetryQueue,
        status_topic: str,
        status: dict,
        on_drop: Callable[[Telemetry], None] | None = None,
        on_refused: Callable[[str, str], None] | None = None,
        control: Mapping[str, str] | None = None,
        observer: bool = False,
    ) -> None:
        self.config = config
        self.observer = observer
        self.queue = queue
        self.templates = [TopicTemplate(t) for t in config.topics]
        # Control topic filter -> its [topics] field; queued with the telemetry so a request keeps its place among
        # the readings (an admit between the old patient's readings and the new one's).
        self.control = dict(control or {})
        self.status_topic = status_topic
        self._status = dict(status)
        self._on_drop = on_drop
        self._on_refused = on_refused
        self._refused_logged, self._refused_quiet = -math.inf, 0  # refusals are logged at most every 10 s
        self.connected = False
        self.subscribed = False  # the broker acknowledged the telemetry subscriptions of the current connection
        self._stopping = False
        self.connects = 0
        self.last_error: str | None = None
        self._attempt = 0
        self._rng = random.Random()
        self._lock = threading.Lock()
        self.client = self._make_client()

    def _make_client(self) -> _Client:
        cfg = self.config
        if cfg.protocol == "5":
            client = _Client(CallbackAPIVersion.VERSION2, client_id=cfg.client_id, protocol=mqtt.MQTTv5)
        else:
            client = _Client(CallbackAPIVersion.VERSION2, client_id=cfg.client_id, protocol=mqtt.MQTTv311,
                             clean_session=self.observer)  # fmt: skip
        if cfg.username:
            client.username_pw_set(cfg.username, cfg.password())
        if cfg.tls:
            client.tls_set(
                ca_certs=cfg.ca_file or None,
                certfile=cfg.cert_file or None,
                keyfile=cfg.key_file or None,
                keyfile_password=cfg.key_password(),
                cert_reqs=ssl.CERT_REQUIRED,
                tls_version=ssl.PROTOCOL_TLS_CLIENT,
            )
        self._set_will(client, self._status)
        client.max_inflight_messages_set(100)
        # Alerts published while the broker is away wait here (paho resends them on reconnect); bounded memory.
        client.max_queued_messages_set(10000)
        client.reconnect_delay_set(cfg.reconnect_min, cfg.reconnect_min)
        client.on_connect = self._on_connect
        client.on_connect_fail = self._on_connect_fail
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        return client

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect in the background (paho's network thread retries until it succeeds)."""
        cfg = self.config
        if cfg.protocol == "5":
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 0 if self.observer else int(cfg.session_expiry)
            self.client.connect_async(cfg.host, cfg.port, cfg.keepalive, clean_start=self.observer, properties=props)
        else:
            self.client.connect_async(cfg.host, cfg.port, cfg.keepalive)
        self.client.loop_start()

    def stop(self, reason: str = "shutdown", timeout: float = 5.0) -> None:
        """Publish ``offline`` (retained), disconnect cleanly and stop the network thread."""
        self._stopping = True
        if self.connected:
            info = self.publish_status({"state": "offline", "reason": reason})
            try:
                if info is not None:
                    info.wait_for_publish(timeout)
            except (RuntimeError, ValueError):
                pass  # not connected any more: the Last Will says offline instead
        self.client.disconnect()
        self.client.loop_stop()
        self.connected = False

    # -- publishing ----------------------------------------------------------------------------------------------
    def publish(
        self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False
    ) -> mqtt.MQTTMessageInfo | None:
        """Publish from any thread (None when refused); QoS ≥ 1 messages wait for a reconnect if disconnected."""
        reason = unpublishable(topic, payload)
        if reason is None:
            try:
                info = self.client.publish(topic, payload, qos=qos, retain=retain)
            except (ValueError, TypeError) as exc:  # paho's own checks (e.g. a payload over 268 MB)
                reason = str(exc)
            else:
                if info.rc != mqtt.MQTT_ERR_QUEUE_SIZE:
                    return info
                # paho drops a message beyond max_queued_messages and says so only in the return code.
                reason = "paho's outgoing queue is full (broker gone or slower than the daemon): dropped"
        # A packet the broker would call malformed disconnects us, and paho resends a QoS >= 1 one after every
        # reconnect (a loop that never ends): refuse it here, once, and count it.
        now = time.monotonic()
        if now - self._refused_logged >= 10.0:
            more = f" ({self._refused_quiet} more refused in the last 10 s)" if self._refused_quiet else ""
            log.warning("publish to %s refused: %s%s", ascii(topic)[:200], reason, more)
            self._refused_logged, self._refused_quiet = now, 0
        else:
            self._refused_quiet += 1
        if self._on_refused is not None:
            self._on_refused(topic, reason)
        return None

    def publish_status(self, update: dict | None = None) -> mqtt.MQTTMessageInfo | None:
        """Merge ``update`` into the status and publish it retained (the Last Will follows from the next connect)."""
        if self.observer:
            return None
        with self._lock:
            self._status.update(update or {})
            status = dict(self._status)
        self._set_will(self.client, status)
        return self.publish(self.status_topic, json.dumps(status), qos=1, retain=True)

    def _set_will(self, client: mqtt.Client, status: dict) -> None:
        # The broker holds the will given at connect time; a new one (e.g. after a model reload) applies from the
        # next (re)connect.
        if self.observer:
            return
        offline = {**status, "state": "offline", "reason": "connection lost"}
        client.will_set(self.status_topic, json.dumps(offline), qos=1, retain=True)

    # -- callbacks (network thread: record and enqueue only) ------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            self.last_error = (
                f"broker {self.config.host}:{self.config.port} refused the connection: {reason_code}; "
                "check mqtt.username and the password (mqtt.password_file or $TREP_EDGE_MQTT_PASSWORD)"
                if reason_code.value in (4, 5, 134, 135)
                else f"broker {self.config.host}:{self.config.port} refused the connection: {reason_code}"
            )
            log.error("%s", self.last_error)
            return
        self.connected, self.subscribed = True, False
        self.connects += 1
        self.last_error = None
        self._attempt = 0
        client.reconnect_delay_set(self.config.reconnect_min, self.config.reconnect_min)
        # Subscribing again on every connect is the normal path: a broker that lost the session still works.
        client.subscribe([(t.filter, self.config.qos) for t in self.templates] + [(f, 1) for f in self.control])
        self.publish_status({"state": "online", "reason": ""})
        log.info("connected to %s:%s (session present: %s), subscribed to %s", self.config.host, self.config.port,
                 flags.session_present, [t.filter for t in self.templates])  # fmt: skip

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        # Ready means readings reach us: a publish between CONNACK and SUBACK finds no subscriber and is lost.
        refused = [t.filter for t, code in zip(self.templates, reason_codes) if code.is_failure]
        if refused:
            self.last_error = f"broker refused the subscription to {refused}; check the broker's ACL for this user"
            log.error("%s", self.last_error)
        self.subscribed = len(refused) < len(self.templates)
        control = [f for f, code in zip(self.control, reason_codes[len(self.templates):]) if code.is_failure]
        if control:  # requests cannot arrive; telemetry still does, so the daemon stays ready
            log.error("broker refused the subscription to the control topics %s: operator commands and bed events "
                      "are not received; check the broker's ACL for this user", control)  # fmt: skip

    def _next_delay(self) -> float:
        delay = backoff_delay(self._attempt, self.config.reconnect_min, self.config.reconnect_max, self._rng)
        self._attempt += 1
        self.client.reconnect_delay_set(delay, delay)
        return delay

    def _on_connect_fail(self, client, userdata) -> None:
        self.connected = False
        delay = self._next_delay()
        self.last_error = describe_connect_error(client.last_connect_error, self.config)
        log.error("%s; retrying in %.1f s", self.last_error, delay)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        was_connected, self.connected, self.subscribed = self.connected, False, False
        if self._stopping:
            return
        delay = self._next_delay()
        if was_connected:
            log.warning("disconnected from %s:%s (%s); reconnecting in %.1f s", self.config.host, self.config.port,
                        reason_code, delay)  # fmt: skip

    def _on_message(self, client, userdata, message: mqtt.MQTTMessage) -> None:
        control = next((kind for f, kind in self.control.items() if mqtt.topic_matches_sub(f, message.topic)), "")
        if control:
            self._enqueue(Telemetry(message.topic, None, message.topic, message.payload, time.time(), control=control))
            return
        pattern, stream, channel = match_topic(self.templates, message.topic)
        item = Telemetry(stream if stream is not None else message.topic, stream, message.topic, message.payload,
                         time.time(), pattern is not None, channel=channel, pattern=pattern or "")  # fmt: skip
        self._enqueue(item)

    def _enqueue(self, item: Telemetry) -> None:
        victim = self.queue.put(item)
        if victim is not None and self._on_drop is not None:
            self._on_drop(victim)
