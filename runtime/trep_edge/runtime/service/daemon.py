"""The monitor daemon's main loop: MQTT telemetry in, scores and alert state changes out.

One thread does all the scoring work, in a plain loop:

1. drain the intake queue (filled by the MQTT network thread) and parse each message (``payloads``); bad input
   is counted per kind, logged at a rate limit and a sample forwarded to the dead-letter topic; it never stops
   the loop;
2. file the readings into their streams (``Monitor.ingest``);
3. every ``tick_interval`` seconds, score all streams with new steps in one onnxruntime call (``Monitor.tick``)
   and publish each alert state change (QoS 1) plus the stream's current alert state (QoS 1, retained), and
   optionally every score; the lifecycle status (``alerts.Lifecycle``: a stream's first ``ok``, ``pending``) of
   the scored streams too;
4. every ``checkpoint_interval`` seconds (and on SIGTERM) write the monitor's state atomically, so a restarted
   daemon resumes with warm streams; with it the lifecycle (streams reported ``no_data``, pending runs, open
   episodes' last messages), so a restart repeats none of them;
5. with ``[monitor] stale_after``, at most every min(1 s, stale_after / 4) report the streams silent that long as
   ``no_data`` (once), and a reported stream's next accepted reading as ``ok``; a Sparkplug B NDEATH or DDEATH
   reports its node's or device's streams at once (``sparkplug``: also its rebirth requests);
6. on SIGHUP, or when the model file changes, load the new config and model aside and swap them in only if
   both are good; a bad model is refused, logged and reported on the status topic while the old one keeps
   running;
7. messages of the control topics (operator commands, bed events) come through the same queue, in arrival order
   among the readings, and are applied by ``control_topics.Control``; every episode message passes its
   ``on_episode`` (acknowledgement and silence fields; a silence keeps it off the alerts topic).

With ``[[routes]]`` the daemon runs several models (``routing.ModelUnit``: engine, monitor, lifecycle, file watch
each): every message goes to the model its topic routes to, each tick scores every model's streams, a model file
change reloads that model alone (the others' streams are not touched), and the checkpoint holds every model's
streams (``checkpoint.join_models``). Per-model metrics then carry a ``model`` label, and the status topic lists
the models with their stream counts.

What a SIGKILL can cost is bounded by the checkpoint interval: the restarted daemon resumes from the last
checkpoint, so readings received after it (already acknowledged to the broker) are missing from its windows (up
to ``max_gap`` steps they are filled as missing, longer gaps reset the stream), and alert changes published after
it may be published again, with the same ``alert_id`` (episode numbers are part of the checkpoint).
See docs/alerts.md.
"""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from trep_edge.runtime.core.alerts import STATUS_OF_STATE, AlertTracker, Lifecycle, StreamStatus
from trep_edge.runtime.service.archive import ArchiveHeader, ArchiveRecorder, declare_archive_metrics
from trep_edge.runtime.service.checkpoint import DEFAULT_MODEL, join_models, load_checkpoint, save_checkpoint, split_models
from trep_edge.runtime.service.config import ModelSettings, MonitorConfig, load_config
from trep_edge.runtime.service.control_topics import (CONTROL_KINDS, Control, ControlError, control_filters, declare_control_metrics,
                             parse_request)
from trep_edge.runtime.core.engine import Engine, file_sha256, load_engine
from trep_edge.runtime.service.fhir import FhirEpisodes
from trep_edge.runtime.service.http_status import StatusServer, monitor_metrics
from trep_edge.runtime.core.monitor import AlertOut, Monitor, ScoredReading, SensorEvent, TickResult
from trep_edge.runtime.service.mqtt_io import MqttLink, Telemetry, TelemetryQueue, TopicTemplate
from trep_edge.runtime.service.payloads import MALFORMED_KINDS, mark_disconnected, parse_payload_lenient
from trep_edge.runtime.service.reshard import select_streams, stream_names
from trep_edge.runtime.service.routing import OTHER_MODEL_KIND, ModelUnit, check_routes, route, scoring_settings
from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.service.sparkplug import SparkplugDecoder, declare_sparkplug_metrics
from trep_edge.runtime.core.windows import WINDOW_REJECTIONS

log = logging.getLogger(__name__)

ALERT_SCHEMA_VERSION = 1
SCORE_SCHEMA_VERSION = 1
DEAD_LETTER_SCHEMA_VERSION = 1
DEAD_LETTER_SAMPLE_BYTES = 2048
TOPIC_KIND = "unmatched_topic"
"""Malformed kind of a message whose topic matches no template (only possible with overlapping templates)."""
INTERNAL_KIND = "internal_error"
"""Rejection kind of a message whose processing raised: a bug, counted and logged instead of stopping the daemon."""
STATUS_COUNTS_INTERVAL = 10.0
"""Seconds between retained status updates carrying the counters (the status topic is also refreshed on connect)."""
OTHER_SHARD_METRIC = "trep_edge_messages_other_shard_total"


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN: missing or undefined numbers are published as null."""
    return None if value is None or not math.isfinite(value) else float(value)


def fill_topic(template: str, stream: str = "", client_id: str = "") -> str:
    """A topic from a ``[topics]`` template (``{stream}``, ``{client_id}``)."""
    return template.replace("{stream}", stream).replace("{client_id}", client_id)


def model_field(engine: Engine) -> dict[str, str]:
    """The ``model`` of a published message: the model that scored it."""
    return {"name": engine.card.name, "sha256": engine.sha256}


def _envelope(kind: str, engine: Engine, revision: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A message of the alerts and state topics: ``fields`` between the version and kind and what every such message
    carries (the model, the config revision, advisory, when it was published)."""
    return {"schema_version": ALERT_SCHEMA_VERSION, "kind": kind, **fields, "model": model_field(engine),
            "config_revision": revision, "advisory": True, "published_at": time.time()}  # fmt: skip


