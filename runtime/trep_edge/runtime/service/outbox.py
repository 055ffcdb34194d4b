"""What the daemon publishes after scoring, and where: alert episodes, sensor faults, stream statuses, scores, FHIR.

``Outbox`` is the one place that turns the monitor's results (``TickResult``, alerts of removed streams, lifecycle
changes) into MQTT messages (built by ``messages.py``): an alert change goes to the alerts topic (QoS 1, unless a
silence holds it back, ``control_topics``) and is retained on the stream's state topic with the stream's current
state, to the archive's alert record and, with ``[fhir] enabled``, as a FHIR Bundle; a stream's lifecycle status
goes to the same topics; a sensor fault to the alerts topic only (the state topic is the anomaly episode's).
It also times each reading from its arrival to its score's publication (``trep_edge_reading_latency_seconds``).
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

from trep_edge.runtime.core.alerts import StreamStatus
from trep_edge.runtime.core.monitor import AlertOut, TickResult
from trep_edge.runtime.service.archive import ArchiveRecorder
from trep_edge.runtime.service.config import MonitorConfig
from trep_edge.runtime.service.control_topics import Control
from trep_edge.runtime.service.fhir import FhirEpisodes
from trep_edge.runtime.service.http_status import Metrics
from trep_edge.runtime.service.messages import alert_message, fill_topic, score_message, sensor_message, stream_message
from trep_edge.runtime.service.mqtt_io import MqttLink
from trep_edge.runtime.service.routing import ModelUnit, Routes

log = logging.getLogger(__name__)

ARRIVALS_KEPT = 100_000
"""Arrival times held for the latency metric before those older than 10 minutes are forgotten."""


class Outbox:
    """Publishes every model's results (module docstring); ``config`` is the running one (the daemon's reload sets
    it)."""

    def __init__(self, config: MonitorConfig, link: MqttLink, routes: Routes, control: Control, metrics: Metrics,
                 archive: ArchiveRecorder | None) -> None:  # fmt: skip
        self.config, self.link, self.routes, self.control = config, link, routes, control
        self.metrics, self.archive = metrics, archive
        self.fhir = FhirEpisodes()  # every model's episodes: stream ids are unique across models
        self._arrivals: dict[tuple[str, float], float] = {}

    def arrived(self, stream: str, timestamp: float, received: float) -> None:
        """Note when a reading's message arrived, for its latency once its score is published."""
        self._arrivals.setdefault((stream, timestamp), received)

    def forget_old_arrivals(self) -> None:
        """After a batch of messages: bound the arrival times kept."""
        if len(self._arrivals) > ARRIVALS_KEPT:
            # Readings merged into a step under another timestamp never get a score of their own; forget them.
            horizon = time.time() - 600
            self._arrivals = {k: v for k, v in self._arrivals.items() if v > horizon}

    def tick(self, unit: ModelUnit, result: TickResult) -> None:
        """One model's tick: lifecycle changes, alert changes, sensor faults and (optionally) scores."""
        topics = self.config.topics
        if result.batch_rows:
            self.metrics.observe("trep_edge_inference_batch_rows", result.batch_rows, **unit.labels)
            self.metrics.observe("trep_edge_inference_seconds", result.inference_seconds, **unit.labels)
        self._lifecycle_of_scored(unit, result, first=True)  # a stream's first ok precedes an alert of the same tick
        for alert in result.alerts:
            self.alert(unit, alert)
        self._lifecycle_of_scored(unit, result, first=False)  # an alert ends the pending run it came from
        for event in result.sensor:
            # The alerts topic only: the retained state topic is the stream's anomaly episode, which a sensor fault
            # must not overwrite.
            message = sensor_message(event, unit.engine, self.config.revision)
            self.link.publish(fill_topic(topics.alerts, event.stream), json.dumps(message), qos=1)
            self.metrics.inc("trep_edge_sensor_faults_total", state=event.state, **unit.labels)
            log.info("sensor fault %s %s: value %.6g, plausible [%.6g, %.6g]", message["alert_id"], event.state,
                     event.value, event.low, event.high)  # fmt: skip
        published = time.time()
        for s in result.scored:
            if topics.scores:
                self.link.publish(fill_topic(topics.scores, s.stream), json.dumps(score_message(s, unit.engine)),
                                  qos=topics.scores_qos)  # fmt: skip
            arrival = self._arrivals.pop((s.stream, s.timestamp), None)
            if arrival is not None:
                self.metrics.observe("trep_edge_reading_latency_seconds", max(0.0, published - arrival))
        if result.scored:
            self.metrics.inc("trep_edge_scored_total", len(result.scored), **unit.labels)
        self.metrics.set("trep_edge_last_tick_timestamp_seconds", published)

    def release_silenced(self) -> None:
        """Silences that ran out: publish what they held back."""
        for message in self.control.expire(time.time()):
            self.episode(self.routes.unit_of(message["stream"]), message, notify=True)
        self.metrics.set("trep_edge_silences", len(self.control.silences))

    def _lifecycle_of_scored(self, unit: ModelUnit, result: TickResult, first: bool) -> None:
        """The scored streams' lifecycle changes: with ``first``, a stream's first ``ok`` (on its first scored
        reading); else ``pending`` and its end, from the gate's hot run after the tick (on the latest reading)."""
        lifecycle = unit.lifecycle
        if first:
            for s in result.scored:
                self.status(unit, lifecycle.scored(s.stream, s.warming, s.timestamp))
            return
        if not (lifecycle.pending_enabled or lifecycle.pending):
            return  # nothing pending to publish or to end: skip a per-stream pass on every tick
        debounce = unit.config.detector.debounce
        for s in {s.stream: s for s in result.scored}.values():
            hot_run = result.hot_runs.get(s.stream, 0)
            details = {"hot_readings": hot_run, "debounce": debounce, "score": s.surprise, "threshold": s.threshold}
            self.status(unit, lifecycle.scored(s.stream, s.warming, s.timestamp, hot_run, details))

    def status(self, unit: ModelUnit, change: StreamStatus | None) -> None:
        """A stream's lifecycle status: on the alerts topic (all but its first ``ok``) and retained on its state
        topic, unless an open episode's last message is to be retained again instead."""
        if change is None:
            return
        topics = self.config.topics
        payload = json.dumps(stream_message(change, unit.engine, self.config.revision))
        if change.to_alerts:
            self.link.publish(fill_topic(topics.alerts, change.stream), payload, qos=1)
        retained = payload if change.retain is None else json.dumps(change.retain)
        self.link.publish(fill_topic(topics.state, change.stream), retained, qos=1, retain=True)
        # One line per pending run, like an alert; silence and recovery can come by the thousand (a gateway down):
        # the sweep logs those in one line.
        log.log(logging.INFO if change.status == "pending" or change.reason == "pending_ended" else logging.DEBUG,
                "stream %s %s (%s)%s", change.stream, change.status, change.reason,
                f", alert {change.open_alert} open" if change.open_alert else "")  # fmt: skip

    def stale_gauge(self, unit: ModelUnit) -> None:
        """The number of ``unit``'s streams reported ``no_data``."""
        self.metrics.set("trep_edge_streams_stale", len(unit.lifecycle.stale), **unit.labels)

    def alert(self, unit: ModelUnit, alert: AlertOut) -> None:
        """An alert change: archive record, episode message (unless silenced), FHIR record, counter and log line."""
        message = alert_message(alert, unit.engine, self.config.revision)
        if self.archive is not None and unit is self.routes.default:
            self.archive.record_alert(message)  # retraining leaves alert ranges out (docs/retraining.md)
        notify = self.control.on_episode(message, time.time())  # ack and silence fields; a silence holds it back
        if not notify:
            self.metrics.inc("trep_edge_alerts_withheld_total")
        self.episode(unit, message, notify)
        # A record, not a notification: silences do not hold it.
        self._fhir(unit, alert, message["published_at"])
        self.metrics.inc("trep_edge_alerts_total", state=alert.state, **unit.labels)
        log.info("alert %s %s (%s): score %.3g vs threshold %.3g%s", alert.alert_id, alert.state, alert.severity,
                 alert.score, alert.threshold, f" (channel {alert.channel})" if alert.channel else "")  # fmt: skip

    def _fhir(self, unit: ModelUnit, alert: AlertOut, published: float) -> None:
        """With ``[fhir] enabled``, the episode change as a FHIR transaction Bundle on its own topic
        (runtime/trep_edge/runtime/service/fhir.py), naming the model that scored it (its card's channel codes)."""
        fhir = self.config.fhir
        if fhir.enabled:
            bundle = self.fhir.bundle(alert, unit.engine.card, unit.engine.sha256, fhir, published)
            self.link.publish(fill_topic(fhir.topic, alert.stream), json.dumps(bundle), qos=1)

    def episode(self, unit: ModelUnit, message: dict[str, Any], notify: bool) -> None:
        """An episode message: retained on the stream's state topic, and on the alerts topic when notified."""
        payload = json.dumps(message)
        if notify:
            self.link.publish(fill_topic(self.config.topics.alerts, message["stream"]), payload, qos=1)
        self.link.publish(fill_topic(self.config.topics.state, message["stream"]), payload, qos=1, retain=True)
        unit.lifecycle.episode(message["stream"], message)
