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

This module is the loop and its wiring; each job has its module: ``intake`` (messages in, bad input),
``outbox`` (what is published after scoring) with ``messages`` (each message's schema), ``hot_reload`` (loading,
the file watch, reloads), ``checkpoint`` and ``resume`` (saving and restoring the state), ``daemon_metrics``
(gauges, model info, the status topic's counters) and ``routing`` (the models and which one scores a topic).
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.service.archive import ArchiveHeader, ArchiveRecorder
from trep_edge.runtime.service.checkpoint import save_models
from trep_edge.runtime.service.config import MonitorConfig
from trep_edge.runtime.service.control_topics import Control, control_filters
from trep_edge.runtime.service.daemon_metrics import (declare_daemon_metrics, period_check, publish_model_info,
                                                      status_counters, stream_gauges)
from trep_edge.runtime.service.hot_reload import Reloads, changed_files, checked_models, new_unit
from trep_edge.runtime.service.http_status import StatusServer, monitor_metrics
from trep_edge.runtime.service.intake import Intake
from trep_edge.runtime.service.messages import fill_topic, models_status, status_message
from trep_edge.runtime.service.mqtt_io import MqttLink, Telemetry, TelemetryQueue
from trep_edge.runtime.service.outbox import Outbox
from trep_edge.runtime.service.resume import restore_models
from trep_edge.runtime.service.routing import ModelUnit, Routes
from trep_edge.runtime.service.sweeps import evict_silent, mark_stale
from trep_edge.runtime.service.tick_budget import TickBudget

log = logging.getLogger(__name__)

STATUS_COUNTS_INTERVAL = 10.0
"""Seconds between retained status updates carrying the counters (the status topic is also refreshed on connect)."""


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
        self.config = config
        self.metrics = monitor_metrics()
        self.shard = Shard.parse(config.monitor.shard)
        self.routes = Routes([new_unit(model, len(models) > 1) for model in models])
        declare_daemon_metrics(self.metrics, self.shard, self.units)
        self.archive = ArchiveRecorder(config.archive, self.metrics) if config.archive.enabled else None
        self.reloads = Reloads(config_path, env, flags or {}, self.metrics)
        self.control = Control(self.shard, config.mqtt.client_id)  # acks and silences: the checkpoint's, if any
        if config.state.path and Path(config.state.path).is_file():
            restore_models(Path(config.state.path), self.units, self.shard, self.control)
        self.queue = TelemetryQueue(config.mqtt.queue_size)
        self.started_at = time.time()
        # The link reports drops and refusals to the intake, which needs the link's outbox: hence the lambdas.
        self.link = MqttLink(config.mqtt, self.queue, self.status_topic, self._status(),
                             on_drop=lambda item: self.intake.on_drop(item),
                             on_refused=lambda topic, reason: self.intake.on_refused(topic, reason),
                             control=control_filters(config))  # fmt: skip
        self.outbox = Outbox(config, self.link, self.routes, self.control, self.metrics, self.archive)
        self.intake = Intake(config, self.routes, self.outbox, self.metrics, self.shard)
        for unit in self.units:
            self.outbox.stale_gauge(unit)
        self.http: StatusServer | None = None
        if config.http.port:
            try:
                self.http = StatusServer(config.http.host, config.http.port, self.metrics, self._health, self._ready)
            except OSError as exc:
                raise ValueError(f"cannot serve metrics on {config.http.host}:{config.http.port} ({exc}); "
                                 "choose another http.port, or 0 for none") from exc  # fmt: skip
        self._stop = threading.Event()
        self._reload = threading.Event()
        self.budget = TickBudget(config.monitor)
        self._last_status = time.monotonic()
        self._last_loop = time.monotonic()
        self._last_checkpoint = time.monotonic()
        publish_model_info(self.metrics, self.units)

    # -- setup ---------------------------------------------------------------------------------------------------
    @property
    def status_topic(self) -> str:
        """The retained status topic."""
        return fill_topic(self.config.topics.status, client_id=self.config.mqtt.client_id)

    @property
    def units(self) -> list[ModelUnit]:
        """Every model, the default one last."""
        return self.routes.units

    @property
    def default(self) -> ModelUnit:
        """The ``[model]`` model: it scores every topic no route takes (the only one without routes)."""
        return self.routes.default

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
        return next((e for e in (self.reloads.config_error, *(u.error for u in self.units)) if e), None)

    def _status(self) -> dict[str, Any]:
        return status_message(self.config, self.shard, self.started_at, self.units, self.model_error)

    def _archive_header(self) -> ArchiveHeader:
        e = self.engine
        return ArchiveHeader(tuple(e.card.channels), e.card.name, e.sha256, self.config.windows.period)

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
        if self.budget.backlog:  # alive and turning: a restart would only lose the queue
            return True, f"degraded (backlog): {self.budget.backlog} message(s) wait for later ticks"
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
                if self.budget.room > 0:
                    self.queue.wait(min(0.1, max(0.0, next_tick - time.monotonic())))
                    items = self.queue.drain(self.budget.room)
                    started = time.monotonic()
                    self._ingest(items)
                    self.budget.took(len(items), time.monotonic() - started)
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
                    evict_silent(self.routes, self.outbox, evict_after)
                stale_after = self.config.monitor.stale_after
                if stale_after and now >= next_stale:
                    next_stale = now + min(1.0, stale_after / 4)
                    mark_stale(self.routes, self.outbox, stale_after)
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
        started = time.monotonic()
        self._safe_tick()
        self.budget.ticked(self.config.monitor, time.monotonic() - started, len(self.queue))
        self.metrics.set("trep_edge_tick_backlog", self.budget.backlog)

    def _ingest(self, items: list[Telemetry]) -> None:
        self.intake.ingest(items)

    # -- scoring -------------------------------------------------------------------------------------------------
    def _safe_tick(self) -> None:
        for unit in self.units:
            try:
                if unit is self.units[0]:
                    self.outbox.release_silenced()  # once per tick, before any model's alerts of this tick
                self.outbox.tick(unit, unit.monitor.tick(time.time()))
            except Exception:  # e.g. onnxruntime failing: count, log, keep the loop (and /healthz) alive
                self.metrics.inc("trep_edge_tick_errors_total", **unit.labels)
                log.exception("scoring tick%s failed; the steps it finalised are lost",
                              f" of model {unit.name}" if self.routes.routed else "")  # fmt: skip

    def _update_gauges(self) -> None:
        self.metrics.set("trep_edge_mqtt_connected", 1.0 if self.link.connected else 0.0)
        stream_gauges(self.metrics, self.units)
        self.metrics.set("trep_edge_checkpoint_age_seconds", time.monotonic() - self._last_checkpoint)
        if time.monotonic() - self._last_status >= STATUS_COUNTS_INTERVAL:
            self._last_status = time.monotonic()
            mismatch = [period_check(self.metrics, unit) for unit in self.units]
            counters = status_counters(self.metrics, self.units, len(self.queue), self.budget.backlog)
            self.link.publish_status({"counters": counters, "period_mismatch": mismatch[-1],
                                      "models": models_status(self.units)})  # fmt: skip

    # -- state ---------------------------------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Write every model's state atomically (a failure is logged and retried at the next interval)."""
        self._last_checkpoint = time.monotonic()
        common = {"saved_at": time.time(), "config_revision": self.config.revision, "shard": str(self.shard),
                  "control": self.control.to_json()}  # fmt: skip
        try:
            save_models(self.config.state.path, self.units, common)
        except OSError as exc:
            log.error("could not write the checkpoint %s: %s", self.config.state.path, exc)
            return
        self.metrics.inc("trep_edge_checkpoints_total")

    # -- reloading -------------------------------------------------------------------------------------------------
    def _watch_models(self) -> None:
        """Reload each model whose file changed, that model alone."""
        for unit in changed_files(self.units):
            self.reload("model file changed", config=self.config, only=unit)

    def reload(self, reason: str, config: MonitorConfig | None = None, only: ModelUnit | None = None) -> bool:
        """Reload config (unless given) and models (``only``: that model alone), or refuse and keep them
        (``hot_reload.Reloads.run``); either way the status topic says what runs."""
        done = self.reloads.run(reason, self.config, self.units, config, only)
        if done is not None:
            running, swapped = done
            if running is not None:
                self.config = self.outbox.config = running
                self.intake.set_config(running)
            if self.archive is not None and self.default in swapped:
                self.archive.set_header(self._archive_header())  # the next part names the new model
            publish_model_info(self.metrics, self.units)
        self.link.publish_status(self._status())
        return done is not None


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