def alert_message(alert: AlertOut, engine: Engine, revision: str) -> dict[str, Any]:
    """The versioned alert JSON (docs/alerts.md), published on state changes and retained as the current state."""
    return _envelope("anomaly", engine, revision, {
        "alert_id": alert.alert_id,
        "stream": alert.stream,
        "state": alert.state,
        "status": STATUS_OF_STATE[alert.state],
        "active": alert.state != "cleared",
        "severity": alert.severity,
        "score": finite_or_none(alert.score),
        "threshold": finite_or_none(alert.threshold),
        "channel": alert.channel or None,
        "values": {k: finite_or_none(v) for k, v in alert.values.items()},
        "timestamp": finite_or_none(alert.timestamp),
        "window_start": finite_or_none(alert.window_start),
        "window_end": finite_or_none(alert.window_end),
        "explanation": None if alert.explanation is None else alert.explanation.to_dict(),
    })  # fmt: skip


def sensor_message(event: SensorEvent, engine: Engine, revision: str) -> dict[str, Any]:
    """A sensor fault (docs/alerts.md): a channel sent a value outside its plausible range, or the stream said its
    sensor is disconnected; or it recovered."""
    return _envelope("sensor", engine, revision, {
        "alert_id": f"{event.stream}:sensor" + (f":{event.channel}" if event.channel else ""),
        "stream": event.stream,
        "channel": event.channel or None,
        "fault": event.fault,
        "state": event.state,
        "status": STATUS_OF_STATE[event.state],
        "active": event.state == "raised",
        "value": finite_or_none(event.value),
        "plausible": [finite_or_none(event.low), finite_or_none(event.high)],
        "timestamp": finite_or_none(event.timestamp),
    })  # fmt: skip


def stream_message(change: StreamStatus, engine: Engine, revision: str) -> dict[str, Any]:
    """A stream's lifecycle status (docs/alerts.md): ``ok``, ``pending`` or ``no_data``, with its open episode's id."""
    return _envelope("stream", engine, revision, {
        "stream": change.stream,
        "status": change.status,
        "reason": change.reason,
        "active": change.open_alert is not None,
        "open_alert": change.open_alert,
        **{k: finite_or_none(v) if isinstance(v, float) else v for k, v in change.details.items()},
        "timestamp": finite_or_none(change.timestamp),
    })  # fmt: skip


def check_lifecycle(config: MonitorConfig) -> None:
    """Refuse a ``stale_after`` that every stream trips between two readings (no_data and ok on every reading)."""
    stale, period = config.monitor.stale_after, config.windows.period
    if stale and stale <= period:
        raise ValueError(f"monitor.stale_after ({stale:g} s) must exceed [windows] period ({period:g} s): every "
                         f"stream is silent that long between two readings; e.g. stale_after = {5 * period:g}, "
                         "or 0 (off)")  # fmt: skip


def score_message(s: ScoredReading, engine: Engine) -> dict[str, Any]:
    """One scored reading (by ``engine``'s model), for the optional scores topic."""
    return {
        "schema_version": SCORE_SCHEMA_VERSION,
        "stream": s.stream,
        "step": s.step,
        "timestamp": finite_or_none(s.timestamp),
        "raw": finite_or_none(s.raw),
        "score": finite_or_none(s.score),
        "surprise": finite_or_none(s.surprise),
        "threshold": finite_or_none(s.threshold),
        "channel": s.channel or None,
        "warming": s.warming,
        "alert": s.alert,
        "values": {k: finite_or_none(v) for k, v in s.values.items()},
        "model": model_field(engine),
    }


# -- bad input ----------------------------------------------------------------------------------------------------


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


# -- the daemon -----------------------------------------------------------------------------------------------------


