"""The daemon's intake: each queued MQTT message becomes readings filed into their model's streams, a control
request applied, or a rejection counted.

A telemetry message is routed to its model (``routing``), parsed (``payloads``: JSON, line protocol, Sparkplug B),
kept only for the streams this shard owns, and its readings go to the model's monitor (``Monitor.ingest``, whose
window policy may refuse one). Bad input is counted per kind (``trep_edge_malformed_total`` for what does not
parse, ``trep_edge_rejected_total`` for what the policy refuses), logged at a rate limit (``BadInput``) and a
sample sent to the dead-letter topic; a message whose processing raises (a bug) costs that message only
(``internal_error``). Control messages (operator commands, bed events) come through the same queue, in arrival
order among the readings, and are applied by ``control_topics.Control``.
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field

from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.service.config import MonitorConfig
from trep_edge.runtime.service.control_topics import CONTROL_KINDS, ControlError, parse_request
from trep_edge.runtime.service.http_status import Metrics
from trep_edge.runtime.service.messages import dead_letter_message, fill_topic
from trep_edge.runtime.service.mqtt_io import Telemetry
from trep_edge.runtime.service.outbox import Outbox
from trep_edge.runtime.service.payloads import MALFORMED_KINDS, mark_disconnected, parse_payload_lenient
from trep_edge.runtime.service.routing import OTHER_MODEL_KIND, ModelUnit, Routes, route
from trep_edge.runtime.service.sparkplug import SparkplugDecoder

log = logging.getLogger(__name__)

TOPIC_KIND = "unmatched_topic"
"""Malformed kind of a message whose topic matches no template (only possible with overlapping templates)."""
INTERNAL_KIND = "internal_error"
"""Rejection kind of a message whose processing raised: a bug, counted and logged instead of stopping the daemon."""
OTHER_SHARD_METRIC = "trep_edge_messages_other_shard_total"


@dataclass
class _KindLog:
    last_log: float = -math.inf
    unlogged: int = 0
    last_sample: float = -math.inf


@dataclass
class BadInput:
    """Rate limits for logging and dead-lettering rejected input, per kind."""

    log_interval: float
    sample_interval: float
    kinds: dict[str, _KindLog] = field(default_factory=dict)

    def note(self, kind: str, now: float) -> tuple[int, bool]:
        """Record one rejection; return (how many to report in a log line now, 0 = stay quiet; send a sample?)."""
        k = self.kinds.setdefault(kind, _KindLog())
        k.unlogged += 1
        report = 0
        if now - k.last_log >= self.log_interval:
            report, k.unlogged, k.last_log = k.unlogged, 0, now
        sample = now - k.last_sample >= self.sample_interval
        if sample:
            k.last_sample = now
        return report, sample


class Intake:
    """Takes in the queued messages (module docstring); ``config`` is the running one (set by ``set_config``)."""

    def __init__(self, config: MonitorConfig, routes: Routes, outbox: Outbox, metrics: Metrics, shard: Shard) -> None:
        self.routes, self.outbox, self.metrics, self.shard = routes, outbox, metrics, shard
        self.bad = BadInput(config.input.log_interval, config.input.dead_letter_interval)
        self.set_config(config)
        self._sparkplug = SparkplugDecoder()  # Sparkplug B BIRTH aliases, bounded; protobuf only when decoding
        self._internal_errors = 0

    def set_config(self, config: MonitorConfig) -> None:
        """The settings after a reload (the rate limits of bad input among them)."""
        self.config = config
        self.bad.log_interval = config.input.log_interval
        self.bad.sample_interval = config.input.dead_letter_interval

    def on_drop(self, item: Telemetry) -> None:
        """The queue was full: ``item`` (the oldest of its stream) was dropped."""
        self.metrics.inc("trep_edge_dropped_total")
        report, _ = self.bad.note("queue_overflow", time.monotonic())
        if report:
            log.warning("intake queue full: dropped %d message(s) (oldest of their stream), last from %s",
                        report, item.topic)  # fmt: skip

    def on_refused(self, topic: str, reason: str) -> None:
        """A publish paho refused (its own queue full)."""
        self.metrics.inc("trep_edge_publish_refused_total")

    def ingest(self, items: list[Telemetry]) -> None:
        """File a batch of messages, each on its own: one that raises is counted and rejected, the rest go on."""
        if not items:
            return
        # Each model's channels and renames, worked out once per batch, not per message.
        intake = {unit.name: (unit.channels, unit.config.input.renames) for unit in self.routes.units}
        now = time.time()
        for item in items:
            self.metrics.inc("trep_edge_messages_total")
            try:
                unit = route(self.routes.units, item.topic)
                self._ingest_one(item, unit, *intake[unit.name], now)
            except Exception as exc:  # the message boundary: a bug must cost one message, not the daemon
                if not self._internal_errors:  # the first traceback; later ones are counted and rate-limited
                    log.exception("internal error on a message from %s", item.topic)
                self._internal_errors += 1
                self.reject(INTERNAL_KIND, f"internal error: {exc!r}", item)
        self.outbox.forget_old_arrivals()

    def _ingest_one(self, item: Telemetry, unit: ModelUnit, channels: list[str] | None, renames: dict[str, str],
                    now: float) -> None:  # fmt: skip
        if item.control:
            self._control(item)
            return
        cfg = unit.config.input
        codes = cfg.disconnected_codes
        if not item.matched:
            self.reject(TOPIC_KIND, "topic matches no template in mqtt.topics", item)
            return
        if item.stream is not None and not self.shard.owns(item.stream):
            self.metrics.inc(OTHER_SHARD_METRIC)
            return
        readings, errors = parse_payload_lenient(item.payload, item.stream, channels, now, cfg.max_bytes, cfg.max_skew,
                                                 cfg.unknown_channels, renames, item.channel, cfg.format,
                                                 cfg.influx_precision, item.topic, self._sparkplug)  # fmt: skip
        if item.stream is None and self.shard.count > 1:
            # Streams named in the payload: keep this shard's readings. Bad input of such messages names no stream
            # to route it by, so shard 0 alone reports it rather than every shard once.
            owned = [r for r in readings if self.shard.owns(r.stream)]
            if readings and not owned:
                self.metrics.inc(OTHER_SHARD_METRIC)
            readings, errors = owned, errors if self.shard.index == 0 else []
        for error in errors:
            self.reject(error.kind, str(error), item)
        if cfg.format == "sparkplug":
            self._sparkplug_session()
        routed, archive = self.routes.routed, self.outbox.archive
        for reading in readings:
            if routed and not self._claim(unit, reading.stream, item):
                continue
            reading = mark_disconnected(reading, codes)
            kind = unit.monitor.ingest(reading, now)
            if kind is not None:
                self.reject(kind, f"reading at {reading.timestamp} refused by the window policy", item)
                if kind == "too_many_streams":  # which feed is crowding out the others
                    self.metrics.inc("trep_edge_streams_refused_total", pattern=item.pattern)
                continue
            if routed:
                self.routes.owner[reading.stream] = unit
            self.metrics.inc("trep_edge_readings_total")
            if reading.stream in unit.lifecycle.stale:
                self.outbox.status(unit, unit.lifecycle.accepted(reading.stream, reading.timestamp))
                self.outbox.stale_gauge(unit)
            if archive is not None and unit is self.routes.default:  # the archive's columns are this model's channels
                archive.record(reading.stream, reading.timestamp, reading.values)
            self.outbox.arrived(reading.stream, reading.timestamp, item.received)

    def _claim(self, unit: ModelUnit, stream: str, item: Telemetry) -> bool:
        """Whether ``unit`` may score ``stream``: not while another model takes its readings (refused); a stream
        restored under another model moves to ``unit`` (the routes changed since the checkpoint)."""
        owner = self.routes.owner.get(stream)
        if owner is not None and owner is not unit:
            self.reject(OTHER_MODEL_KIND, f"stream {stream!r} is scored by model {owner.name}, but this topic routes "
                        f"to model {unit.name}: give the topics of different models distinct stream ids", item)
            return False
        if owner is None:
            for other in self.routes.units:
                if other is not unit and other.monitor.has_stream(stream):
                    for alert in other.monitor.remove_streams([stream]):
                        self.outbox.alert(other, alert)
                    other.lifecycle.forget([stream])
                    log.warning("stream %s moved from model %s to model %s, where its topic routes now; its state "
                                "starts again", stream, other.name, unit.name)  # fmt: skip
        return True

    def _sparkplug_session(self) -> None:
        """Act on what the last Sparkplug message said of its edge node: a death reports the node's (and its
        devices') or the device's streams ``no_data``; a gap or an unreadable message asks the node to rebirth. Every
        shard reads every node: the shard owning the node's stream id counts its gaps and asks."""
        events = self._sparkplug.take(time.monotonic(), self.config.input.sparkplug_rebirth_interval)
        gaps = sum(1 for node in events.seq_gaps if self.shard.owns(node))
        if gaps:
            self.metrics.inc("trep_edge_sparkplug_seq_gaps_total", gaps)
        for rebirth in events.rebirths:
            if self.shard.owns(rebirth.node):
                self.outbox.link.publish(rebirth.topic, rebirth.payload, qos=0)  # the spec's QoS for NCMD
                self.metrics.inc("trep_edge_sparkplug_rebirth_requests_total", reason=rebirth.reason)
                log.info("asked Sparkplug edge node %s to rebirth (%s)", rebirth.node, rebirth.reason)
        for death in events.deaths:
            newly = 0
            for unit in self.routes.units:  # a node's devices may be routed to several models
                dead = [stream for stream in unit.monitor.streams if death.covers(stream)]
                changes = unit.lifecycle.offline(dead, time.time(), "death", {"sparkplug": death.message_type})
                for change in changes:
                    self.outbox.status(unit, change)
                self.outbox.stale_gauge(unit)
                newly += len(changes)
            log.info("Sparkplug %s of %s: %d stream(s) newly no_data", death.message_type, death.stream, newly)

    def reject(self, kind: str, message: str, item: Telemetry) -> None:
        """Count, log at a rate limit and dead-letter a sample; never raises."""
        malformed = kind in MALFORMED_KINDS or kind in (TOPIC_KIND, INTERNAL_KIND) or kind in CONTROL_KINDS
        family = "trep_edge_malformed_total" if malformed else "trep_edge_rejected_total"
        self.metrics.inc(family, kind=kind)
        report, sample = self.bad.note(kind, time.monotonic())
        if report:
            log.warning("rejected %d message(s) as %s in the last %.0f s; latest on %s: %s", report, kind,
                        self.config.input.log_interval, item.topic, message)  # fmt: skip
        if sample and self.config.topics.dead_letter:
            letter = dead_letter_message(kind, message, item)
            self.outbox.link.publish(self.config.topics.dead_letter, json.dumps(letter), qos=0)

    def _control_unit(self, item: Telemetry) -> ModelUnit:
        """The model whose stream a control message is about: the default model for one that names none (a pattern
        silence) or that is malformed (``Control.handle`` reports it)."""
        if not self.routes.routed:
            return self.routes.default
        try:
            request = parse_request(item.payload, item.control, self.config.input.max_bytes)
        except ControlError:
            return self.routes.default
        return self.routes.default if request.stream is None else self.routes.unit_of(request.stream)

    def _control(self, item: Telemetry) -> None:
        """An operator command or bed event (runtime/trep_edge/runtime/service/control_topics.py): apply it, publish
        what it changed, reply."""
        unit, outbox = self._control_unit(item), self.outbox
        outcome = outbox.control.handle(item, unit.monitor, unit.lifecycle.open, time.time(),
                                        self.config.input.max_bytes)  # fmt: skip
        if outcome.error is not None:
            self.reject(outcome.error.kind, str(outcome.error), item)
        for alert in outcome.cleared:
            outbox.alert(unit, alert)
        if outcome.forget:
            unit.lifecycle.forget(outcome.forget)
            outbox.stale_gauge(unit)
            self.routes.forget(outcome.forget)  # discharged or renamed: the next reading of the id claims it afresh
        for message in outcome.retain:
            outbox.episode(self.routes.unit_of(message["stream"]), message, notify=False)
        for message in outcome.notify:
            outbox.episode(self.routes.unit_of(message["stream"]), message, notify=True)
        self.metrics.inc("trep_edge_control_requests_total", request=outcome.request, result=outcome.result)
        if outcome.reply is not None:
            topic = fill_topic(self.config.topics.replies, client_id=self.config.mqtt.client_id)
            outbox.link.publish(topic, json.dumps(outcome.reply), qos=1)
            log.info("%s on %s: %s (%s)", outcome.request, item.topic, outcome.result, outcome.reply.get("message"))