class Daemon:
    """``trep-edge run``: owns the models (engine and monitor each), the MQTT link and the HTTP status server."""

    def __init__(
        self,
        config: MonitorConfig,
        config_path: str | None = None,
        env: Mapping[str, str] | None = None,
        flags: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        models = checked_models(config)
        control = control_filters(config)
        self.config = config
        self._config_source = (config_path, env, dict(flags or {}))
        self.routed = len(models) > 1
        self.metrics = monitor_metrics()
        self.shard = Shard.parse(config.monitor.shard)
        self.metrics.declare(OTHER_SHARD_METRIC, "counter", "messages skipped: their stream belongs to another shard")
        self.metrics.declare("trep_edge_shard_info", "gauge", "this daemon's shard i/N ([monitor] shard)")
        self.metrics.set("trep_edge_shard_info", 1.0, shard=str(self.shard.index), shards=str(self.shard.count))
        declare_archive_metrics(self.metrics)
        declare_sparkplug_metrics(self.metrics)
        declare_control_metrics(self.metrics)
        # Every kind exported at 0 from the start: an alert rule on rate() sees the first bad message.
        self.metrics.zero("trep_edge_malformed_total", "kind",
                          (*MALFORMED_KINDS, TOPIC_KIND, INTERNAL_KIND, *CONTROL_KINDS))  # fmt: skip
        rejections = tuple(k for k in WINDOW_REJECTIONS if k not in MALFORMED_KINDS)
        self.metrics.zero("trep_edge_rejected_total", "kind", rejections + (OTHER_MODEL_KIND,) * self.routed)
        self.metrics.zero("trep_edge_model_reloads_total", "result", ("ok", "refused"))
        self.units = [self._new_unit(model) for model in models]
        for unit in self.units:
            self.metrics.zero("trep_edge_alerts_total", "state", ("raised", "updated", "cleared"), **unit.labels)
        self.archive = ArchiveRecorder(config.archive, self.metrics) if config.archive.enabled else None
        self.fhir = FhirEpisodes()  # every model's episodes: stream ids are unique across models
        self.control = Control(self.shard, config.mqtt.client_id)  # acks and silences: the checkpoint's, if any
        self._restore(config)
        for unit in self.units:
            self._set_stale_gauge(unit)
        self._config_error: str | None = None  # why the last reload of the config was refused
        self._owner: dict[str, ModelUnit] = {}  # with routes: the model each stream took readings in since the start
        self.queue = TelemetryQueue(config.mqtt.queue_size)
        self.started_at = time.time()
        self.link = MqttLink(config.mqtt, self.queue, self.status_topic, self._status(), on_drop=self._on_drop,
                            on_refused=self._on_refused, control=control)
        self.http: StatusServer | None = None
        if config.http.port:
            try:
                self.http = StatusServer(config.http.host, config.http.port, self.metrics, self._health, self._ready)
            except OSError as exc:
                raise ValueError(f"cannot serve metrics on {config.http.host}:{config.http.port} ({exc}); "
                                 "choose another http.port, or 0 for none") from exc  # fmt: skip
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._bad = BadInput(config.input.log_interval, config.input.dead_letter_interval)
        self._arrivals: dict[tuple[str, float], float] = {}
        self._sparkplug = SparkplugDecoder()  # Sparkplug B BIRTH aliases, bounded; protobuf only when decoding
        self._internal_errors = 0
        self._allowance, self._taken, self._backlog = config.monitor.tick_max_messages, 0, 0
        self._cost: float | None = None  # seconds of intake + scoring per message, smoothed over ticks
        self._busy = 0.0  # seconds spent taking in messages since the last tick (the idle wait is not work)
        self._last_status = time.monotonic()
        self._last_loop = time.monotonic()
        self._last_checkpoint = time.monotonic()
        self._publish_model_metrics()

    # -- setup ---------------------------------------------------------------------------------------------------
    @property
    def status_topic(self) -> str:
        """The retained status topic."""
        return fill_topic(self.config.topics.status, client_id=self.config.mqtt.client_id)

    @property
    def default(self) -> ModelUnit:
        """The ``[model]`` model: it scores every topic no route takes (the only one without routes)."""
        return self.units[-1]

    @property
    def engine(self) -> Engine:
        """The default model's engine."""
        return self.default.engine

    @property
    def monitor(self) -> Monitor:
        """The default model's monitor."""
        return self.default.monitor

    @property
    def model_error(self) -> str | None:
        """Why the last reload was refused (the config's, else a model's), None while everything loaded."""
        return next((e for e in (self._config_error, *(u.error for u in self.units)) if e), None)

    @staticmethod
    def _load_engine(config: MonitorConfig) -> Engine:
        engine = load_engine(config.model.path, config.model.providers, config.model.threads, config.model.engine)
        check_engine(engine)
        if engine.fallback:
            log.warning("PROVIDER FALLBACK: %s", engine.fallback)
        return engine

    def _new_monitor(self, config: MonitorConfig, engine: Engine) -> Monitor:
        return Monitor(engine, config.windows, config.alerts, config.detector)

    def _new_unit(self, model: ModelSettings) -> ModelUnit:
        try:
            engine = self._load_engine(model.config)
        except Exception as exc:
            if not self.routed:
                raise
            raise ValueError(f"model {model.name} ({model.config.model.path}): {exc}") from exc
        return ModelUnit(model.name, [TopicTemplate(t) for t in model.match], model.config, engine,
                         self._new_monitor(model.config, engine), Lifecycle(model.config.alerts.pending),
                         {"model": model.name} if self.routed else {}, self._model_stamp(model.config.model.path))

    def _checkpoint_key(self, unit: ModelUnit) -> str:
        """A model's key in the checkpoint: the default model's state is stored as a daemon of one model stores it."""
        return DEFAULT_MODEL if unit is self.default else unit.name

    def _restore(self, config: MonitorConfig) -> None:
        """Every model's streams from the checkpoint, if there is one; an unusable checkpoint is moved aside."""
        path = Path(config.state.path) if config.state.path else None
        if path is None or not path.is_file():
            return
        try:
            saved, saved_meta = load_checkpoint(path)
            parts = split_models(saved, saved_meta)
            restored = []
            for unit in self.units:
                part = parts.pop(self._checkpoint_key(unit), None)
                if part is None:
                    continue
                state, meta = part
                state = self._owned_state(state, meta, path)
                restored.append((unit, state, meta, Monitor.from_state(unit.engine, state, unit.config.windows,
                                                                       unit.config.alerts, unit.config.detector)))
        except Exception as exc:  # any unreadable checkpoint: keep it for inspection, start fresh
            aside = path.with_name(path.name + f".unusable-{int(time.time())}")
            os.replace(path, aside)
            log.error("could not restore the checkpoint %s (%s); moved it to %s and starting fresh", path, exc, aside)
            return
        for name, (state, _) in parts.items():
            log.warning("checkpoint %s holds %d stream(s) of model %s, which no route names any more: dropped", path,
                        len(stream_names(state)), name)  # fmt: skip
        for unit, state, meta, monitor in restored:
            unit.monitor = monitor
            age = time.time() - float(meta.get("saved_at", time.time()))
            states = list(monitor.streams.values())
            log.info("restored %d streams (%d active, %d warming)%s from %s, saved %.1f s ago", len(states),
                     states.count("active"), states.count("warming"), f" of model {unit.name}" if self.routed else "",
                     path, age)  # fmt: skip
            self._restore_lifecycle(unit, state, meta, path)
        open_ids = {m.get("alert_id") for unit in self.units for m in unit.lifecycle.open.values()}
        self.control.restore(saved_meta.get("control"), open_ids, time.time())  # acks and silences that still apply

    def _restore_lifecycle(self, unit: ModelUnit, state: Mapping[str, np.ndarray], meta: Mapping[str, Any],
                           path: Path) -> None:  # fmt: skip
        """The lifecycle saved with the checkpoint (absent before it existed, and after ``trep-edge reshard``), for
        the restored streams; the open episodes are the alert tracker's. Unusable: start a fresh one, keep the rest."""
        pending, streams = unit.config.alerts.pending, unit.monitor.streams
        try:
            tracker = AlertTracker.from_state({k[8:]: v for k, v in state.items() if k.startswith("tracker/")})
            unit.lifecycle = Lifecycle.restore(pending, meta.get("lifecycle"), streams,
                                               tracker.open_ids(stream_names(state)))  # fmt: skip
        except Exception as exc:
            log.warning("checkpoint %s: could not restore the streams' lifecycle (%s); no stream is reported as "
                        "no_data or pending", path, exc)  # fmt: skip
            unit.lifecycle = Lifecycle.restore(pending, None, streams, {})
            return
        if unit.lifecycle.stale:
            log.info("%d restored stream(s) were reported as no_data: their next reading reports ok",
                     len(unit.lifecycle.stale))  # fmt: skip

    def _owned_state(self, state: dict[str, np.ndarray], meta: dict[str, Any], path: Path) -> dict[str, np.ndarray]:
        """The checkpoint's streams this shard owns: after a change of layout without ``reshard``, not all of them."""
        names = stream_names(state)
        keep = np.array([self.shard.owns(name) for name in names], dtype=bool)
        if keep.all():
            return state
        log.warning("checkpoint %s (written as shard %s) holds %d of %d streams that shard %s does not own: dropped; "
                    "they warm up again on their owner (to move their state instead, stop every shard and run "
                    "trep-edge reshard)", path, meta.get("shard", "0/1"), int((~keep).sum()), len(names), self.shard)
        return select_streams(state, keep)

    def _status(self) -> dict[str, Any]:
        e = self.engine
        return {
            "state": "online",
            "client_id": self.config.mqtt.client_id,
            "model": e.card.name,
            "model_sha256": e.sha256,
            "providers": e.providers,
            "provider_fallback": e.fallback,
            "engine": e.selected,
            "engine_reason": e.selection_reason,
            "model_error": self.model_error,
            "models": self._models_status(),
            "config_revision": self.config.revision,
            "shard": str(self.shard),
            "started_at": self.started_at,
            "advisory": True,
        }

    def _models_status(self) -> list[dict[str, Any]]:
        """Each model on the status topic: name, card, routes, engine, last refused reload and its streams by state."""
        out = []
        for unit in self.units:
            states = list(unit.monitor.streams.values())
            out.append({"name": unit.name, "model": unit.engine.card.name, "model_sha256": unit.engine.sha256,
                        "match": [t.template for t in unit.match] or None,
                        "engine": unit.engine.selected, "model_error": unit.error,
                        "streams": {state: states.count(state) for state in ("active", "warming")}})  # fmt: skip
        return out

    def _archive_header(self) -> ArchiveHeader:
        e = self.engine
        return ArchiveHeader(tuple(e.card.channels), e.card.name, e.sha256, self.config.windows.period)

    def _publish_model_metrics(self) -> None:
        series = {}
        for unit in self.units:
            e = unit.engine
            labels = {"engine": e.selected, "model": e.card.name, "providers": ",".join(e.providers),
                      "sha256": e.sha256}  # fmt: skip
            if self.routed:  # the model label names the model as every per-model series does; card: the card's name
                labels.update(card=e.card.name, **unit.labels)
            series[tuple(sorted(labels.items()))] = 1.0
        self.metrics.replace("trep_edge_model_info", series)

    # -- control -------------------------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Finish the current iteration, checkpoint, say offline and return from ``run`` (SIGTERM, SIGINT)."""
        self._stop.set()

    def request_reload(self) -> None:
        """Reload config and model at the next iteration (SIGHUP)."""
        self._reload.set()

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread can handle signals; an embedding program stops us with request_stop
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop())
        signal.signal(signal.SIGINT, lambda *_: self.request_stop())
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload())

    def _health(self) -> tuple[bool, str]:
        limit = max(5.0, 3 * self.config.monitor.tick_interval)
        quiet = time.monotonic() - self._last_loop
        if quiet >= limit:
            return False, f"the scoring loop has not turned for {quiet:.1f} s"
        if self._backlog:  # alive and turning: a restart would only lose the queue
            return True, f"degraded (backlog): {self._backlog} message(s) wait for later ticks"
        return True, ""

    def _ready(self) -> tuple[bool, str]:
        if not self.link.connected:
            return False, f"not connected to the broker: {self.link.last_error or 'connecting'}"
        if not self.link.subscribed:
            return False, f"not subscribed to the telemetry topics: {self.link.last_error or 'subscribing'}"
        return True, ""

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self) -> int:
        """Run until stopped; return the exit code."""
        self._install_signals()
        if self.http is not None:
            self.http.start()
            log.info("metrics on http://%s:%d/metrics", self.config.http.host, self.http.port)
        self.link.start()
        if self.archive is not None:
            self.archive.start(self._archive_header())
        next_tick = time.monotonic() + self.config.monitor.tick_interval
        next_watch = time.monotonic() + self.config.model.watch_interval
        next_sweep = next_stale = time.monotonic()
        try:
            while not self._stop.is_set():
                room = self._allowance - self._taken
                if room > 0:
                    self.queue.wait(min(0.1, max(0.0, next_tick - time.monotonic())))
                    items = self.queue.drain(room)
                    self._taken += len(items)
                    started = time.monotonic()
                    self._ingest(items)
                    self._busy += time.monotonic() - started
                else:  # this tick's budget is spent: the rest waits in the queue
                    self._stop.wait(min(0.1, max(0.0, next_tick - time.monotonic())))
                now = time.monotonic()
                self._last_loop = now
                if now >= next_tick:
                    self._budgeted_tick()
                    self._update_gauges()  # once per tick: it walks every stream
                    next_tick = max(next_tick + self.config.monitor.tick_interval, time.monotonic())
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload("SIGHUP")
                elif now >= next_watch:
                    next_watch = now + self.config.model.watch_interval
                    self._watch_models()
                evict_after = self.config.monitor.evict_after
                if evict_after and now >= next_sweep:
                    next_sweep = now + min(10.0, evict_after / 2)
                    self._evict(evict_after)
                stale_after = self.config.monitor.stale_after
                if stale_after and now >= next_stale:
                    next_stale = now + min(1.0, stale_after / 4)
                    self._mark_stale(stale_after)
                if self.config.state.path and now - self._last_checkpoint >= self.config.state.checkpoint_interval:
                    self.checkpoint()
                self.metrics.set("trep_edge_queue_depth", len(self.queue))
        finally:
            self._shutdown()
        return 0

    def _shutdown(self) -> None:
        # Messages already acknowledged to the broker are only safe once they are in the checkpoint.
        try:
            self._ingest(self.queue.drain())
            self._safe_tick()
            if self.config.state.path:
                self.checkpoint()
        finally:
            if self.archive is not None:
                self.archive.close()
            self.link.stop("shutdown")
            if self.http is not None:
                self.http.close()
            log.info("stopped")

    def _budgeted_tick(self) -> None:
        """Score, then size the next tick's intake so that intake plus scoring stay within the budget."""
        cfg = self.config.monitor
        taken, self._taken = self._taken, 0
        started = time.monotonic()
        self._safe_tick()
        # Work only: counting the wait between ticks made a quiet tick look slow per message, and the allowance
        # shrank tick after tick (halving at tick_interval 1 s) until the daemon took in one message per tick.
        spent, self._busy = self._busy + time.monotonic() - started, 0.0
        if taken:
            # Seconds per message, smoothed: one slow tick (a reload, a checkpoint) must not starve the next ones.
            cost = spent / taken
            self._cost = cost if self._cost is None else 0.7 * self._cost + 0.3 * cost
        fit = cfg.tick_max_messages if self._cost is None else int(cfg.tick_budget_ms / 1000 / max(self._cost, 1e-7))
        self._allowance = max(1, min(cfg.tick_max_messages, fit))
        self._backlog = len(self.queue) if taken >= self._allowance or len(self.queue) > self._allowance else 0
        self.metrics.set("trep_edge_tick_backlog", self._backlog)

    # -- intake --------------------------------------------------------------------------------------------------
    def _on_drop(self, item: Telemetry) -> None:
        self.metrics.inc("trep_edge_dropped_total")
        report, _ = self._bad.note("queue_overflow", time.monotonic())
        if report:
            log.warning("intake queue full: dropped %d message(s) (oldest of their stream), last from %s",
                        report, item.topic)  # fmt: skip

    def _on_refused(self, topic: str, reason: str) -> None:
        self.metrics.inc("trep_edge_publish_refused_total")

    def _ingest(self, items: list[Telemetry]) -> None:
        if not items:
            return
        # Each model's channels and renames, worked out once per batch, not per message.
        intake = {unit.name: (unit.channels, unit.config.input.renames) for unit in self.units}
        now = time.time()
        for item in items:
            self.metrics.inc("trep_edge_messages_total")
            try:
                unit = route(self.units, item.topic)
                self._ingest_one(item, unit, *intake[unit.name], now)
            except Exception as exc:  # the message boundary: a bug must cost one message, not the daemon
                if not self._internal_errors:  # the first traceback; later ones are counted and rate-limited
                    log.exception("internal error on a message from %s", item.topic)
                self._internal_errors += 1
                self._reject(INTERNAL_KIND, f"internal error: {exc!r}", item)
        if len(self._arrivals) > 100_000:
            # Readings merged into a step under another timestamp never get a score of their own; forget them.
            horizon = time.time() - 600
            self._arrivals = {k: v for k, v in self._arrivals.items() if v > horizon}

    def _ingest_one(self, item: Telemetry, unit: ModelUnit, channels: list[str] | None, renames: dict[str, str],
                    now: float) -> None:  # fmt: skip
        if item.control:
            self._control(item)
            return
        cfg = unit.config.input
        codes = cfg.disconnected_codes
        if not item.matched:
            self._reject(TOPIC_KIND, "topic matches no template in mqtt.topics", item)
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
            self._reject(error.kind, str(error), item)
        if cfg.format == "sparkplug":
            self._sparkplug_session()
        for reading in readings:
            if self.routed and not self._claim(unit, reading.stream, item):
                continue
            reading = mark_disconnected(reading, codes)
            kind = unit.monitor.ingest(reading, now)
            if kind is not None:
                self._reject(kind, f"reading at {reading.timestamp} refused by the window policy", item)
                if kind == "too_many_streams":  # which feed is crowding out the others
                    self.metrics.inc("trep_edge_streams_refused_total", pattern=item.pattern)
                continue
            if self.routed:
                self._owner[reading.stream] = unit
            self.metrics.inc("trep_edge_readings_total")
            if reading.stream in unit.lifecycle.stale:
                self._publish_status(unit, unit.lifecycle.accepted(reading.stream, reading.timestamp))
                self._set_stale_gauge(unit)
            if self.archive is not None and unit is self.default:  # the archive's columns are this model's channels
                self.archive.record(reading.stream, reading.timestamp, reading.values)
            self._arrivals.setdefault((reading.stream, reading.timestamp), item.received)

    def _claim(self, unit: ModelUnit, stream: str, item: Telemetry) -> bool:
        """Whether ``unit`` may score ``stream``: not while another model takes its readings (refused); a stream
        restored under another model moves to ``unit`` (the routes changed since the checkpoint)."""
        owner = self._owner.get(stream)
        if owner is not None and owner is not unit:
            self._reject(OTHER_MODEL_KIND, f"stream {stream!r} is scored by model {owner.name}, but this topic routes "
                         f"to model {unit.name}: give the topics of different models distinct stream ids", item)
            return False
        if owner is None:
            for other in self.units:
                if other is not unit and other.monitor.has_stream(stream):
                    for alert in other.monitor.remove_streams([stream]):
                        self._publish_alert(other, alert)
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
                self.link.publish(rebirth.topic, rebirth.payload, qos=0)  # the spec's QoS for NCMD
                self.metrics.inc("trep_edge_sparkplug_rebirth_requests_total", reason=rebirth.reason)
                log.info("asked Sparkplug edge node %s to rebirth (%s)", rebirth.node, rebirth.reason)
        for death in events.deaths:
            newly = 0
            for unit in self.units:  # a node's devices may be routed to several models
                dead = [stream for stream in unit.monitor.streams if death.covers(stream)]
                changes = unit.lifecycle.offline(dead, time.time(), "death", {"sparkplug": death.message_type})
                for change in changes:
                    self._publish_status(unit, change)
                self._set_stale_gauge(unit)
                newly += len(changes)
            log.info("Sparkplug %s of %s: %d stream(s) newly no_data", death.message_type, death.stream, newly)

    def _reject(self, kind: str, message: str, item: Telemetry) -> None:
        """Count, log at a rate limit and dead-letter a sample; never raises."""
        malformed = kind in MALFORMED_KINDS or kind in (TOPIC_KIND, INTERNAL_KIND) or kind in CONTROL_KINDS
        family = "trep_edge_malformed_total" if malformed else "trep_edge_rejected_total"
        self.metrics.inc(family, kind=kind)
        report, sample = self._bad.note(kind, time.monotonic())
        if report:
            log.warning("rejected %d message(s) as %s in the last %.0f s; latest on %s: %s", report, kind,
                        self.config.input.log_interval, item.topic, message)  # fmt: skip
        if sample and self.config.topics.dead_letter:
            text = item.payload[:DEAD_LETTER_SAMPLE_BYTES].decode("utf-8", errors="replace")
            letter = {"schema_version": DEAD_LETTER_SCHEMA_VERSION, "kind": kind, "error": message,
                      "topic": item.topic, "stream": item.stream, "received": item.received,
                      "payload": text, "truncated": len(item.payload) > DEAD_LETTER_SAMPLE_BYTES}  # fmt: skip
            self.link.publish(self.config.topics.dead_letter, json.dumps(letter), qos=0)

    # -- scoring -------------------------------------------------------------------------------------------------
    def _safe_tick(self) -> None:
        for unit in self.units:
            try:
                if unit is self.units[0]:
                    self._release_silenced()  # once per tick, before any model's alerts of this tick
                self._tick(unit)
            except Exception:  # e.g. onnxruntime failing: count, log, keep the loop (and /healthz) alive
                self.metrics.inc("trep_edge_tick_errors_total", **unit.labels)
                log.exception("scoring tick%s failed; the steps it finalised are lost",
                              f" of model {unit.name}" if self.routed else "")  # fmt: skip

    def _tick(self, unit: ModelUnit) -> None:
        result = unit.monitor.tick(time.time())
        topics = self.config.topics
        if result.batch_rows:
            self.metrics.observe("trep_edge_inference_batch_rows", result.batch_rows, **unit.labels)
            self.metrics.observe("trep_edge_inference_seconds", result.inference_seconds, **unit.labels)
        self._lifecycle_of_scored(unit, result, first=True)  # a stream's first ok precedes an alert of the same tick
        for alert in result.alerts:
            self._publish_alert(unit, alert)
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

    def _release_silenced(self) -> None:
        """Silences that ran out: publish what they held back."""
        for message in self.control.expire(time.time()):
            self._publish_episode(self._unit_of(message["stream"]), message, notify=True)
        self.metrics.set("trep_edge_silences", len(self.control.silences))

    def _lifecycle_of_scored(self, unit: ModelUnit, result: TickResult, first: bool) -> None:
        """The scored streams' lifecycle changes: with ``first``, a stream's first ``ok`` (on its first scored
        reading); else ``pending`` and its end, from the gate's hot run after the tick (on the latest reading)."""
        lifecycle = unit.lifecycle
        if first:
            for s in result.scored:
                self._publish_status(unit, lifecycle.scored(s.stream, s.warming, s.timestamp))
            return
        if not (lifecycle.pending_enabled or lifecycle.pending):
            return  # nothing pending to publish or to end: skip a per-stream pass on every tick
        debounce = unit.config.detector.debounce
        for s in {s.stream: s for s in result.scored}.values():
            hot_run = result.hot_runs.get(s.stream, 0)
            details = {"hot_readings": hot_run, "debounce": debounce, "score": s.surprise, "threshold": s.threshold}
            self._publish_status(unit, lifecycle.scored(s.stream, s.warming, s.timestamp, hot_run, details))

    def _publish_status(self, unit: ModelUnit, change: StreamStatus | None) -> None:
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

    def _set_stale_gauge(self, unit: ModelUnit) -> None:
        self.metrics.set("trep_edge_streams_stale", len(unit.lifecycle.stale), **unit.labels)

    def _mark_stale(self, after: float) -> None:
        """Report the streams silent for ``after`` seconds as ``no_data``, once per silence."""
        now = time.time()
        for unit in self.units:
            changes = unit.lifecycle.silent(unit.monitor.silent(now, after), now, after)
            for change in changes:
                self._publish_status(unit, change)
            if changes:
                self._set_stale_gauge(unit)
                log.info("%d stream(s) silent for %.0f s: no_data (e.g. %s); %d stale in all", len(changes), after,
                         changes[0].stream, len(unit.lifecycle.stale))  # fmt: skip

    def _publish_alert(self, unit: ModelUnit, alert: AlertOut) -> None:
        message = alert_message(alert, unit.engine, self.config.revision)
        if self.archive is not None and unit is self.default:
            self.archive.record_alert(message)  # retraining leaves alert ranges out (docs/retraining.md)
        notify = self.control.on_episode(message, time.time())  # ack and silence fields; a silence holds it back
        if not notify:
            self.metrics.inc("trep_edge_alerts_withheld_total")
        self._publish_episode(unit, message, notify)
        # A record, not a notification: silences do not hold it.
        self._publish_fhir(unit, alert, message["published_at"])
        self.metrics.inc("trep_edge_alerts_total", state=alert.state, **unit.labels)
        log.info("alert %s %s (%s): score %.3g vs threshold %.3g%s", alert.alert_id, alert.state, alert.severity,
                 alert.score, alert.threshold, f" (channel {alert.channel})" if alert.channel else "")  # fmt: skip

    def _publish_fhir(self, unit: ModelUnit, alert: AlertOut, published: float) -> None:
        """With ``[fhir] enabled``, the episode change as a FHIR transaction Bundle on its own topic (runtime/trep_edge/runtime/service/fhir.py),
        naming the model that scored it (its card's channel codes)."""
        fhir = self.config.fhir
        if fhir.enabled:
            bundle = self.fhir.bundle(alert, unit.engine.card, unit.engine.sha256, fhir, published)
            self.link.publish(fill_topic(fhir.topic, alert.stream), json.dumps(bundle), qos=1)

    def _publish_episode(self, unit: ModelUnit, message: dict[str, Any], notify: bool) -> None:
        """An episode message: retained on the stream's state topic, and on the alerts topic when notified."""
        payload = json.dumps(message)
        if notify:
            self.link.publish(fill_topic(self.config.topics.alerts, message["stream"]), payload, qos=1)
        self.link.publish(fill_topic(self.config.topics.state, message["stream"]), payload, qos=1, retain=True)
        unit.lifecycle.episode(message["stream"], message)

    def _unit_of(self, stream: str) -> ModelUnit:
        """The model that holds ``stream`` (or last took its readings); the default model for one none knows."""
        held = next((unit for unit in self.units if unit.monitor.has_stream(stream)), None)
        return held or self._owner.get(stream, self.default)

    def _control_unit(self, item: Telemetry) -> ModelUnit:
        """The model whose stream a control message is about: the default model for one that names none (a pattern
        silence) or that is malformed (``Control.handle`` reports it)."""
        if not self.routed:
            return self.default
        try:
            request = parse_request(item.payload, item.control, self.config.input.max_bytes)
        except ControlError:
            return self.default
        return self.default if request.stream is None else self._unit_of(request.stream)

    def _control(self, item: Telemetry) -> None:
        """An operator command or bed event (runtime/trep_edge/runtime/service/control_topics.py): apply it, publish what it changed, reply."""
        unit = self._control_unit(item)
        outcome = self.control.handle(item, unit.monitor, unit.lifecycle.open, time.time(), self.config.input.max_bytes)
        if outcome.error is not None:
            self._reject(outcome.error.kind, str(outcome.error), item)
        for alert in outcome.cleared:
            self._publish_alert(unit, alert)
        if outcome.forget:
            unit.lifecycle.forget(outcome.forget)
            self._set_stale_gauge(unit)
            for stream in outcome.forget:  # discharged or renamed: the next reading of the id claims it afresh
                self._owner.pop(stream, None)
        for message in outcome.retain:
            self._publish_episode(self._unit_of(message["stream"]), message, notify=False)
        for message in outcome.notify:
            self._publish_episode(self._unit_of(message["stream"]), message, notify=True)
        self.metrics.inc("trep_edge_control_requests_total", request=outcome.request, result=outcome.result)
        if outcome.reply is not None:
            topic = fill_topic(self.config.topics.replies, client_id=self.config.mqtt.client_id)
            self.link.publish(topic, json.dumps(outcome.reply), qos=1)
            log.info("%s on %s: %s (%s)", outcome.request, item.topic, outcome.result, outcome.reply.get("message"))

    def _evict(self, after: float) -> None:
        """Close the streams silent for ``after`` seconds: clear their open episodes, forget their state."""
        now = time.time()
        for unit in self.units:
            silent = unit.monitor.silent(now, after)
            if not silent:
                continue
            for alert in unit.monitor.remove_streams(silent):
                self._publish_alert(unit, alert)
            unit.lifecycle.forget(silent)
            for stream in silent:
                self._owner.pop(stream, None)
            self._set_stale_gauge(unit)
            self._update_gauges()  # before the counter: a scraper that sees the eviction sees the gauges after it
            self.metrics.inc("trep_edge_streams_evicted_total", len(silent))
            log.info("closed %d stream(s) silent for %.0f s (e.g. %s)", len(silent), after, silent[0])

    def _update_gauges(self) -> None:
        self.metrics.set("trep_edge_mqtt_connected", 1.0 if self.link.connected else 0.0)
        events: dict[tuple[tuple[str, str], ...], float] = {}
        for unit in self.units:
            states = list(unit.monitor.streams.values())
            for state in ("active", "warming"):
                self.metrics.set("trep_edge_streams", states.count(state), state=state, **unit.labels)
            for event, count in unit.monitor.counters.items():
                events[tuple(sorted({"event": event, **unit.labels}.items()))] = float(count)
        self.metrics.replace("trep_edge_monitor_events_total", events)
        self.metrics.set("trep_edge_checkpoint_age_seconds", time.monotonic() - self._last_checkpoint)
        if time.monotonic() - self._last_status >= STATUS_COUNTS_INTERVAL:
            self._last_status = time.monotonic()
            mismatch = [self._period_check(unit) for unit in self.units]
            self.link.publish_status({"counters": self._counters(), "period_mismatch": mismatch[-1],
                                      "models": self._models_status()})  # fmt: skip

    def _period_check(self, unit: ModelUnit) -> dict[str, Any]:
        """Streams sampled at another period than the model learned (more than 2x off): metric, status and a log
        line whenever their number grows. Such a stream's window spans another stretch of time than the model's."""
        off = unit.monitor.period_mismatches()
        card = unit.engine.card
        self.metrics.set("trep_edge_streams_period_mismatch", len(off), **unit.labels)
        if len(off) > unit.period_mismatches:
            name, seen = next(iter(off.items()))
            log.warning("%d stream(s) send at another period than model %s was trained on (%g s): e.g. %s every "
                        "%.3g s; their windows span another stretch of time than the model learned (set [windows] "
                        "period and route them to a model of their period)", len(off), card.name, card.period, name,
                        seen)  # fmt: skip
        unit.period_mismatches = len(off)
        return {"streams": len(off), "model_period": card.period, "examples": dict(list(off.items())[:5])}

    def _counters(self) -> dict[str, Any]:
        """The counters an integrator limited to MQTT sees on the status topic (the same as /metrics)."""
        names = ("messages", "readings", "scored", "dropped", "malformed", "rejected", "alerts", "publish_refused",
                 "tick_errors", "checkpoints", "model_reloads", "sparkplug_rebirth_requests",
                 "sparkplug_seq_gaps")  # fmt: skip
        counts: dict[str, Any] = {n: self.metrics.counts(f"trep_edge_{n}_total") for n in names}
        counts["queue_depth"] = len(self.queue)
        counts["tick_backlog"] = self._backlog
        counts["streams"] = self.metrics.counts("trep_edge_streams")
        events: dict[str, int] = {}
        for unit in self.units:  # every model's together; the models' own are on /metrics
            for event, count in unit.monitor.counters.items():
                events[event] = events.get(event, 0) + count
        counts["monitor_events"] = events
        return counts

    # -- state ---------------------------------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write every model's state atomically (a failure is logged and retried at the next interval)."""
        self._last_checkpoint = time.monotonic()
        models = {self._checkpoint_key(unit): (unit.monitor.state_dict(), {
            "model": unit.engine.card.name, "model_sha256": unit.engine.sha256,
            "lifecycle": unit.lifecycle.to_json()}) for unit in self.units}  # fmt: skip
        common = {"saved_at": time.time(), "config_revision": self.config.revision, "shard": str(self.shard),
                  "control": self.control.to_json()}  # fmt: skip
        try:
            save_checkpoint(self.config.state.path, *join_models(models, common))
        except OSError as exc:
            log.error("could not write the checkpoint %s: %s", self.config.state.path, exc)
            return
        self.metrics.inc("trep_edge_checkpoints_total")

    # -- reloading -------------------------------------------------------------------------------------------------
    @staticmethod
    def _model_stamp(path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _watch_models(self) -> None:
        """Reload each model whose file changed, that model alone."""
        for unit in self.units:
            if not unit.config.model.watch:
                continue
            stamp = self._model_stamp(unit.config.model.path)
            if stamp is None or stamp == unit.stamp:
                continue
            unit.stamp = stamp
            self.reload("model file changed", config=self.config, only=unit)

    def reload(self, reason: str, config: MonitorConfig | None = None, only: ModelUnit | None = None) -> bool:
        """Load config (unless given) and models aside, then swap in the models that changed (``only``: that model
        alone, its file changed); refuse and keep the old ones on any error."""
        sections = ("mqtt", "http", "topics", "archive")
        try:
            if config is None:
                path, env, flags = self._config_source
                config = load_config(path, env, flags)
            models = checked_models(config)
            restart_only = [f"[{s}]" for s in sections if getattr(config, s) != getattr(self.config, s)]
            old, new = self.config.monitor, config.monitor
            if old.shard != new.shard:
                restart_only.append("monitor.shard")  # the state holds the streams of the running shard
            running = [(u.name, tuple(t.template for t in u.match)) for u in self.units]
            if [(m.name, m.match) for m in models] != running:
                restart_only.append("[[routes]]")  # the streams are the models' of the running routes
                config.routes = self.config.routes
                models = config.models()
            if restart_only:
                log.warning("reload (%s): changes to %s take effect after a restart", reason, ", ".join(restart_only))
            swaps = [(unit, model.config, self._prepare(unit, model.config))
                     for unit, model in zip(self.units, models) if only is None or unit is only]  # fmt: skip
        except Exception as exc:  # a bad model or config must never take the running monitor down
            which = f" of model {only.name}" if self.routed and only is not None else ""
            error = f"refused reload{which} ({reason}): {exc}"
            if only is None:
                self._config_error = error
            else:
                only.error = error
            log.error("%s; still running %s", error, ", ".join(f"model {u.engine.card.name} (sha256 "
                                                              f"{u.engine.sha256[:12]})" for u in self.units))
            self.metrics.inc("trep_edge_model_reloads_total", result="refused")
            self.link.publish_status(self._status())
            return False
        if only is None:
            keep = {s: getattr(self.config, s) for s in sections}
            self.config = config
            for section, value in keep.items():
                setattr(self.config, section, value)
            self._config_error = None
            self._bad.log_interval = config.input.log_interval
            self._bad.sample_interval = config.input.dead_letter_interval
        for unit, unit_config, prepared in swaps:
            unit.config, unit.error = unit_config, None
            unit.stamp = self._model_stamp(unit_config.model.path)
            unit.lifecycle.pending_enabled = unit_config.alerts.pending
            if prepared is None:
                continue  # nothing of this model changed: its streams are not touched
            swapped = prepared[0] is not unit.engine
            unit.engine, unit.monitor = prepared
            if self.archive is not None and swapped and unit is self.default:
                self.archive.set_header(self._archive_header())  # the next part names the new model
        log.info("reloaded (%s): %s, config revision %s", reason, ", ".join(
            f"model {u.engine.card.name} sha256 {u.engine.sha256[:12]}" for u, _, _ in swaps), self.config.revision)
        self.metrics.inc("trep_edge_model_reloads_total", result="ok")
        self._publish_model_metrics()
        self.link.publish_status(self._status())
        return True

    def _prepare(self, unit: ModelUnit, config: MonitorConfig) -> tuple[Engine, Monitor] | None:
        """A model's new engine and monitor for ``config`` (its streams' state carried over), loaded aside; None
        when neither its file nor its settings changed."""
        same_file = self._file_sha(config.model.path) == unit.engine.sha256
        if same_file and scoring_settings(config) == scoring_settings(unit.config):
            return None
        engine = unit.engine
        if config.model != unit.config.model or not same_file:
            engine = self._load_engine(config)
        state = unit.monitor.state_dict()
        monitor = Monitor.from_state(unit.engine, state, config.windows, config.alerts, config.detector)
        if engine is not unit.engine:
            monitor.swap_engine(engine)
        return engine, monitor

    @staticmethod
    def _file_sha(path: str) -> str | None:
        try:
            return file_sha256(path)
        except OSError:
            return None


def checked_models(config: MonitorConfig) -> list[ModelSettings]:
    """The configuration's models, after the checks that need more than one table (routes, lifecycle timing)."""
    models = check_routes(config)
    for model in models:
        check_lifecycle(model.config)
    return models


def check_engine(engine: Engine) -> None:
    """Refuse a model that loads but cannot score: one masked/unmasked pair on a neutral window must be finite."""
    card = engine.card
    window = np.zeros((1, card.window, card.input_dims), dtype=np.float32)
    z_unmasked, z_masked = engine.last_step_pair(window, np.zeros(1, dtype=np.int64))
    if z_unmasked.shape != (1, card.repr_dims) or not (np.isfinite(z_unmasked).all() and np.isfinite(z_masked).all()):
        raise ValueError(f"{engine.path} loads but does not score: representation shape {z_unmasked.shape} "
                         f"(expected (1, {card.repr_dims})) or non-finite values")  # fmt: skip


def run_daemon(config: MonitorConfig, config_path: str | None = None,
               flags: Mapping[tuple[str, str], str] | None = None) -> int:  # fmt: skip
    """Build and run the daemon until SIGTERM/SIGINT."""
    daemon = Daemon(config, config_path, os.environ, flags)
    for unit in daemon.units:
        routes = f" for {', '.join(t.template for t in unit.match)}" if unit.match else ""
        log.info("model %s (sha256 %s) on %s%s", unit.engine.card.name, unit.engine.sha256[:12],
                 unit.engine.providers, routes)  # fmt: skip
    log.info("config revision %s, status on %s", config.revision, daemon.status_topic)
    return daemon.run()
